"""Start-up time of the command line: what a user waits for before anything happens.

    python benchmarks/startup.py [--runs 10] [--scenario scenarios/tiny.yaml]
                                 [--base REV] [--src DIR ...] [--no-pyc] [--json FILE]

Every figure is a whole process (``python -m simmodel ...``, a fresh interpreter with
``PYTHONPATH`` at the source measured), timed from just before it is spawned:

* ``python -c pass``: the interpreter alone, the floor under every other figure;
* ``--help``: ``python -m simmodel --help`` until it exits (status 0);
* ``bad input``: ``python -m simmodel run missing.yaml --out DIR`` until it exits with its
  one-line error (status 2);
* ``first event``: ``python -m simmodel run SCENARIO --out DIR --quiet`` until the
  simulation has processed its first event (scenario read, workload and cluster built;
  the process reports and exits there, listing the modules of ``HEAVY`` it has loaded:
  pandas and pyarrow, needed only to tabulate and write the results, should not be);
* ``whole run``: the same command to its end (simulation, tables, files written).

Start-up (benchmarks/README.md, "Start-up") is ``--help``, bad input and first event (on
the default tiny scenario); the goal is 0.15 s for each.  Each figure is taken ``--runs``
times, all figures and sources interleaved round-robin after one warm-up round (the
machine is noisy); min and median are printed, and the median CPU time of the process
(user + system, all threads), steadier on a loaded machine.
Bytecode: by default the children cache it (``PYTHONPYCACHEPREFIX`` in a temporary folder,
filled by the warm-up), as an installed package has it; ``--no-pyc`` measures them with
``PYTHONDONTWRITEBYTECODE=1``, so each run compiles simmodel's sources again (tens of ms
more, the case of a checkout in an environment that sets it).  ``--src DIR`` (repeatable)
measures other source trees (a folder holding ``simmodel/``), ``--base REV`` adds the
package at git revision ``REV`` (extracted with ``git archive``, no worktree).  Not part
of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.15
DEFAULT_SCENARIO = "scenarios/tiny.yaml"
FIRST_TINY = f"first event ({Path(DEFAULT_SCENARIO).name})"     # the goal's scenario
#: Third-party modules listed when loaded at the first event (numpy and yaml are needed
#: there; the others are not).
HEAVY = ("pandas", "pyarrow", "scipy", "matplotlib", "tqdm", "dask", "yaml", "numpy")
#: Child of ``first event``: the CLI itself, stopped in the simulation loop
#: (``simmodel.sim.run_until`` / ``run_with_progress``) once the first event is processed,
#: printing the wall clock then.  ``simmodel.sim`` is patched when the CLI imports it (an
#: import hook), so every import happens in the CLI's own order.
FIRST_EVENT = f"""\
import importlib.machinery, os, runpy, sys, time

def first_event(env, *args, **kwargs):
    env.step()
    heavy = ",".join(m for m in {HEAVY!r} if m in sys.modules)
    where = sys.modules["simmodel.sim"].__file__
    os.write(1, f"{{time.time()!r}} {{heavy or '-'}} {{where}}\\n".encode())
    os._exit(0)

class PatchSim(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        spec = super().find_spec(name, path, target) if name == "simmodel.sim" else None
        if spec is not None:
            run = spec.loader.exec_module
            def exec_module(module):
                run(module)
                module.run_until = module.run_with_progress = first_event
            spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, PatchSim)
