"""Wall time of a run with ``aic`` timing against the same run with the polynomial.

    python benchmarks/aic_speed.py [--repeats 3]

Runs ``scenarios/mooncake_conversation.yaml`` (polynomial) and
``benchmarks/scenarios/aic_mooncake_conversation.yaml`` (the same scenario, its timing
model ``aic``) back to back, in alternating order, each in a fresh interpreter timing
``load_scenario`` + ``run`` (``ab_speed.time_once``: start-up and imports excluded; the
library's engine build is included).  Reports the medians and the median per-repeat ratio
aic / polynomial of wall and CPU time (the goal: at most 2).  Not part of the tests.
"""
from __future__ import annotations

import argparse
import statistics
import sys

from ab_speed import ROOT, time_once

SCENARIOS = {"polynomial": ROOT / "scenarios/mooncake_conversation.yaml",
             "aic": ROOT / "benchmarks/scenarios/aic_mooncake_conversation.yaml"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args(argv)
    wall, cpu = {k: [] for k in SCENARIOS}, {k: [] for k in SCENARIOS}
    ratios, cpu_ratios = [], []
    for k in range(opts.repeats):
        order = list(SCENARIOS.items())
        recs = {name: time_once(ROOT, str(path))
                for name, path in (order if k % 2 == 0 else order[::-1])}
        for name, rec in recs.items():
            wall[name].append(rec["wall_s"])
            cpu[name].append(rec["cpu_s"])
        ratios.append(recs["aic"]["wall_s"] / recs["polynomial"]["wall_s"])
        cpu_ratios.append(recs["aic"]["cpu_s"] / recs["polynomial"]["cpu_s"])
    for name in SCENARIOS:
        print(f"{name:<11} wall {statistics.median(wall[name]):.2f} s, "
              f"CPU {statistics.median(cpu[name]):.2f} s (medians of {opts.repeats})")
    print(f"aic / polynomial: wall {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}), CPU "
          f"{statistics.median(cpu_ratios):.2f} (range {min(cpu_ratios):.2f}-"
          f"{max(cpu_ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
