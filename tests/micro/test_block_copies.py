"""A recomputed cached block is a second physical copy; a hit takes the oldest copy.

Found with benchmarks/scale_case.py (issue 14, divergence 2; the shrunk case is
benchmarks/scenarios/scale_prefix_eviction.yaml) and checked against the reference
(ai-dynamo-runtime 1.6.1) on the two traces below: every block a request computes stays
its own, even when its hash is already resident, and a prefix hit takes the hash's oldest
resident copy, even an inactive one while a running request holds a newer copy
(simmodel/engine/kv_cache.py).  The former model shared the resident block instead (and
freed the request's own), so it had fewer blocks in use and evicted less.

Whole runs through ``simmodel.run`` on tiny Mooncake traces (block size 16, one hash id per
block); every expected time is composed here from the cost model, pass by pass, as in
tests/micro/test_chunked_kv_pressure.py, with decode coalescing on and off.
"""
from __future__ import annotations

import pytest

from hand_timing import BS, D, P, approx, row, run_one_worker


@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    """``sim(rows, blocks)`` -> Result of one worker, block size 16, ``blocks`` blocks."""
    def _run(rows, blocks):
        return run_one_worker(tmp_path, rows, {"num_gpu_blocks": blocks}, request.param)
    return _run


def test_recomputing_a_held_block_takes_a_block_of_its_own(sim):
    """6 blocks.  A and B (the same 2 blocks [1, 2], 1 token out) and C (4 blocks
    [3..6], 1 out) arrive at 0; D ([1, 2, 7], 1 out) at 1000 ms.

    * pass 1: A computes 32 tokens.  B hits both blocks but is capped at 1 (one token
      is always computed), so it recomputes block 2: a second copy, its own, so 3
      blocks are in use (1, 2 and 2').  C needs 4 > 6 - 3 and waits (head-of-line).
      (Sharing A's block would leave 4 free and admit C in this pass: P(111).)
      Cost P(2 * (64 // 2 - 16 // 2)) = P(48).  A and B complete: LRU 2, 2', 1.
    * pass 2: C takes the 3 free blocks and evicts A's copy of 2: P(64).
    * pass 3 (D at 1000): 1 and 2' are still resident: 32 tokens reused, P(16).
    """
    res = sim([row(0, [1, 2], 1), row(0, [1, 2], 1), row(0, [3, 4, 5, 6], 1),
               row(1000, [1, 2, 7], 1)], blocks=6)
    df = res.requests.sort_values("uid")
    a, b, c, d = df.itertuples()
    e1 = P(48)
    assert a.first_token_ms == approx(e1) and b.first_token_ms == approx(e1)
    assert (a.reused_input_tokens, b.reused_input_tokens) == (0, 16)
    assert c.first_admit_ms == approx(e1)
    assert c.first_token_ms == approx(e1 + P(64))
    assert c.reused_input_tokens == 0
    assert d.reused_input_tokens == 32
    assert d.first_token_ms == approx(1000 + P(16))
    p = res.passes
    assert list(p.prefill_tokens) == [48, 64, 16]
    assert list(p.kv_blocks_active) == [3, 4, 3]
    assert res.summary["duration_ms"] == approx(1000 + P(16))


def test_a_hit_takes_the_oldest_copy_even_when_a_newer_one_is_held(sim):
    """4 blocks (cap 64).  A ([1, 2], 1 out) at 0; B ([1, 2], 10 out) at 100; E
    ([1, 2, 3], 1 out) at 101.

    * pass 1: A alone, P(32); it completes: LRU 2, 1.
    * pass 2 (B at 100): B hits block 1 (capped at 1 block) and recomputes block 2 as a
      copy 2' of its own; A's copy of 2 stays in the LRU.  P(16); B's first token.
    * pass 3: B decodes into a third block (free 0).  E hits 1 (held by B) and 2, whose
      oldest copy is A's *inactive* one: taking it leaves 1 - 1 = 0 blocks for E's
      third, so E waits.  (Sharing B's copy 2' would admit E here.)  Passes 3..11: B
      decodes alone, D(30 + j) in pass j; B completes at pass 11.
    * pass 12: E reuses 32 tokens (1 and A's 2 from the LRU), P(16).
    """
    cap = 4 * BS
    res = sim([row(0, [1, 2], 1), row(100, [1, 2], 10), row(101, [1, 2, 3], 1)],
              blocks=4)
    df = res.requests.sort_values("uid")
    a, b, e = df.itertuples()
    ends = {1: P(32), 2: 100 + P(16)}
    for j in range(3, 12):
        ends[j] = ends[j - 1] + D(30 + j, cap)
    ends[12] = ends[11] + P(16)
    assert a.last_token_ms == approx(ends[1])
    assert b.reused_input_tokens == 16
    assert b.first_token_ms == approx(ends[2])
    assert b.last_token_ms == approx(ends[11]) and b.output_length == 10
    assert e.first_admit_ms == approx(ends[11])           # not ends[2]: it waited
    assert e.reused_input_tokens == 32
    assert e.first_token_ms == approx(ends[12])
    p = res.passes
    assert list(p.prefill_tokens) == [32, 16] + [0] * 9 + [16]
    assert list(p.kv_blocks_active) == [2, 2] + [3] * 9 + [3]