sys.argv = ["simmodel"] + sys.argv[1:]
runpy.run_module("simmodel", run_name="__main__", alter_sys=True)
sys.exit("no first event: the run ended before the simulation started")
"""


def figures(scenario: str, out: str) -> dict:
    """Figure name -> (argv after the interpreter, expected exit status, first event?)."""
    run = ["-m", "simmodel", "run", scenario, "--out", out, "--quiet"]
    return {
        "python -c pass": (["-c", "pass"], 0, False),
        "simmodel --help": (["-m", "simmodel", "--help"], 0, False),
        "bad input (exit 2)": (["-m", "simmodel", "run", "missing.yaml", "--out", out], 2,
                               False),
        f"first event ({Path(scenario).name})": (["-c", FIRST_EVENT] + run[2:], 0, True),
        f"whole run ({Path(scenario).name})": (run, 0, False),
    }


def child_env(src: Path, pycache) -> dict:
    """The children's environment: simmodel from ``src``; bytecode cached under
    ``pycache`` (a folder), or never written (None)."""
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def cpu_of_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_once(src: Path, env: dict, argv: list, status: int,
              first_event: bool) -> tuple[float, float, str]:
    """Seconds from spawning ``python argv`` (simmodel from ``src``) to its exit, or to
    the first event it reports; the CPU seconds of the process (steadier on a loaded
    machine); and the heavy modules it had loaded at the first event."""
    c, t_wall, t = cpu_of_children(), time.time(), time.perf_counter()
    # cwd=src: -c and -m put the working folder first on sys.path, ahead of PYTHONPATH
    p = subprocess.run([sys.executable, *argv], env=env, cwd=src, capture_output=True,
                       text=True)
    took, cpu = time.perf_counter() - t, cpu_of_children() - c
    if p.returncode != status:
        raise SystemExit(f"{argv[:4]}: exit {p.returncode}, expected {status}:\n{p.stderr}")
    if not first_event:
        return took, cpu, ""
    stamp, heavy, where = p.stdout.split()
    if not where.startswith(str(src)):
        raise SystemExit(f"simmodel was imported from {where}, not {src}")
    return float(stamp) - t_wall, cpu, heavy


def measure(sources: dict, runs: int, scenario: str, pyc: bool = True) -> dict:
    """``{source: {figure: {"times": [...], "cpu": [...], "heavy": str}}}``, interleaved
    round-robin after a warm-up round (not counted)."""
    res: dict = {name: {} for name in sources}
    with tempfile.TemporaryDirectory(prefix="startup_") as tmp:
        figs = figures(scenario, os.path.join(tmp, "out"))
        envs = {name: child_env(src, os.path.join(tmp, f"pycache-{k}") if pyc else None)
                for k, (name, src) in enumerate(sources.items())}
        for k in range(runs + 1):
            for name, src in sources.items():
                for fig, (argv, status, first) in figs.items():
                    took, cpu, heavy = time_once(src, envs[name], argv, status, first)
                    if k:
                        rec = res[name].setdefault(fig, {"times": [], "cpu": [],
                                                         "heavy": heavy})
                        rec["times"].append(took)
                        rec["cpu"].append(cpu)
    return res


def table(res: dict, runs: int, pyc: bool) -> str:
    names = list(res)
    figs = list(next(iter(res.values())))
    width = max(len(f) for f in figs) + 2
    col = max(10, *(len(n) - 13 for n in names))
    lines = [f"start-up in s, whole processes, {runs} runs each, "
             + ("bytecode cached" if pyc else "no bytecode (PYTHONDONTWRITEBYTECODE=1)")
             + "; cpu: median CPU time of the process",
             " " * width + "".join(f"{n:>{col + 16}}" for n in names),
             " " * width + f"{'min':>{col}}{'median':>8}{'cpu':>8}" * len(names) + "   goal"]
    for fig in figs:
        row = f"{fig:<{width}}"
        for n in names:
            t, cpu = res[n][fig]["times"], res[n][fig]["cpu"]
            row += f"{min(t):>{col}.3f}{statistics.median(t):>8.3f}"
            row += f"{statistics.median(cpu):>8.3f}"
        goal = fig.startswith(("simmodel --help", "bad input")) or fig == FIRST_TINY
        lines.append(row + (f"   <= {GOAL_S:g}" if goal else ""))
    for n in names:
        heavy = [f"{fig}: {rec['heavy']}" for fig, rec in res[n].items() if rec["heavy"]]
        lines.append(f"{n}: loaded at the first event: " + "; ".join(heavy))
    return "\n".join(lines)


def extract(rev: str, into: str) -> Path:
    """The ``simmodel`` package at git revision ``rev``, unpacked into ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "simmodel"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return Path(into)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--scenario", default=DEFAULT_SCENARIO)
    ap.add_argument("--src", action="append", metavar="DIR",
                    help="source tree to measure (repeatable; default: this checkout)")
    ap.add_argument("--base", metavar="REV", help="also measure simmodel at git REV")
    ap.add_argument("--no-pyc", action="store_true",
                    help="no bytecode cache: every run compiles simmodel from source")
    ap.add_argument("--json", metavar="FILE", help="write the raw times here")
    opts = ap.parse_args(argv)
    sources = {("this" if s is None else Path(s).name): Path(s or ROOT).resolve()
               for s in (opts.src or [None])}
    with tempfile.TemporaryDirectory(prefix="startup_base_") as base_dir:
        if opts.base:
            sources = {opts.base: extract(opts.base, base_dir), **sources}
        res = measure(sources, opts.runs, str(Path(opts.scenario).resolve()),
                      pyc=not opts.no_pyc)
    print(table(res, opts.runs, pyc=not opts.no_pyc))
    if opts.json:
        Path(opts.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
