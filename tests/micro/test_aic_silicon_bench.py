"""The closed-loop clients of ``benchmarks/aic_silicon.py`` (the silicon comparison):
its trace, and that simmodel runs it as a closed loop (each client has one request in
flight, the next sent when the last completes).  Timing: the fixed model, so the
expected times are hand-computed below."""
from __future__ import annotations

import json
import sys
from collections import namedtuple

import numpy as np

import simmodel

Row = namedtuple("Row", "batch_size isl osl")


def silicon(repo):
    sys.path.insert(0, str(repo / "benchmarks"))
    try:
        import aic_silicon
    finally:
        sys.path.pop(0)
    return aic_silicon


def test_clients_are_spread_over_one_period(repo, tmp_path):
    bench = silicon(repo)
    path = tmp_path / "trace.jsonl"
    bench.staggered_trace(Row(3, 100, 5), 2, 300.0, str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["session_id"] for r in rows] == ["c0", "c0", "c1", "c1", "c2", "c2"]
    assert [r.get("timestamp") for r in rows[::2]] == [0.0, 100.0, 200.0]
    assert all(r["delay"] == 0 and "timestamp" not in r for r in rows[1::2])
    ids = [i for r in rows for i in r["hash_ids"]]
    assert len(ids) == len(set(ids)) == 6 * 2          # ceil(100 / 64) fresh blocks each


def test_each_client_waits_for_its_last_request(repo, tmp_path):
    bench = silicon(repo)
    bench.staggered_trace(Row(2, 64, 3), 3, 1000.0, str(tmp_path / "trace.jsonl"))
    (tmp_path / "s.yaml").write_text(
        "workload: {trace: trace.jsonl, format: mooncake, trace_block_size: 64}\n"
        "cluster: {workers: 1, engine: {timing_model: {type: fixed, prefill_ms: 10,"
        " decode_ms: 2}}}\n")
    req = simmodel.run(simmodel.load_scenario(str(tmp_path / "s.yaml"))).requests
    for client in ("c0", "c1"):
        r = req[req.session_id == client].sort_values("turn_index")
        assert len(r) == 3
        # each request: one 10 ms prefill pass (its first token), then 2 decode passes
        # of 2 ms; the next is sent at once when it completes (delay 0)
        np.testing.assert_allclose(r.terminal_time_ms - r.arrival_time_ms, 14.0)
        np.testing.assert_allclose(r.arrival_time_ms.iloc[1:].to_numpy(),
                                   r.terminal_time_ms.iloc[:-1].to_numpy())
    assert req[req.session_id == "c1"].arrival_time_ms.min() == 500.0
