"""Wall time of one scenario under two versions of simmodel, measured in the same run.

    python benchmarks/ab_speed.py SCENARIO.yaml --base REV [--candidate DIR] [--repeats 5]

``REV`` (a commit, default ``HEAD``) is checked out into a temporary git worktree; the
candidate is ``DIR`` (default: this working tree).  Each repeat runs both versions back to back, in
alternating order, each in a fresh interpreter (``PYTHONPATH`` pointing at its source)
timing ``load_scenario`` + ``run`` inside the process, so interpreter start-up and imports
are excluded.  Reported: the median of each, and the median of the per-repeat ratios
candidate / base, of wall time and of the process's CPU time (the machine is noisy; a
ratio taken within one repeat is the figure to quote, and on a loaded machine the CPU-time
ratio is the steadier one).  Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMER = ("import json, sys, time, simmodel\n"
         "t, c = time.perf_counter(), time.process_time()\n"
         "r = simmodel.run(simmodel.load_scenario(sys.argv[1]))\n"
         "print(json.dumps({'wall_s': time.perf_counter() - t,\n"
         "                  'cpu_s': time.process_time() - c, 'src': simmodel.__file__,\n"
         "                  'completed': r.summary['completed_requests']}))\n")


def time_once(src: Path, scenario: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    # cwd=src: ``python -c`` puts the working folder first on sys.path
    out = subprocess.run([sys.executable, "-c", TIMER, scenario], env=env, check=True,
                         cwd=src, capture_output=True, text=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    if not rec["src"].startswith(str(src)):
        raise SystemExit(f"simmodel was imported from {rec['src']}, not {src}")
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--base", default="HEAD")
    ap.add_argument("--candidate", default=str(ROOT))
    ap.add_argument("--repeats", type=int, default=5)
    opts = ap.parse_args(argv)
    scenario = str(Path(opts.scenario).resolve())
    with tempfile.TemporaryDirectory(prefix="ab_speed_") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q",
                        str(base), opts.base], check=True)
        try:
            times = {"base": [], "candidate": []}
            ratios, cpu_ratios = [], []
            for k in range(opts.repeats):
                order = (("base", base), ("candidate", Path(opts.candidate).resolve()))
                recs = {}
                for name, src in (order if k % 2 == 0 else order[::-1]):
                    recs[name] = time_once(src, scenario)
                    times[name].append(recs[name]["wall_s"])
                if recs["base"]["completed"] != recs["candidate"]["completed"]:
                    print("warning: completed requests differ:",
                          recs["base"]["completed"], recs["candidate"]["completed"])
                ratios.append(recs["candidate"]["wall_s"] / recs["base"]["wall_s"])
                cpu_ratios.append(recs["candidate"]["cpu_s"] / recs["base"]["cpu_s"])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(base)], check=False)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{Path(scenario).name}: base {opts.base} {med['base']:.3f} s, candidate "
          f"{med['candidate']:.3f} s (medians of {opts.repeats}); candidate/base "
          f"{statistics.median(ratios):.3f} (median of per-repeat ratios, "
          f"range {min(ratios):.3f}-{max(ratios):.3f}); CPU time candidate/base "
          f"{statistics.median(cpu_ratios):.3f} (range {min(cpu_ratios):.3f}-"
          f"{max(cpu_ratios):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
