"""Chunked prefill under KV pressure: the admission check covers the whole sequence.

A waiting request is admitted only if the blocks of its whole current sequence beyond its
cached prefix fit in what the pool can supply (free + evictable) once that prefix is held.
Inactive prefix hits become active when taken, so they are not room for the rest; hits on
blocks that running requests already hold cost nothing.  Chunked prefill does not relax
this: a first chunk that would fit is not enough (docs/model.md, "Details copied from the
reference", item 6).

Whole runs through ``simmodel.run`` on tiny Mooncake traces (block size 16, one hash id per
block); every expected time is composed here from the cost model, pass by pass, as in
tests/test_micro_scenarios.py.  Each scenario runs with decode coalescing on and off.
"""
from __future__ import annotations

import pytest

from hand_timing import BS, D, P, approx, row, run_one_worker


@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    """``sim(rows, engine)`` -> Result of one worker, block size 16."""
    def _run(rows, engine):
        return run_one_worker(tmp_path, rows, engine, request.param)
    return _run


def by_length(result) -> dict:
    df = result.requests
    return {int(r.input_length): r for r in df.itertuples()}


def test_a_chunk_that_fits_is_not_enough_when_the_whole_sequence_does_not(sim):
    """11 blocks (cap 176 tokens), budget 81.  A (4 blocks [1..4], 1 token out) and H
    (1 block, 10 out) arrive at 0; X (10 blocks, the first 4 = A's, 2 out) at 1 ms.

    * pass 1: A + H, t = 2*(80//2) = 80.  A completes: its 4 full blocks go inactive.
    * pass 2: H grows to its 2nd block (active 2, free 5, inactive 4).  X hits A's 4
      inactive blocks; its whole sequence needs 10 - 4 = 6 more blocks, but once the 4
      hits are held only 9 - 4 = 5 are left, so X waits -- although its first chunk
      (80 tokens = 5 blocks) would fit.  Passes 2..10: H decodes alone, D(15 + k).
    * pass 11: H has completed (active 0, 11 - 5 = 6 blocks beyond the hits): X is
      admitted with 64 tokens reused and a chunk of 81: t = 145 - 64 = 81.
    * pass 12: the last 15 prompt tokens, t = 15; X's first token.
    * pass 13: X decodes at length 161 (its 11th block evicts H's cached one): done.
    """
    cap = 11 * BS
    res = sim([row(0, [1, 2, 3, 4], 1), row(0, [100], 10), row(1, range(1, 11), 2)],
              engine={"num_gpu_blocks": 11, "max_num_batched_tokens": 81})
    reqs = by_length(res)
    a, h, x = reqs[64], reqs[16], reqs[160]
    t = P(80)
    ends = {1: t}
    for k in range(2, 11):
        t += D(15 + k, cap)
        ends[k] = t
    ends[11] = ends[10] + P(81)
    ends[12] = ends[11] + P(15)
    ends[13] = ends[12] + D(161, cap)
    assert a.last_token_ms == approx(ends[1]) and a.output_length == 1
    assert h.first_token_ms == approx(ends[1])
    assert h.last_token_ms == approx(ends[10]) and h.output_length == 10
    assert x.first_admit_ms == approx(ends[10])            # not ends[1]: it waited
    assert x.admission_count == 1 and x.readmission_count == 0
    assert x.reused_input_tokens == 64
    assert x.first_token_ms == approx(ends[12])
    assert x.ttft_ms == approx(ends[12] - 1)
    assert x.last_token_ms == approx(ends[13])
    assert x.terminal_status == "completed" and x.output_length == 2
    p = res.passes
    assert list(p.prefill_tokens) == [80] + [0] * 9 + [81, 15, 0]
    assert list(p.num_decode) == [0] + [1] * 9 + [0, 0, 1]
    assert list(p.kv_blocks_active) == [5] + [2] * 9 + [10, 10, 11]
    assert res.summary["committed_prefill_tokens"] == 80 + 96
    assert res.summary["duration_ms"] == approx(ends[13])


def test_prefix_hits_held_by_a_running_request_cost_no_room(sim):
    """12 blocks (cap 192), budget 81.  A (4 blocks [1..4], 5 out) at 0; X (10 blocks,
    the first 4 = A's, 3 out) at 1 ms.

    * pass 1: A alone, P(64).
    * pass 2: A decodes (5th block, active 5, 7 blocks left).  X hits A's 4 *active*
      blocks: they are shared, so its 6 further blocks only need 6 <= 7: admitted next
      to A with a chunk of 80 tokens (t = 144 - 64): P(80) + D(65).
    * pass 3: X's last 16 prompt tokens and A: P(16) + D(66); X's first token.
    * passes 4, 5: both decode: D(67 + 161), D(68 + 162); both complete at pass 5.
    """
    cap = 12 * BS
    res = sim([row(0, [1, 2, 3, 4], 5), row(1, range(1, 11), 3)],
              engine={"num_gpu_blocks": 12, "max_num_batched_tokens": 81})
    reqs = by_length(res)
    a, x = reqs[64], reqs[160]
    e1 = P(64)
    e2 = e1 + (P(80) + D(65, cap))
    e3 = e2 + (P(16) + D(66, cap))
    e4 = e3 + D(67 + 161, cap)
    e5 = e4 + D(68 + 162, cap)
    assert a.first_token_ms == approx(e1)
    assert a.last_token_ms == approx(e5) and a.output_length == 5
    assert x.first_admit_ms == approx(e1)
    assert x.admission_count == 1 and x.reused_input_tokens == 64
    assert x.first_token_ms == approx(e3)
    assert x.second_token_ms == approx(e4)
    assert x.last_token_ms == approx(e5) and x.output_length == 3
    p = res.passes
    assert list(p.prefill_tokens) == [64, 80, 16, 0, 0]
    assert list(p.kv_blocks_active) == [4, 10, 11, 12, 12]
