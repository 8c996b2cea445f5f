"""Unit tier: Mooncake traces read as prompt deltas (reference §7.2, ``mooncake-delta``),
plus a whole run against the times ai-dynamo-runtime 1.6.1 reports for a small trace."""
from __future__ import annotations

import os

import pytest

import simmodel
from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.scenario import scenario_from_dict
from simmodel.workload import Prompt, build_workload, read_mooncake

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "traces")


# s1: 1000 tokens, then +200 (after 10 ms), then +300; s2 a one-turn session at 5 ms
ROWS = [
    {"session_id": "s1", "timestamp": 100, "hash_ids": [1, 2], "input_length": 1000,
     "output_length": 2, "output_token_ids": [7, 7]},
    {"session_id": "s2", "timestamp": 105, "hash_ids": [1, 5], "output_length": 4},
    {"session_id": "s1", "delay": 10, "hash_ids": [3], "input_length": 200,
     "output_length": 3, "output_token_ids": [8, 9, 10]},
    {"session_id": "s1", "delay": 10, "hash_ids": [4], "input_length": 300, "output_length": 3},
]


def test_delta_mode_keeps_each_row_as_its_delta(write_trace):
    path = str(write_trace(ROWS))
    w = read_mooncake(path, prompt_mode="delta")
    assert w.prompt_mode == "delta" and w.kind == "sessions"
    assert w.meta["format"] == "mooncake-delta"
    s1, s2 = w.sessions
    # the prompt of a turn is only what the row adds (no earlier turns, no outputs)
    assert [t.prompt for t in s1.turns] == [Prompt((0, 1), 512, 1000), Prompt((3,), 512, 200),
                                            Prompt((4,), 512, 300)]
    assert s2.turns[0].prompt == Prompt((0, 2), 512, 1024)
    assert [t.output_token_ids for t in s1.turns] == [(7, 7), (8, 9, 10), None]
    # arrivals and delays exactly as in full mode
    assert (s1.turns[0].arrival_ms, s2.turns[0].arrival_ms) == (0.0, 5.0)
    assert [t.delay_ms for t in s1.turns[1:]] == [10.0, 10.0]


def test_delta_mode_reads_the_same_rows_as_full_mode(write_trace):
    path = str(write_trace(ROWS))
    full = read_mooncake(path, trace_block_size=1024, arrival_speedup_ratio=2)
    delta = read_mooncake(path, trace_block_size=1024, arrival_speedup_ratio=2,
                          prompt_mode="delta")
    assert full.prompt_mode == "full" and full.meta["format"] == "mooncake"
    assert full.sessions == delta.sessions
    assert {k: v for k, v in full.meta.items() if k != "format"} == \
           {k: v for k, v in delta.meta.items() if k != "format"}


def test_delta_mode_reports_the_same_errors(write_trace):
    path = str(write_trace([ROWS[0], {"session_id": "s9", "timestamp": 0, "delay": 5,
                                            "hash_ids": [1], "output_length": 1}]))
    with pytest.raises(UserError, match=r":2: delay is not allowed on a session's first turn"):
        read_mooncake(path, prompt_mode="delta")


def test_bad_prompt_mode(write_trace):
    with pytest.raises(ValueError, match="prompt_mode must be one of full, delta"):
        read_mooncake(str(write_trace(ROWS)), prompt_mode="cumulative")


def test_build_workload_mooncake_delta(write_trace):
    cfg = WorkloadConfig(trace=str(write_trace(ROWS)), format="mooncake-delta")
    w = build_workload(cfg, engine_block_size=64, streams=Streams(0))
    assert w.prompt_mode == "delta"
    cfg = WorkloadConfig(trace=cfg.trace, format="mooncake")
    assert build_workload(cfg, engine_block_size=64, streams=Streams(0)).prompt_mode == "full"


def test_run_matches_the_reference(tmp_path, write_trace):
    # ai-dynamo-runtime 1.6.1, trace_format='mooncake-delta', default engine, on s1 alone:
    # turn 1 = 1000 + 2 outputs + 200 = 1202 tokens (960 reused: 15 full 64-token blocks of
    # 1002), turn 2 = 1202 + 3 + 300 = 1505 (1152 reused).
    path = str(write_trace([ROWS[0], ROWS[2], ROWS[3]]))
    data = {"workload": {"trace": path, "format": "mooncake-delta"}, "cluster": {"workers": 1}}
    r = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="test"))
    df = r.requests.set_index("turn_index")
    assert list(df["input_length"]) == [1000, 1202, 1505]
    assert list(df["reused_input_tokens"]) == [0, 960, 1152]
    ref = {0: (0.0, 32.105859, 37.897395), 1: (47.897395, 68.097863, 79.701775),
           2: (89.701775, 111.61541, 123.250497)}
    for k, (arrival, first, end) in ref.items():
        assert df.loc[k, "arrival_time_ms"] == pytest.approx(arrival, abs=1e-6)
        assert df.loc[k, "first_token_ms"] == pytest.approx(first, abs=1e-6)
        assert df.loc[k, "terminal_time_ms"] == pytest.approx(end, abs=1e-6)


def test_benchmark_delta_trace_has_output_ids_everywhere():
    w = read_mooncake(os.path.join(TRACES, "delta_sessions.jsonl"), prompt_mode="delta")
    assert 10 <= len(w.sessions) <= 20
    assert all(2 <= len(s.turns) <= 4 for s in w.sessions)
    assert all(t.output_token_ids is not None for s in w.sessions for t in s.turns)
