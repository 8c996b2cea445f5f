"""Many generated fault cases: the reliability property of the test suite, at scale.

    python benchmarks/fault_cases.py [--cases 10000] [--seed 0]

Draws ``--cases`` scenarios from the strategy of
``tests/invariants/test_faults_reliability.py`` (generated workloads x fault schedules x
planner policies, aggregated and disaggregated) and checks each as the test does:
conservation, monotone times, KV within the pool and nothing held at the end, and the
same results twice.  Prints the count, failures and the wall time.  Exit 0 when every
case passed.  Not part of the tests (CI runs 150 of these).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    opts = ap.parse_args(argv)

    from hypothesis import HealthCheck, given, seed, settings

    from tests.invariants.test_faults_reliability import (assert_same, build_and_run, check,
                                                          scenarios)

    counts = {"cases": 0, "retried": 0, "failures": 0}
    tmp = Path(tempfile.mkdtemp(prefix="fault_cases_"))

    @seed(opts.seed)
    @settings(max_examples=opts.cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(spec=scenarios())
    def one(spec):
        cluster, res = build_and_run(tmp, spec)
        check(cluster, res, spec)
        _, again = build_and_run(tmp, spec)
        assert_same(res, again)
        counts["cases"] += 1
        counts["retried"] += int((res.requests.attempts > 1).any())
        counts["failures"] += res.summary.get("worker_failures", 0)

    t0 = time.perf_counter()
    ok = True
    try:
        one()
    except Exception as exc:        # hypothesis re-raises the shrunk failing case(s)
        ok = False
        for e in getattr(exc, "exceptions", [exc]):
            print(f"FAILED: {type(e).__name__}: {e}")
            for note in getattr(e, "__notes__", []):
                print(note)
            print("".join(traceback.format_tb(e.__traceback__)[-3:]))
    wall = time.perf_counter() - t0
    print(f"{counts['cases']} cases run (each twice), {counts['retried']} with retried "
          f"requests, {counts['failures']} worker failures in all; {wall:.1f} s wall "
          f"({1000 * wall / max(1, counts['cases']):.1f} ms a case)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
