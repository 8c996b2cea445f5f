"""The closed-loop clients of ``benchmarks/aic_silicon.py`` (the silicon comparison):
its trace, and that simmodel runs it as a closed loop (each client has one request in
flight, the next sent when the last completes).  Timing: the fixed model, so the
expected times are hand-computed below."""
from __future__ import annotations

import json
import math
import sys
from collections import namedtuple
from types import SimpleNamespace

import numpy as np

import simmodel

Row = namedtuple("Row", "batch_size isl osl attention_dp_size", defaults=(1.0,))


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


def test_a_dp_row_runs_batch_size_clients_per_rank(repo, tmp_path):
    bench = silicon(repo)
    assert bench.concurrency(Row(8, 100, 5, 4.0)) == 32
    assert bench.concurrency(Row(8, 100, 5, math.nan)) == 8   # no DP recorded: one rank
    path = tmp_path / "trace.jsonl"
    bench.staggered_trace(Row(2, 64, 3, 3.0), 1, 600.0, str(path))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0.0, 100.0, 200.0, 300.0, 400.0, 500.0]


def _layout(gemm):
    return SimpleNamespace(backend="vllm", aic_model="m", system="h200_sxm",
                           gemm_quant_mode=gemm, moe_quant_mode=gemm, tp_size=2.0,
                           attention_dp_size=1.0, moe_tp_size=1.0, moe_ep_size=1.0,
                           batch_size=4.0)


def test_a_quantized_row_gets_an_fp8_kv_cache_unless_asked_for_the_models(repo):
    bench = silicon(repo)
    for gemm in ("fp8", "nvfp4"):
        assert bench.engine(_layout(gemm))["timing_model"]["kvcache_quant_mode"] == "fp8"
        assert "kvcache_quant_mode" not in bench.engine(_layout(gemm), "model")["timing_model"]
    for gemm in (math.nan, "int4_wo"):                   # unquantized / weight-only rows
        assert "kvcache_quant_mode" not in bench.engine(_layout(gemm))["timing_model"]


def test_a_client_waits_its_round_trip_before_the_next_request(repo, tmp_path):
    bench = silicon(repo)
    path = tmp_path / "trace.jsonl"
    bench.staggered_trace(Row(1, 64, 3), 3, 0.0, str(path), client_ms=1.5)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r.get("delay") for r in rows] == [None, 1.5, 1.5]


def test_aiperf_means_one_round_at_once_and_the_rest_steady(repo, tmp_path, monkeypatch):
    """Two clients, 64-token prompts, 2 output tokens; fixed timing: a pass with prefill
    work 10 ms, plus 2 ms when requests decode in it; a client's round trip 1 ms.

    The pilot (both sent at 0): one 10 ms pass prefills both (TTFT 10), one 2 ms decode
    pass ends both at 12: TTFT 10, TPOT (12 - 10) / 1 = 2, E2E 12, so the steady run
    staggers the clients by 12 / 2 = 6 ms.  Steady run, c0 at 0 and c1 at 6:
      [0, 10)  c0 prefill                       c0 TTFT 10
      [10, 22) c0 decode + c1 prefill (12 ms)   c0 ends at 22; c1 TTFT 22 - 6 = 16
      [22, 24) c1 decode                        c1 ends at 24
      c0's next arrives at 23, c1's at 25
      [24, 34) c0' prefill                      c0' TTFT 34 - 23 = 11
      [34, 46) c0' decode + c1' prefill         c0' TPOT 12; c1' TTFT 46 - 25 = 21
      [46, 48) c1' decode                       c1' TPOT 2
    Steady (the requests after each client's first): TTFT (11 + 21) / 2 = 16, TPOT
    (12 + 2) / 2 = 7.  aiperf over 4 rounds: TTFT (10 + 3 x 16) / 4 = 14.5, TPOT
    (2 + 3 x 7) / 4 = 5.75."""
    bench = silicon(repo)
    fixed = {"timing_model": {"type": "fixed", "prefill_ms": 10, "decode_ms": 2}}
    monkeypatch.setattr(bench, "engine", lambda row, **knobs: fixed)
    row = Row(2, 64, 2)
    load = {"waves": 2, "rounds": 4, "client_ms": 1.0}
    steady = bench.simulate(row, str(tmp_path), "staggered", {}, load)
    assert steady["sim_ttft_ms"] == 16.0 and steady["sim_tpot_ms"] == 7.0
    est = bench.simulate(row, str(tmp_path), "aiperf", {}, load)
    assert est["sim_ttft_ms"] == 14.5 and est["sim_tpot_ms"] == 5.75
    assert est["sim_e2e_ms"] == 14.5 + 5.75 * (2 - 1)


def test_a_layout_its_id_contradicts_is_read_from_the_id(repo):
    """The file lists some runs whose ids end ``_tp<N>_ep<M>_<k>`` (N GPUs, expert
    parallelism M) under a layout on N x N GPUs; those, and unlabelled vLLM rows of the
    same pattern (TP N = attention DP N, MoE TP 1, EP N^2), become TP N, no attention DP,
    MoE TP N / M, EP M, keeping the client count (batch_size x DP).  Rows whose GPU count
    agrees with their id, and unlabelled rows of other backends, stay as they are."""
    import pandas as pd
    bench = silicon(repo)
    cols = ["id", "backend", "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
            "batch_size"]
    rows = pd.DataFrame([
        ["k_c64_tp4_ep4_1290", "vllm", 4, 4, 1, 16, 16],      # 16 GPUs listed, 4 named
        ["k_c64_cfg635", "vllm", 4, 4, 1, 16, 16],            # the pattern, unlabelled
        ["m_c8_tp2_ep2_1399", "vllm", 2, 2, 1, 4, 4],
        ["q_c16_tp4_0_ep4_0_3", "sglang", 16, 1, 4, 4, 16],   # TP 16 listed, 4 named
        ["d_c8_tp8_ep1_5", "sglang", 8, 1, 8, 1, 8],          # agrees with its id
        ["t_c4_tp4_ep4_7", "trtllm", 1, 4, 1, 4, 1],          # 1 x 4 = 4 GPUs: agrees
        ["s_c4_cfg199", "sglang", 64, 1, 8, 8, 4],            # no id, not the vLLM pattern
    ], columns=cols).astype({c: float for c in cols[2:]})
    got = bench.read_layout(rows)[cols[2:]].to_numpy().tolist()
    assert got == [[4, 1, 1, 4, 64], [4, 1, 1, 4, 64], [2, 1, 1, 2, 8], [4, 1, 1, 4, 16],
                   [8, 1, 8, 1, 8], [1, 4, 1, 4, 1], [64, 1, 8, 8, 4]]
    assert [bench.concurrency(r) for r in bench.read_layout(rows).itertuples()] == \
        [64, 64, 8, 16, 8, 4, 4]
