"""KV-router scenarios against the spread of the reference's runs.

The reference breaks KV-router cost ties at random (without a seed), so its runs differ from
each other.  This script runs a scenario N times through the reference and through simmodel
(seeds 0..N-1), and prints, for each summary metric, both ranges and medians and the ratio of
the medians; a metric passes when our median lies within ``--tol`` (1%) of the reference's
median for means, and our median lies inside the reference's [min, max] otherwise.

    python benchmarks/kv_router_spread.py benchmarks/scenarios/kv_router_mooncake2k_4w.yaml -n 8

Uses ``benchmarks/vs_dynamo.py`` for the scenario → reference mapping.  Not part of the test
suite.
"""
from __future__ import annotations

import argparse
import statistics as st
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import vs_dynamo as V  # noqa: E402

KEYS = ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms",
        "mean_e2e_latency_ms", "p99_e2e_latency_ms", "prefix_cache_reused_ratio")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("-n", type=int, default=8, help="runs on each side (default 8)")
    ap.add_argument("--tol", type=float, default=0.01)
    ap.add_argument("--dynamo-python", default=None)
    opts = ap.parse_args(argv)
    python, found = V.find_python(opts.dynamo_python)
    if not found:
        print(f"kv_router_spread: reference interpreter {python} not found", file=sys.stderr)
        return 2
    import simmodel
    sc = simmodel.load_scenario(opts.scenario)
    refs = []
    with tempfile.TemporaryDirectory(prefix="kv_spread_") as tmp:
        job, _ = V.reference_job(sc, Path(tmp))
        for _ in range(opts.n):
            refs.append(V.run_reference(python, job, Path(tmp))["summary"])
    ours = [simmodel.run(sc, seed=s).summary for s in range(opts.n)]
    ok = True
    for k in KEYS:
        r = [x[k] for x in refs]
        o = [x[k] for x in ours]
        rm, om = st.median(r), st.median(o)
        if k.startswith("mean_"):
            good = abs(om / rm - 1) <= opts.tol
        else:
            good = min(r) <= om <= max(r)
        ok &= good
        print(f"{k:28s} ref {min(r):11.4f}..{max(r):11.4f} med {rm:11.4f} | ours "
              f"{min(o):11.4f}..{max(o):11.4f} med {om:11.4f} | ratio {om / rm:.4f}"
              + ("" if good else "  <-- FLAG"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
