"""Telemetry gauges against the reference's ``capture_telemetry`` samples.

    python benchmarks/telemetry_vs_dynamo.py SCENARIO.yaml INTERVAL_MS

Runs the scenario with ``telemetry: {interval_ms}`` in simmodel and with
``capture_telemetry=True, telemetry_sample_interval_ms`` in ``ai-dynamo-runtime==1.6.1``
and compares, sample by sample and worker by worker, KV blocks active / inactive and
running / waiting requests.  Prints the mismatches (first 12) and the share of checks that
agree.  The reference's interval counters (cache hits, preemptions) read 0 in aggregated
runs of this build, so they are not compared.  Not part of the test suite.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from vs_dynamo import reference_job, run_reference  # noqa: E402

GAUGES = {"active_blocks": "kv_blocks_active", "inactive_blocks": "kv_blocks_cached",
          "running_requests": "running", "waiting_requests": "waiting"}


def main(argv) -> int:
    import simmodel
    from simmodel.config import TelemetryConfig

    path, interval = argv[0], float(argv[1])
    sc = simmodel.load_scenario(path)
    sc = dataclasses.replace(sc, telemetry=TelemetryConfig(interval_ms=interval))
    res = simmodel.run(sc)
    with tempfile.TemporaryDirectory() as tmp:
        job, _ = reference_job(sc, Path(tmp))
        job["args"].update(capture_telemetry=True, telemetry_sample_interval_ms=interval)
        ref = run_reference("/opt/dynref/bin/python", job, Path(tmp))
    ours = {(r.time_ms, r.pool, r.worker, r.metric): r.value for r in res.telemetry.itertuples()}
    agg = not sc.cluster.disaggregated
    checks = bad = 0
    for smp in ref["telemetry"]["samples"]:
        t = smp["sampled_at_ms"]
        for pool, key in (("prefill", "prefill_scheduler_metrics"),
                          ("decode", "decode_scheduler_metrics")):
            ours_pool = "agg" if agg else pool
            for m in smp[key]:
                for rk, ok in GAUGES.items():
                    checks += 1
                    a, b = ours.get((t, ours_pool, m["worker_id"], ok)), m[rk]
                    if a is None or abs(a - b) > 1e-9:
                        bad += 1
                        if bad <= 12:
                            print(f"  {t:10.1f} {ours_pool:7s} worker {m['worker_id']} {ok:16s} "
                                  f"ours {a} reference {b}")
    print(f"{path}: {len(ref['telemetry']['samples'])} samples; {checks} gauge checks, "
          f"{checks - bad} agree ({100.0 * (checks - bad) / max(checks, 1):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
