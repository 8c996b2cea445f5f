"""Attention DP in disaggregated pools (measured on ai-dynamo-runtime 1.6.1): each pool's
round robin cycles over its (worker, rank) slots rank by rank within a worker, the ranks
of a worker run in lock-step, worker indices are reported as ``worker x dp + rank`` per
pool, and each decode rank keeps its own queue of reservations waiting for blocks."""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.engine.timing import decode_poly_ms, div_ns, duration_ns, prefill_poly_ms

CAP = 16384 * 64                       # the default pool, in tokens (block size 64)


def P(t: int) -> float:
    return div_ns(duration_ns(prefill_poly_ms(t)), 1.0) / 1e6


def D(active: int, cap: int = CAP) -> float:
    return div_ns(duration_ns(decode_poly_ms(active, cap)), 1.0) / 1e6


def run(tmp_path, rows, prefill: str, decode: str):
    """``rows``: (timestamp, input_length, output_length, hash_ids); the pools' YAML."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n,
                                         "output_length": o, "hash_ids": h}) + "\n"
                             for t, n, o, h in rows))
    path = tmp_path / "s.yaml"
    path.write_text(f"workload: {{trace: {trace}, format: mooncake}}\n"
                    f"cluster:\n  prefill: {prefill}\n  decode: {decode}\n")
    res = simmodel.run(simmodel.load_scenario(path))
    return res.requests.sort_values(["arrival_time_ms", "uid"]).reset_index(drop=True)


def test_prefill_ranks_in_lock_step_and_reported_per_rank(tmp_path):
    # One prefill worker x dp 2: 1000, 3000, 500 tokens at 0 go to slots 0, 1, 0; rank 0
    # prefills 1500 tokens, rank 1 3000, and the pass ends with the slower: every source
    # is held at P(3000).  The one decode worker's first pass decodes the three prompts
    # (1000 + 3000 + 500 tokens): TTFT = P(3000) + D(4500).
    rows = [(0, 1000, 5, [1, 2]), (0, 3000, 5, [3, 4, 5, 6, 7, 8]), (0, 500, 5, [9])]
    df = run(tmp_path, rows, "{workers: 1, engine: {dp_size: 2}}", "{workers: 1}")
    assert df.prefill_worker_idx.tolist() == [0, 1, 0]
    assert df.decode_worker_idx.tolist() == [0, 0, 0]
    assert df.source_held_ms.tolist() == pytest.approx([P(3000)] * 3, abs=1e-9)
    assert df.ttft_ms.tolist() == pytest.approx([P(3000) + D(4500)] * 3, abs=1e-9)


def test_pool_round_robin_goes_rank_by_rank_within_a_worker(tmp_path):
    # 2 prefill workers x dp 2: four requests at 0 take slots (w0, r0), (w0, r1), (w1, r0),
    # (w1, r1), reported 0, 1, 2, 3 (the aggregated round robin's order is 0, 2, 1, 3).
    # They finish in that order, so the decode pool (1 worker x dp 2) gets 0, 1, 0, 1.
    rows = [(0, 500, 3, [10 * k]) for k in range(1, 5)]
    df = run(tmp_path, rows, "{workers: 2, engine: {dp_size: 2}}",
             "{workers: 1, engine: {dp_size: 2}}")
    assert df.prefill_worker_idx.tolist() == [0, 1, 2, 3]
    assert df.decode_worker_idx.tolist() == [0, 1, 0, 1]
    # every prefill rank prefills one 500-token prompt (one pass, P(500)); each decode
    # rank decodes two of them in its first pass
    assert df.ttft_ms.tolist() == pytest.approx([P(500) + D(1000)] * 4, abs=1e-9)


def test_each_decode_rank_has_its_own_queue_of_waiting_reservations(tmp_path):
    # Decode: 1 worker x dp 2, 40 blocks of 64 tokens per rank.  A (1500 + 300 out) holds
    # 24+ blocks of rank 0 until it completes; C (1500 tokens, 24 blocks, rank 0) cannot
    # be reserved before that.  D (500 tokens, rank 1) comes after C but is reserved at
    # the first decode pass end after its source is held (a pass lasts at most 34.01 ms,
    # the decode polynomial's maximum), long before C: it does not wait behind C.
    rows = [(0, 1500, 300, [1, 2, 3]), (0, 500, 5, [4]), (100, 1500, 5, [5, 6, 7]),
            (110, 500, 5, [8])]
    df = run(tmp_path, rows, "{workers: 1}",
             "{workers: 1, engine: {dp_size: 2, num_gpu_blocks: 40}}")
    a, b, c, d = df.itertuples()
    assert [a.decode_worker_idx, c.decode_worker_idx, d.decode_worker_idx] == [0, 0, 1]
    assert c.destination_reserved_ms == a.last_token_ms
    assert 0 < d.destination_reserved_ms - d.source_held_ms < 34.02
    assert d.destination_reserved_ms < c.destination_reserved_ms
