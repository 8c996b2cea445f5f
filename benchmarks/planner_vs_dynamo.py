"""Scaling against the reference with the same policy object.

Each case is a scenario in ``benchmarks/planner/`` whose ``planner:`` is ``kind: python``
with a policy from ``benchmarks/planner/policies.py`` (plain Python, loadable by both
sides).  The scenario runs through ``ai-dynamo-runtime==1.6.1`` (``scaling_policy=``, via
``dynamo_runner.py``) and through simmodel; compared are every request (TTFT/E2E ≤ 1e-6
relative, worker ids), the worker-seconds and gpu_hours, the lifecycle transitions, and
every snapshot the policy was shown (all keys; numbers ≤ 1e-6 relative; forward-pass
metrics matched by worker id).

    python benchmarks/planner_vs_dynamo.py [CASE.yaml ...] [--dynamo-python PATH] [-v]

Without cases, every ``benchmarks/planner/*.yaml``.  Exit status 0 when all agree.  Not
part of the test suite.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from dynamo_runner import Recorder  # noqa: E402  (plain Python, no reference import)
from vs_dynamo import (compare_requests, match_by_ids, match_by_shape,  # noqa: E402
                       ours_records, reference_job, run_reference)

TOL = 1e-6


def _close(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
            or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) <= TOL * max(abs(b), 1e-9) or abs(a - b) <= 1e-9


def diff_snapshot(ours: dict, ref: dict, where: str) -> list[str]:
    out = []
    for key in sorted(set(ours) | set(ref)):
        if key not in ours or key not in ref:
            out.append(f"{where}.{key}: only in {'ours' if key in ours else 'reference'}")
            continue
        a, b = ours[key], ref[key]
        if key.endswith("_fpm_snapshots"):
            ma = {(f["worker_id"], f["dp_rank"]): f for f in a}
            mb = {(f["worker_id"], f["dp_rank"]): f for f in b}
            if ma.keys() != mb.keys():
                out.append(f"{where}.{key}: workers {sorted(ma)} vs reference {sorted(mb)}")
                continue
            for w in ma:
                out += diff_snapshot(ma[w], mb[w], f"{where}.{key}[{w[0]}]")
        elif isinstance(a, dict):
            out += diff_snapshot(a, b, f"{where}.{key}")
        elif isinstance(a, list):
            if list(a) != list(b):
                out.append(f"{where}.{key}: {a} vs reference {b}")
        elif not _close(a, b):
            out.append(f"{where}.{key}: {a} vs reference {b}")
    return out


def check(path: str, python: str, verbose: bool) -> bool:
    import simmodel
    from simmodel.cluster.policies import make_policy

    scenario = simmodel.load_scenario(path)
    spec = scenario.planner.policy.split(":")
    rec = Recorder(make_policy(scenario))
    t0 = time.perf_counter()
    res = simmodel.run(scenario, scaling_policy=rec)
    ours_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="planner_vs_dynamo_") as tmp:
        job, how = reference_job(scenario, Path(tmp))
        job["policy"] = {"file": str(Path(scenario.planner.base_dir) / f"{spec[0]}.py"),
                         "attr": spec[1]}
        ref = run_reference(python, job, Path(tmp))
    print(f"== {path}")
    print(f"  wall: ours {ours_s:.3f} s in process, reference {ref['wall_s']:.3f} s in call "
          f"(ratio {ours_s / max(ref['wall_s'], 1e-9):.1f}x; both with the policy in Python)")
    ok = True
    ours = ours_records(res)
    match = match_by_ids if how == "ids" else match_by_shape
    pairs, ours_only, ref_only, _ = match(ours, ref["per_request"])
    if how == "ids" and ours_only:      # rows without session ids: match by shape
        pairs, ours_only, ref_only, _ = match_by_shape(ours, ref["per_request"])
    cmp = compare_requests(pairs)
    worst = max(cmp["worst"][m]["rel_err"] for m in ("ttft_ms", "e2e_latency_ms"))
    mism = {k: v for k, v in cmp["mismatches"].items() if v}
    print(f"  requests: {len(pairs)} matched, {len(ours_only)} ours only, {len(ref_only)} "
          f"reference only; worst TTFT/E2E rel err {worst:.3g}; mismatches {mism or 'none'}")
    ok &= worst <= TOL and not mism and not ours_only and not ref_only
    for k in ("decode_worker_seconds", "prefill_worker_seconds", "gpu_hours", "duration_ms"):
        a, b = res.summary[k], ref["summary"][k]
        rel = abs(a - b) / max(abs(b), 1e-12)
        ok &= rel <= TOL
        print(f"  {k:24s} ours {a:.9g}  reference {b:.9g}  rel {rel:.3g}")
    lc = res.lifecycle
    ours_ops = sorted((r.pool if r.pool != "agg" else "decode", int(r.worker), r.transition,
                       round(r.at_ms, 6)) for r in lc.itertuples())
    ref_ops = sorted((op["pool"] if op["pool"] != "agg" else "decode", t["worker_id"],
                      t["transition"], round(op["at_ms"], 6))
                     for op in ref["lifecycle"] for t in op["transitions"])
    same = ours_ops == ref_ops
    ok &= same
    print(f"  lifecycle transitions: {len(ours_ops)} ours, {len(ref_ops)} reference, "
          f"{'identical' if same else 'DIFFERENT'}")
    if not same and verbose:
        print("   ours:", ours_ops)
        print("   ref: ", ref_ops)
    snaps_a, snaps_b = rec.snapshots, ref["snapshots"]
    diffs = []
    if len(snaps_a) != len(snaps_b):
        diffs.append(f"{len(snaps_a)} ticks vs reference {len(snaps_b)}")
    for i, (a, b) in enumerate(zip(snaps_a, snaps_b)):
        diffs += diff_snapshot(a, b, f"tick[{i}]")
    ok &= not diffs
    print(f"  snapshots: {len(snaps_a)} ticks ours, {len(snaps_b)} reference; "
          f"{len(diffs)} differences")
    for d in diffs[: (40 if verbose else 8)]:
        print("   ", d)
    print("  OK" if ok else "  FAIL")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--dynamo-python", default=os.environ.get("DYNAMO_PYTHON", "/opt/dynref/bin/python"))
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args(argv)
    if not Path(opts.dynamo_python).exists():
        print(f"planner_vs_dynamo: reference interpreter {opts.dynamo_python} not found",
              file=sys.stderr)
        return 2
    cases = opts.cases or sorted(str(p) for p in (HERE / "planner").glob("*.yaml"))
    results = [check(c, opts.dynamo_python, opts.verbose) for c in cases]
    print(f"\n{sum(results)} of {len(results)} planner cases agree")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
