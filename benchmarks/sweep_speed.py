"""Speed of ``simmodel sweep``: the four goals of the capacity-planning feature.

    python benchmarks/sweep_speed.py [--repeat K] [--base SCENARIO] [--runs N]
                                     [--max-arrival-ms X] [--json OUT] [--from-json FILE]

The sweep is ``--runs`` (8) replications of one point: the base scenario with
``workload.max_arrival_ms`` (600,000: about 1,750 Mooncake requests, ~1-1.5 s a run on
the project's 2-core machine) for a trace base.  Replications get the seeds seed ..
seed+N-1; a trace workload under round robin does not use the seed, so every run does
exactly the same work (the script checks that the runs' request counts and mean TTFTs
agree).  A synthetic base (``--base scenarios/synthetic.yaml``) draws different arrivals
per seed: roughly, not exactly, equal work.

Goals (each ratio is formed within one repeat, from measurements taken minutes apart at
most: the machine is noisy, and absolute seconds are not comparable across invocations):

1. ``--jobs 2`` takes <= 0.6x the time of ``--jobs 1``;
2. overhead per run <= 0.2 s beyond the run itself: the ``--jobs 1`` sweep against the
   sum of ``wall_s`` in points.parquet, and against N ``simmodel.run`` calls timed
   directly (each reads the trace, as a user's loop would; the sum with the workload
   built once is shown under the details);
3. ``--dask local:2`` within 1.3x of ``--jobs 2``: with the LocalCluster's start-up,
   without it (start-up = ``import distributed`` + LocalCluster + Client, timed in the
   helper process), and in process with a cluster started beforehand;
4. a re-run of the finished sweep (all cached) takes <= 5% of the first run.

Whole-process times run ``python -m simmodel sweep FILE --out TMP ... --quiet`` through
``subprocess`` into fresh temporary folders.  In-process times come from helper
subprocesses (this script with ``--_helper``), so every repeat starts cold: no trace in
the runner's per-process cache (each helper first runs scenarios/tiny.yaml, so that the
modules a run imports lazily are loaded before anything is timed).  A second table gives
cross-checks in CPU seconds (less sensitive to other load), how much of two cores the
machine gave, and two what-ifs of fixes, made without touching simmodel's files: dask
workers forked instead of spawned (``DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD=
fork``), and the cached re-run with the t quantile from ``scipy.special.stdtrit``
instead of ``scipy.stats.t`` (patched in that process).  Each measurement is repeated
``--repeat`` times; the table shows the median of the per-repeat values (and their
range).  The exit status is 0 whatever the results (a benchmark, not a test); failed
goals are printed as ``FAIL`` lines.  Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_BASE = ROOT / "scenarios" / "mooncake_conversation.yaml"
PY = sys.executable


# --- the sweep file ---------------------------------------------------------------------

def write_spec(folder: str, base: Path, runs: int,
               max_arrival_ms: float | None) -> tuple[str, str]:
    """Write the benchmark's sweep file into ``folder``; return (path, description)."""
    sys.path.insert(0, str(ROOT))
    import simmodel
    from simmodel.capacity.keys import unknown_part

    scenario = simmodel.load_scenario(str(base))
    settings: dict = {}
    what = "the base as is"
    if max_arrival_ms and scenario.workload.trace is not None:
        if unknown_part("workload.max_arrival_ms") is None:
            settings["workload.max_arrival_ms"] = float(max_arrival_ms)
            what = f"workload.max_arrival_ms: {max_arrival_ms:g}"
        else:                      # an older simmodel: cut the simulation instead
            settings["run.max_sim_time_ms"] = float(max_arrival_ms)
            what = f"run.max_sim_time_ms: {max_arrival_ms:g} (no workload.max_arrival_ms)"
    lines = ["name: sweep-speed", f"base: {json.dumps(str(base.resolve()))}",
             f"replications: {runs}", "points:", "  - label: speed"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in settings.items()]
    path = os.path.join(folder, "sweep_speed.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path, f"{base.name}, {what}, {runs} replications"


# --- whole-process measurements ---------------------------------------------------------

def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(cmd: list[str], cwd: str, env: dict | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of ``cmd`` as a whole process, CPU including the worker
    processes it waited for; ``env``: extra environment variables; raises on a non-zero
    exit."""
    full = None if env is None else {**os.environ, **env}
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=full)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return wall, cpu


def cli_sweep(spec: str, out: str, *where: str, env: dict | None = None,
              stdtrit: bool = False) -> tuple[float, float]:
    head = [PY, __file__, "--_cli-stdtrit"] if stdtrit else [PY, "-m", "simmodel"]
    return timed([*head, "sweep", spec, "--out", out, *where, "--quiet"],
                 cwd=os.path.dirname(spec), env=env)


_BUSY = "import time\nt = time.perf_counter()\nx = 0\nfor i in range({n}): x += i * i\n"


def headroom(n: int = 12_000_000) -> dict:
    """How much of two cores this machine gives right now: the wall time of one
    CPU-bound process and of two at once (ideal: equal)."""
    code = _BUSY.format(n=n)
    one, _ = timed([PY, "-c", code], cwd=tempfile.gettempdir())
    t0 = time.perf_counter()
    procs = [subprocess.Popen([PY, "-c", code]) for _ in range(2)]
    for p in procs:
        p.wait()
    return {"one_s": one, "two_s": time.perf_counter() - t0}


def helper(mode: str, spec: str, tmp: str) -> dict:
    """Run this script's ``--_helper MODE`` in a fresh process; return its JSON."""
    proc = subprocess.run([PY, __file__, "--_helper", mode, spec, tmp], cwd=tmp,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"helper {mode}: exit {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def points_of(out: str) -> dict:
    """Σ wall_s and a check that every run did the same work."""
    import pandas as pd

    t = pd.read_parquet(os.path.join(out, "points.parquet"))
    same = (set(t["status"]) == {"ok"} and t["num_requests"].nunique() == 1
            and t["mean_ttft_ms"].nunique() == 1)
    return {"sum_wall_s": float(t["wall_s"].sum()), "runs": int(len(t)),
            "wall_s": [float(x) for x in t["wall_s"]], "identical_work": bool(same),
            "num_requests": int(t["num_requests"].iloc[0])}


# --- in-process measurements (run in a fresh helper process) -----------------------------

def _warm_up() -> None:
    """Import what a run imports lazily (a run of scenarios/tiny.yaml, ~0.1 s), so that
    neither helper's first timed call pays for it (the runner's trace cache stays
    empty)."""
    import simmodel
    simmodel.run(simmodel.load_scenario(str(ROOT / "scenarios" / "tiny.yaml")))


def _helper_serial(spec_path: str, tmp: str) -> dict:
    """N direct ``simmodel.run`` calls (reading the trace each time), N with the workload
    built once, then the in-process sweep with ``jobs=1`` and its cached re-run."""
    t0 = time.perf_counter()
    import dataclasses

    import simmodel
    from simmodel.capacity.spec import load_spec
    out: dict = {"import_s": time.perf_counter() - t0}
    _warm_up()
    spec = load_spec(spec_path, kind="sweep")
    point = spec.points[0]
    scenarios = [dataclasses.replace(point.scenario, seed=point.scenario.seed + r)
                 for r in range(spec.replications)]
    direct, cpu = [], []
    for sc in scenarios:
        t, c = time.perf_counter(), time.process_time()
        simmodel.run(sc, stats_from_ms=spec.warmup_ms)
        direct.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    out["direct_s"], out["direct_cpu"] = direct, cpu
    if point.scenario.workload.trace is not None:
        from simmodel.rng import Streams
        from simmodel.workload.build import build_workload
        cl = point.scenario.cluster
        bs = (cl.prefill.engine if cl.disaggregated else cl.engine).effective_block_size
        t, c = time.perf_counter(), time.process_time()
        wl = build_workload(point.scenario.workload, engine_block_size=bs,
                            streams=Streams(point.scenario.seed))
        out["build_workload_s"] = time.perf_counter() - t
        out["build_workload_cpu"] = time.process_time() - c
        pre, cpu = [], []
        for sc in scenarios:
            t, c = time.perf_counter(), time.process_time()
            simmodel.run(sc, workload=wl, stats_from_ms=spec.warmup_ms)
            pre.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        out["prebuilt_s"], out["prebuilt_cpu"] = pre, cpu
    folder = os.path.join(tmp, "inproc-jobs1")
    t = time.perf_counter()
    simmodel.sweep(spec_path, out=folder, jobs=1)
    out["sweep_jobs1_s"] = time.perf_counter() - t
    t = time.perf_counter()
    res = simmodel.sweep(spec_path, out=folder, jobs=1)
    out["sweep_cached_s"] = time.perf_counter() - t
    out["cached_all"] = bool(len(res.points) == spec.replications)
    return out


def _helper_parallel(spec_path: str, tmp: str) -> dict:
    """The in-process sweep with ``jobs=2``, then on a LocalCluster started beforehand
    (the same settings as ``--dask local:2``), with the cluster's start-up and shutdown
    timed apart."""
    t0 = time.perf_counter()
    import simmodel
    out: dict = {"import_s": time.perf_counter() - t0}
    _warm_up()
    t = time.perf_counter()
    simmodel.sweep(spec_path, out=os.path.join(tmp, "inproc-jobs2"), jobs=2)
    out["sweep_jobs2_s"] = time.perf_counter() - t
    t = time.perf_counter()
    from distributed import Client, LocalCluster
    out["import_distributed_s"] = time.perf_counter() - t
    t = time.perf_counter()
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=50)
    client = Client(cluster)
    out["cluster_start_s"] = time.perf_counter() - t
    t = time.perf_counter()
    simmodel.sweep(spec_path, client, out=os.path.join(tmp, "inproc-dask"))
    out["sweep_dask_s"] = time.perf_counter() - t
    t = time.perf_counter()
    client.close()
    cluster.close()
    out["cluster_close_s"] = time.perf_counter() - t
    return out


def _helper_probe(spec_path: str, tmp: str) -> dict:
    """Fixed costs of a fresh process: importing the CLI, then ``scipy.stats`` (which
    ``simmodel.capacity.stats.t_quantile`` imports when the summary table is built)."""
    t = time.perf_counter()
    import simmodel.cli  # noqa: F401
    import simmodel.cli_capacity  # noqa: F401
    out = {"import_cli_s": time.perf_counter() - t}
    t = time.perf_counter()
    import scipy.stats  # noqa: F401
    out["import_scipy_stats_s"] = time.perf_counter() - t
    return out


HELPERS = {"serial": _helper_serial, "parallel": _helper_parallel, "probe": _helper_probe}


def _cli_stdtrit(argv: list[str]) -> int:
    """What-if for goal 4: the CLI with ``simmodel.capacity.stats.t_quantile`` computed
    by ``scipy.special.stdtrit`` (same values) instead of ``scipy.stats.t`` (whose import
    costs ~0.6 s).  Patched in this process only; simmodel's files are not touched."""
    import math

    from simmodel.capacity import stats

    def t_quantile(n: int) -> float:
        if n < 2:
            return math.nan
        from scipy.special import stdtrit
        return float(stdtrit(n - 1, 0.975))

    stats.t_quantile = t_quantile
    from simmodel.cli import main as cli_main
    return cli_main(argv)


#: What-if for goal 3: LocalCluster workers forked from the CLI process (which has
#: simmodel imported) instead of spawned; set through dask's configuration only.
FORK_ENV = {"DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"}


# --- one repeat, the goals, the table ---------------------------------------------------

def one_repeat(spec: str, tmp: str, i: int, log) -> dict:
    def fresh(name: str) -> str:
        path = os.path.join(tmp, f"r{i}-{name}")
        shutil.rmtree(path, ignore_errors=True)
        return path

    m: dict = {}
    run1 = fresh("jobs1")
    log(f"  repeat {i + 1}: two cores free?")
    m["headroom"] = headroom()
    log(f"  repeat {i + 1}: --jobs 1")
    m["cli_jobs1_s"], m["cli_jobs1_cpu"] = cli_sweep(spec, run1, "--jobs", "1")
    m["points"] = points_of(run1)
    log(f"  repeat {i + 1}: --jobs 2")
    m["cli_jobs2_s"], m["cli_jobs2_cpu"] = cli_sweep(spec, fresh("jobs2"), "--jobs", "2")
    log(f"  repeat {i + 1}: cached re-run")
    m["cli_cached_s"], m["cli_cached_cpu"] = cli_sweep(spec, run1, "--jobs", "1")
    log(f"  repeat {i + 1}: --dask local:2")
    m["cli_dask_s"], m["cli_dask_cpu"] = cli_sweep(spec, fresh("dask"), "--dask", "local:2")
    log(f"  repeat {i + 1}: what-ifs (forked dask workers; t quantile without scipy.stats)")
    m["cli_dask_fork_s"], _ = cli_sweep(spec, fresh("dask-fork"), "--dask", "local:2",
                                        env=FORK_ENV)
    m["cli_cached_stdtrit_s"], _ = cli_sweep(spec, run1, "--jobs", "1", stdtrit=True)
    log(f"  repeat {i + 1}: in process (jobs=2, pre-started LocalCluster)")
    m["parallel"] = helper("parallel", spec, tmp_sub(tmp, f"r{i}-parallel"))
    log(f"  repeat {i + 1}: in process (direct runs, jobs=1, cached)")
    m["serial"] = helper("serial", spec, tmp_sub(tmp, f"r{i}-serial"))
    m["probe"] = helper("probe", spec, tmp_sub(tmp, f"r{i}-probe"))
    m["cli_floor_s"], _ = timed([PY, "-c", "import simmodel.cli, simmodel.cli_capacity"], tmp)
    return m


def tmp_sub(tmp: str, name: str) -> str:
    path = os.path.join(tmp, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def goals(m: dict) -> list[tuple[str, float, str]]:
    """(goal, value, target) rows of one repeat."""
    n = m["points"]["runs"]
    s, p = m["serial"], m["parallel"]
    direct = sum(s["direct_s"])
    start = p["import_distributed_s"] + p["cluster_start_s"]
    return [
        ("1 --jobs 2 / --jobs 1 (CLI)", m["cli_jobs2_s"] / m["cli_jobs1_s"], "<= 0.60x"),
        ("1 jobs=2 / jobs=1 (in process)", p["sweep_jobs2_s"] / s["sweep_jobs1_s"],
         "<= 0.60x"),
        ("2 overhead/run: CLI --jobs 1 - sum(wall_s)",
         (m["cli_jobs1_s"] - m["points"]["sum_wall_s"]) / n, "<= 0.20 s"),
        ("2 overhead/run: CLI --jobs 1 - N direct runs",
         (m["cli_jobs1_s"] - direct) / n, "<= 0.20 s"),
        ("2 overhead/run: in-process jobs=1 - N direct runs",
         (s["sweep_jobs1_s"] - direct) / n, "<= 0.20 s"),
        ("3 dask / jobs 2 (CLI, with start-up)", m["cli_dask_s"] / m["cli_jobs2_s"],
         "<= 1.30x"),
        ("3 dask / jobs 2 (CLI, minus start-up)", (m["cli_dask_s"] - start) / m["cli_jobs2_s"],
         "<= 1.30x"),
        ("3 dask / jobs 2 (in process, cluster pre-started)",
         p["sweep_dask_s"] / p["sweep_jobs2_s"], "<= 1.30x"),
        ("4 cached / first (CLI, whole process)", m["cli_cached_s"] / m["cli_jobs1_s"],
         "<= 5%"),
        ("4 cached / first (in process)", s["sweep_cached_s"] / s["sweep_jobs1_s"],
         "<= 5%"),
    ]


def checks(m: dict) -> list[tuple[str, float, str]]:
    """Cross-checks (no FAIL lines): CPU seconds instead of wall seconds, less
    sensitive to a busy machine (the runs' own CPU: one trace read plus N simulations
    with the workload built once; for a synthetic base, the N direct runs); how much of
    two cores the machine gave just before the sweeps; and two what-ifs of possible
    fixes (see ``FORK_ENV`` and ``_cli_stdtrit``)."""
    n = m["points"]["runs"]
    s, h = m["serial"], m["headroom"]
    own = (s["build_workload_cpu"] + sum(s["prebuilt_cpu"]) if "prebuilt_cpu" in s
           else sum(s["direct_cpu"]))
    return [
        ("1 machine: 2 busy processes / 1, wall (ideal 1x)", h["two_s"] / h["one_s"], "info"),
        ("2 overhead/run, CPU: CLI --jobs 1 - the runs' own",
         (m["cli_jobs1_cpu"] - own) / n, "<= 0.20 s"),
        ("4 cached / first, CPU (CLI, whole process)",
         m["cli_cached_cpu"] / m["cli_jobs1_cpu"], "<= 5%"),
        ("3 what-if: dask, forked workers / jobs 2 (CLI)",
         m["cli_dask_fork_s"] / m["cli_jobs2_s"], "<= 1.30x"),
        ("4 what-if: cached, t quantile via scipy.special",
         m["cli_cached_stdtrit_s"] / m["cli_jobs1_s"], "<= 5%"),
    ]


def passed(value: float, target: str) -> bool | None:
    """``value`` meets ``target`` (``<= 0.60x``, ``<= 0.20 s``, ``<= 5%``; None for
    ``info``)."""
    if target == "info":
        return None
    num = float(target.split()[1].rstrip("x%s"))
    return value <= (num / 100 if target.endswith("%") else num)


DETAILS = [
    ("CLI --jobs 1", lambda m: m["cli_jobs1_s"]),
    ("CLI --jobs 2", lambda m: m["cli_jobs2_s"]),
    ("CLI --dask local:2", lambda m: m["cli_dask_s"]),
    ("CLI cached re-run", lambda m: m["cli_cached_s"]),
    ("CLI --dask local:2, forked workers (what-if)", lambda m: m["cli_dask_fork_s"]),
    ("CLI cached re-run, scipy.special (what-if)", lambda m: m["cli_cached_stdtrit_s"]),
    ("CLI --jobs 1, CPU", lambda m: m["cli_jobs1_cpu"]),
    ("CLI --jobs 2, CPU (all processes)", lambda m: m["cli_jobs2_cpu"]),
    ("CLI --dask local:2, CPU (all processes)", lambda m: m["cli_dask_cpu"]),
    ("CLI cached re-run, CPU", lambda m: m["cli_cached_cpu"]),
    ("sum(wall_s) of points.parquet (--jobs 1)", lambda m: m["points"]["sum_wall_s"]),
    ("N direct simmodel.run (trace read each time)", lambda m: sum(m["serial"]["direct_s"])),
    ("N simmodel.run, workload built once", lambda m: sum(m["serial"].get("prebuilt_s", [0]))),
    ("build_workload (trace read), once", lambda m: m["serial"].get("build_workload_s", 0.0)),
    ("N simmodel.run, workload built once, CPU",
     lambda m: sum(m["serial"].get("prebuilt_cpu", [0]))),
    ("busy loop, 1 process", lambda m: m["headroom"]["one_s"]),
    ("busy loop, 2 processes at once", lambda m: m["headroom"]["two_s"]),
    ("in-process sweep jobs=1", lambda m: m["serial"]["sweep_jobs1_s"]),
    ("in-process sweep, cached", lambda m: m["serial"]["sweep_cached_s"]),
    ("in-process sweep jobs=2", lambda m: m["parallel"]["sweep_jobs2_s"]),
    ("in-process sweep, dask pre-started", lambda m: m["parallel"]["sweep_dask_s"]),
    ("import distributed", lambda m: m["parallel"]["import_distributed_s"]),
    ("LocalCluster(2) + Client start", lambda m: m["parallel"]["cluster_start_s"]),
    ("LocalCluster close", lambda m: m["parallel"]["cluster_close_s"]),
    ("process: python -c 'import simmodel.cli'", lambda m: m["cli_floor_s"]),
    ("import simmodel CLI (in a fresh process)", lambda m: m["probe"]["import_cli_s"]),
    ("import scipy.stats after simmodel", lambda m: m["probe"]["import_scipy_stats_s"]),
]


def fmt(goal: str, v: float) -> str:
    if goal.startswith("4"):
        return f"{100 * v:.1f}%"
    if goal.startswith("2"):
        return f"{v:.3f} s"
    return f"{v:.3f}x"


def table(per: list[list[tuple[str, float, str]]], fails: list[str] | None) -> list[str]:
    """The rows' medians and ranges with a verdict; a failed goal is added to ``fails``
    (None: cross-checks, verdicts in lower case and in parentheses)."""
    w = max(len(r[0]) for r in per[0])
    lines = [f"{'goal':{w}}  {'measured':>10}  {'range':>19}  {'target':>9}  result",
             "-" * (w + 52)]
    for j, (goal, _, target) in enumerate(per[0]):
        vals = [p[j][1] for p in per]
        med = statistics.median(vals)
        ok = passed(med, target)
        rng = f"[{fmt(goal, min(vals))}-{fmt(goal, max(vals))}]"
        verdict = "-" if ok is None else "pass" if ok else "FAIL"
        if fails is None and ok is not None:
            verdict = f"({verdict.lower()})"
        lines.append(f"{goal:{w}}  {fmt(goal, med):>10}  {rng:>19}  {target:>9}  {verdict}")
        if ok is False and fails is not None:
            fails.append(f"FAIL: goal {goal}: {fmt(goal, med)} (target {target})")
    return lines


def report(ms: list[dict], describe: str) -> list[str]:
    lines = [f"sweep: {describe}; {ms[0]['points']['num_requests']} requests a run; "
             f"repeats: {len(ms)} (median, [min-max])",
             f"identical work in every run (same request count and mean TTFT): "
             f"{all(m['points']['identical_work'] for m in ms)}", ""]
    fails: list[str] = []
    lines += table([goals(m) for m in ms], fails)
    lines += ["", "cross-checks and what-ifs (not goals):"]
    lines += table([checks(m) for m in ms], None)
    lines += ["", "details (median seconds, [min-max]):"]
    wd = max(len(d[0]) for d in DETAILS)
    for name, get in DETAILS:
        vals = [get(m) for m in ms]
        lines.append(f"  {name:{wd}}  {statistics.median(vals):7.3f}  "
                     f"[{min(vals):.3f}-{max(vals):.3f}]")
    lines.append("")
    lines += fails or ["all goals pass"]
    return lines


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--_cli-stdtrit":
        sys.path.insert(0, str(ROOT))
        return _cli_stdtrit(argv[1:])
    if argv and argv[0] == "--_helper":
        sys.path.insert(0, str(ROOT))
        mode, spec, tmp = argv[1:4]
        print(json.dumps(HELPERS[mode](spec, tmp)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, metavar="K",
                    help="repeat every measurement K times; report the median (default 1)")
    ap.add_argument("--base", type=Path, default=DEFAULT_BASE, metavar="SCENARIO",
                    help="base scenario (default scenarios/mooncake_conversation.yaml)")
    ap.add_argument("--runs", type=int, default=8, metavar="N",
                    help="replications of the one point (default 8)")
    ap.add_argument("--max-arrival-ms", type=float, default=600000.0, metavar="X",
                    help="workload.max_arrival_ms for a trace base (default 600000; 0: "
                         "the whole trace)")
    ap.add_argument("--json", metavar="OUT", help="also save every measurement here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--from-json", metavar="FILE",
                    help="measure nothing: print the report of a file saved with --json")
    opts = ap.parse_args(argv)
    if opts.from_json:
        with open(opts.from_json, encoding="utf-8") as f:
            saved = json.load(f)
        print("\n".join(report(saved["repeats"], saved["describe"])))
        return 0
    if opts.repeat < 1 or opts.runs < 1:
        ap.error("--repeat and --runs must be at least 1")
    if not opts.base.is_file():
        ap.error(f"--base: no such file: {opts.base}")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    tmp = tempfile.mkdtemp(prefix="sweep_speed-")
    try:
        spec, describe = write_spec(tmp, opts.base, opts.runs, opts.max_arrival_ms)
        log(f"sweep file {spec}: {describe}")
        ms = []
        for i in range(opts.repeat):
            try:
                ms.append(one_repeat(spec, tmp, i, log))
            except RuntimeError as e:
                print(f"FAIL: repeat {i + 1} could not be measured: {e}")
        if not ms:
            return 0
        print("\n".join(report(ms, describe)))
        if opts.json:
            with open(opts.json, "w", encoding="utf-8") as f:
                json.dump({"describe": describe, "repeats": ms,
                           "goals": [goals(m) for m in ms],
                           "checks": [checks(m) for m in ms]}, f, indent=2)
    finally:
        if opts.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
