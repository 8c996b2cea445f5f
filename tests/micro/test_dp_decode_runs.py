"""Coalesced decode runs of attention-DP workers (``DpScheduler.decode_run``): the ranks'
runs in lock-step, each pass as long as the slowest rank's.  Coalescing only saves
events: every request, pass-log row, summary value and KV event must be the same as when
the worker steps pass by pass; the cases also check that runs were coalesced."""
from __future__ import annotations

import json
import math
import random

import pandas as pd
import pytest

import simmodel
from simmodel.scenario import scenario_from_dict
from simmodel.engine.dp import DpScheduler

WALL = ("wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s")


def rows(seed: int, n: int, bs: int = 512) -> list:
    """Poisson-ish arrivals, 100-3,000-token prompts, half on one of 3 shared prefixes."""
    rnd = random.Random(seed)
    t, out, next_id = 0.0, [], 100
    groups = [[3 * g + i for i in range(3)] for g in range(3)]
    for _ in range(n):
        t += rnd.expovariate(1 / 80.0)
        isl = rnd.randint(100, 3000)
        blocks = -(-isl // bs)
        ids = list(rnd.choice(groups)) if rnd.random() < 0.5 else []
        ids = ids[:blocks] + list(range(next_id, next_id + max(0, blocks - len(ids))))
        next_id += blocks
        out.append({"timestamp": round(t, 3), "input_length": isl,
                    "output_length": rnd.randint(5, 120), "hash_ids": ids})
    return out


def run(tmp_path, trace, cluster, coalesce):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in trace))
    data = {"workload": {"trace": str(path), "trace_block_size": 512},
            "cluster": cluster,
            "run": {"coalesce_decode": coalesce, "record_kv_events": True}}
    return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="dp"))


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.passes.reset_index(drop=True),
                                  b.passes.reset_index(drop=True), check_exact=True)
    for k, x in a.summary.items():
        y = b.summary[k]
        if k in WALL or (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            continue
        assert x == y, (k, x, y)
    pd.testing.assert_frame_equal(a.kv_events, b.kv_events, check_exact=True)


def counting_runs(monkeypatch) -> list:
    calls = []
    orig = DpScheduler.commit_decode_run

    def counted(self, *args):
        calls.append(args[2])
        return orig(self, *args)
    monkeypatch.setattr(DpScheduler, "commit_decode_run", counted)
    return calls


CLUSTERS = {
    "vllm dp2 x2 round robin": {"workers": 2, "engine": {"dp_size": 2}},
    "vllm dp4 kv router, pressure": {
        "workers": 1, "engine": {"dp_size": 4, "num_gpu_blocks": 160},
        "router": {"mode": "kv"}},
    "sglang dp2, pressure": {
        "workers": 1, "engine": {"backend": "sglang", "dp_size": 2, "num_gpu_blocks": 9000}},
    "vllm dp2, prefill every 3 steps": {
        "workers": 1, "engine": {"dp_size": 2, "prefill_schedule_interval": 3}},
    "vllm dp4, prefill every 2 steps, pressure": {
        "workers": 1, "engine": {"dp_size": 4, "prefill_schedule_interval": 2,
                                 "num_gpu_blocks": 160}},
    "disaggregated, dp2 decode": {
        "prefill": {"workers": 1, "engine": {"dp_size": 2}},
        "decode": {"workers": 1, "engine": {"dp_size": 2, "num_gpu_blocks": 200}},
        "kv_transfer": {"bandwidth_gb_s": 25.0, "bytes_per_token": 131072}},
}


@pytest.mark.parametrize("name", list(CLUSTERS))
def test_coalesced_lock_step_runs_change_nothing(tmp_path, monkeypatch, name):
    trace = rows(7, 60)
    stepped = run(tmp_path, trace, CLUSTERS[name], False)
    calls = counting_runs(monkeypatch)
    coalesced = run(tmp_path, trace, CLUSTERS[name], True)
    assert calls and sum(calls) > len(calls)       # runs were coalesced, of several passes
    assert_same(coalesced, stepped)


def test_two_ranks_decoding_in_lock_step_by_hand(tmp_path, monkeypatch):
    # Fixed timing: 10 ms with prompt work, +1 ms with decoders.  A (5 tokens) and B (3)
    # prefill together on ranks 0 and 1 in [0, 10); then decode passes of 1 ms: B's
    # last token at 12, A's at 14 (the run up to B's completion is one of 2 passes).
    calls = counting_runs(monkeypatch)
    trace = [{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]},
             {"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [2]}]
    cluster = {"workers": 1, "engine": {"dp_size": 2, "timing_model": {
        "type": "fixed", "prefill_ms": 10.0, "decode_ms": 1.0}}}
    res = run(tmp_path, trace, cluster, True)
    r = res.requests.sort_values("uid")
    assert r.first_token_ms.tolist() == [10.0, 10.0]
    assert r.last_token_ms.tolist() == [14.0, 12.0]
    assert r.decode_worker_idx.tolist() == [0, 1]
    assert calls and calls[0] == 2
