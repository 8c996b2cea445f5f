"""Scaling against the reference with the same policy object.

Runs a synthetic load (60 requests of 1000/50 tokens every 100 ms, one worker, 0.5 s
start-up) with a policy that scales to 3 workers at the first tick (1000 ms) and back to 1 at
the second (3000 ms), through ``ai-dynamo-runtime==1.6.1`` (``scaling_policy=``) and through
simmodel (``simmodel.run(..., scaling_policy=...)``), and compares every request, the
worker-seconds, gpu_hours and the lifecycle transition times.

    python benchmarks/planner_vs_dynamo.py [--dynamo-python PATH]

Exit status 0 when everything agrees to 1e-6 relative.  Not part of the test suite.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

POLICY = '''
class Policy:
    def __init__(self):
        self.n = 0
    def initial_tick_ms(self):
        return 1000.0
    def on_tick(self, snap):
        self.n += 1
        t = {1: 3, 2: 1}.get(self.n)
        return {"target_prefill": None, "target_decode": t, "next_tick_ms": snap["now_ms"] + 2000.0}
'''

REFERENCE = POLICY + '''
import json, os, sys
os.environ["DYN_LOG"] = "error"
import dynamo._core as c
r = c.run_mocker_synthetic_trace_replay(1000, 50, 60, arrival_interval_ms=100.0, num_workers=1,
        scaling_policy=Policy(), capture_per_request=True,
        extra_engine_args={"engine": {}, "startup_time": 0.5})
ops = [(t["worker_id"], t["transition"], op["at_ms"]) for op in r.lifecycle_operations
       for t in op["transitions"]]
json.dump({"summary": r.summary, "ops": ops,
           "per_request": [{k: p[k] for k in ("arrival_time_ms", "ttft_ms", "e2e_latency_ms",
                                              "decode_worker_idx")} for p in r.per_request]},
          open(sys.argv[1], "w"))
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dynamo-python", default=os.environ.get("DYNAMO_PYTHON", "/opt/dynref/bin/python"))
    opts = ap.parse_args(argv)
    if not Path(opts.dynamo_python).exists():
        print(f"planner_vs_dynamo: reference interpreter {opts.dynamo_python} not found",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ref.json"
        subprocess.run([opts.dynamo_python, "-c", REFERENCE, str(out)], check=True)
        ref = json.loads(out.read_text())
    import simmodel
    from simmodel.scenario import scenario_from_dict
    ns: dict = {}
    exec(POLICY, ns)
    sc = scenario_from_dict({
        "workload": {"synthetic": {"requests": 60, "input_tokens": 1000, "output_tokens": 50,
                                   "arrival_interval_ms": 100.0}},
        "cluster": {"workers": 1, "engine": {"startup_time": 0.5}}}, base_dir=".", source="probe")
    res = simmodel.run(sc, scaling_policy=ns["Policy"]())
    ours = res.requests.sort_values("arrival_time_ms").to_dict("records")
    theirs = sorted(ref["per_request"], key=lambda p: p["arrival_time_ms"])
    worst = 0.0
    mism = 0
    for a, b in zip(ours, theirs):
        worst = max(worst, abs(a["e2e_latency_ms"] - b["e2e_latency_ms"]) / b["e2e_latency_ms"],
                    abs(a["ttft_ms"] - b["ttft_ms"]) / b["ttft_ms"])
        mism += a["decode_worker_idx"] != b["decode_worker_idx"]
    print(f"requests: {len(ours)} ours, {len(theirs)} reference; worst TTFT/E2E rel err "
          f"{worst:.3g}; worker mismatches {mism}")
    ok = worst <= 1e-6 and mism == 0 and len(ours) == len(theirs)
    for k in ("decode_worker_seconds", "gpu_hours", "duration_ms"):
        a, b = res.summary[k], ref["summary"][k]
        rel = abs(a - b) / max(abs(b), 1e-12)
        ok &= rel <= 1e-6
        print(f"{k:24s} ours {a:.9g}  reference {b:.9g}  rel {rel:.3g}")
    lc = res.lifecycle
    ours_ops = sorted((int(r.worker), r.transition, round(r.at_ms, 6)) for r in lc.itertuples())
    ref_ops = sorted((w, t, round(at, 6)) for w, t, at in ref["ops"])
    same = ours_ops == ref_ops
    ok &= same
    print(f"lifecycle transitions: {len(ours_ops)} ours, {len(ref_ops)} reference, "
          f"{'identical' if same else 'DIFFERENT'}")
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
