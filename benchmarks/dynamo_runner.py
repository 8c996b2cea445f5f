"""Run one replay on the reference simulator (NVIDIA Dynamo's mocker) and save the result as JSON.

This script runs under the *reference* interpreter (a virtualenv with
``ai-dynamo-runtime==1.6.1``), never under simmodel's, and must not import simmodel::

    DYN_LOG=error /opt/dynref/bin/python benchmarks/dynamo_runner.py JOB.json OUT.json

``JOB.json`` is ``{"mode": "trace" | "synthetic", "args": {keyword arguments},
"trace_files": [paths] (trace mode), "positional": [input_tokens, output_tokens,
request_count] (synthetic mode)}``.  The call always gets ``capture_per_request=True``.

Optional ``"policy": {"file": path, "attr": name}``: ``name`` in the Python file (a
policy object or a zero-argument factory) is passed as ``scaling_policy``; the output then
also has ``snapshots`` (every snapshot the policy saw) and ``lifecycle`` (the reference's
``lifecycle_operations``).  With ``"capture_telemetry": true`` in ``args`` the output has
the reference's ``telemetry`` dict.

``OUT.json`` gets ``summary`` (the reference's dict as is), ``per_request`` (records cut
down to ``KEEP_FIELDS``) and ``wall_s`` (``time.perf_counter`` around the replay call
only, so interpreter start-up and module import are excluded).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

KEEP_FIELDS = (
    "session_id", "turn_index", "arrival_time_ms", "first_token_ms", "last_token_ms",
    "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length", "output_length",
    "reused_input_tokens", "decode_worker_idx", "terminal_status",
    # requested_output_length: to match requests by shape (output_length is 0 for
    # rejected requests and capped by max_model_len); readmission_count: to see preemptions
    "requested_output_length", "readmission_count",
    # agentic traces: node and trajectory ids
    "request_id", "play_id",
    # admissions: benchmarks/long_runs.py dates a divergence from them
    "first_admit_ms", "admission_count",
    # disaggregated lifecycle
    "prefill_worker_idx", "prefill_admit_ms", "source_held_ms", "destination_reserved_ms",
    "destination_activated_ms", "decode_admit_ms", "source_released_ms",
    "decode_reused_input_tokens",
)


def _json_safe(value):
    """NaN/inf are not JSON; the reference uses None for missing values anyway."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} JOB.json OUT.json", file=sys.stderr)
        return 2
    os.environ.setdefault("DYN_LOG", "error")   # must be set before the module is loaded
    with open(argv[1], encoding="utf-8") as fh:
        job = json.load(fh)

    import dynamo._core as core  # imported here so that DYN_LOG is already in place

    kwargs = dict(job.get("args") or {})
    kwargs["capture_per_request"] = True
    if isinstance(kwargs.get("router_config"), dict):
        kwargs["router_config"] = core.KvRouterConfig(**kwargs["router_config"])
    recorder = None
    if job.get("policy"):
        recorder = _load_policy(job["policy"])
        kwargs["scaling_policy"] = recorder
    mode = job.get("mode")
    if mode == "trace":
        func, positional = core.run_mocker_trace_replay, [list(job["trace_files"])]
    elif mode == "synthetic":
        func, positional = core.run_mocker_synthetic_trace_replay, list(job["positional"])
    else:
        print(f"unknown mode {mode!r} (expected 'trace' or 'synthetic')", file=sys.stderr)
        return 2

    start = time.perf_counter()
    result = func(*positional, **kwargs)
    wall_s = time.perf_counter() - start

    per_request = [{key: _json_safe(rec.get(key)) for key in KEEP_FIELDS}
                   for rec in result.per_request]
    summary = {key: _json_safe(value) for key, value in dict(result.summary).items()}
    out = {"summary": summary, "per_request": per_request, "wall_s": wall_s}
    if kwargs.get("capture_telemetry"):
        out["telemetry"] = result.telemetry
    if recorder is not None:
        out["snapshots"] = recorder.snapshots
        out["lifecycle"] = [dict(op) for op in (result.lifecycle_operations or [])]
    with open(argv[2], "w", encoding="utf-8") as fh:
        json.dump(out, fh, default=_json_safe)
    return 0


class Recorder:
    """Wraps a policy and keeps a copy of every snapshot it is shown."""

    def __init__(self, policy):
        self.policy = policy
        self.snapshots = []

    def initial_tick_ms(self):
        return self.policy.initial_tick_ms()

    def on_tick(self, snapshot):
        # a deep, JSON-safe copy: the policy may keep or change what it is given
        self.snapshots.append(json.loads(json.dumps(snapshot, default=_json_safe)))
        return self.policy.on_tick(snapshot)


def _load_policy(spec: dict) -> Recorder:
    import importlib.util

    mod_spec = importlib.util.spec_from_file_location("_policy_under_test", spec["file"])
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    obj = getattr(module, spec["attr"])
    if not hasattr(obj, "on_tick"):
        obj = obj()
    return Recorder(obj)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
