"""Micro-scenario tier: whole runs through ``simmodel.run`` on tiny Mooncake traces, with
every expected time derived here from the cost model (reference §2, §3, §4, §5.1, §7.1, §8).

Expected times are composed from ``prefill_poly_ms`` / ``decode_poly_ms`` put on the
reference's nanosecond grid (``duration_ns``, ``div_ns``) and summed pass by pass, exactly
as the passes follow each other; the only literal numbers are the ones the reference
document states itself.  Every scenario runs with decode coalescing on and off: the
optimisation must not change a single time.
"""
from __future__ import annotations

import json
import math

import pytest

import simmodel
from simmodel.engine.timing import decode_poly_ms, div_ns, duration_ns, prefill_poly_ms
from simmodel.errors import UserError
from simmodel.result import REQUEST_COLUMNS
from simmodel.scenario import scenario_from_dict

CAP = 16384 * 64               # default KV capacity in tokens (the decode denominator)
EXACT = 1e-9                   # ms; far below the 1e-6 ms grid, above float noise
#: the column numbering requests in release order (-1: never released)
UID = "uid" if "uid" in REQUEST_COLUMNS else "request_id"


def P(t: int, ratio: float = 1.0) -> float:
    """Prefill part of a pass with ``t`` new tokens, ms on the ns grid."""
    return div_ns(duration_ns(prefill_poly_ms(t)), ratio) / 1e6 if t > 0 else 0.0


def D(active: int, cap: int = CAP, ratio: float = 1.0) -> float:
    """Decode part of a pass with ``active`` tokens in its decoders, ms on the ns grid."""
    return div_ns(duration_ns(decode_poly_ms(active, cap)), ratio) / 1e6


def row(ts, hash_ids, out, input_length=None, **extra) -> dict:
    r = {"timestamp": ts, "hash_ids": list(hash_ids), "output_length": out}
    if input_length is not None:
        r["input_length"] = input_length
    r.update(extra)
    return r


def ids(first: int, n: int) -> list[int]:
    return list(range(first, first + n))


@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    """``sim(rows, engine=..., workers=..., run=..., workload=...)`` -> Result."""
    coalesce = request.param

    def _run(rows, *, engine=None, workers=1, run=None, workload=None):
        path = tmp_path / "trace.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        data = {
            "workload": {"trace": str(path), **(workload or {})},
            "cluster": {"workers": workers, "engine": engine or {}},
            "run": {"coalesce_decode": coalesce, **(run or {})},
        }
        return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="micro"))
    return _run


def req(result, i: int):
    """Row of the ``i``-th released request (0-based release order)."""
    df = result.requests
    return df[df[UID] == i].iloc[0]


def approx(x):
    return pytest.approx(x, abs=EXACT)


# -- batching and the decode term -----------------------------------------------------------

def test_two_prompts_arriving_together_share_one_prefill_pass(sim):
    res = sim([row(0, [1, 2], 2, 1000), row(0, [3, 4], 2, 1000)])
    assert P(2000) == pytest.approx(48.552296, abs=1e-6)            # §2.4
    for i in (0, 1):
        r = req(res, i)
        assert r.ttft_ms == approx(P(2000))
        assert r.ttst_ms == approx(D(2002))
        assert r.e2e_latency_ms == approx(P(2000) + D(2002))
        assert r.reused_input_tokens == 0 and r.output_length == 2
    p = res.passes
    assert list(p.prefill_tokens) == [2000, 0]
    assert list(p.num_prefill) == [2, 0] and list(p.num_decode) == [0, 2]
    assert list(p.decode_tokens) == [0, 2002]
    assert res.summary["committed_prefill_tokens"] == 2000


def test_decoder_and_long_prompt_share_the_budget(sim):
    # A (100 tokens) decodes while B (10000 tokens, arriving at 10 ms) is chunked:
    # passes P(8191)+D(A) then P(1809)+D(A'); B's first token ends the second one.
    res = sim([row(0, [1], 4, 100), row(10, ids(10, 20), 2, 10000)])
    e1 = 0 + P(100)
    e2 = e1 + (P(8191) + D(101))
    e3 = e2 + (P(1809) + D(102))
    e4 = e3 + D(103 + 10001)
    a, b = req(res, 0), req(res, 1)
    assert a.first_token_ms == approx(e1)
    assert a.second_token_ms == approx(e2)
    assert a.last_token_ms == approx(e4) and a.output_length == 4
    assert b.first_admit_ms == approx(e1)                      # arrived during pass 1
    assert b.first_token_ms == approx(e3)
    assert b.ttft_ms == approx(e3 - 10)
    assert b.ttst_ms == approx(D(10104))
    assert list(res.passes.prefill_tokens) == [100, 8191, 1809, 0]
    assert list(res.passes.num_decode) == [0, 1, 1, 2]
    assert res.summary["committed_prefill_tokens"] == 10100


def test_an_arrival_during_a_pass_waits_for_its_end(sim):
    # §3.1: B arrives at 40.0 while A's decode pass runs from 37.90 to 43.69.
    res = sim([row(0, [1, 2], 4, 1000), row(40.0, [3], 1, 100)])
    e1 = P(1000)
    e2 = e1 + D(1001)
    e3 = e2 + D(1002)
    e4 = e3 + (P(100) + D(1003))
    assert e2 == pytest.approx(37.90, abs=5e-3) and e3 == pytest.approx(43.69, abs=5e-3)
    a, b = req(res, 0), req(res, 1)
    assert b.arrival_time_ms == 40.0
    assert b.first_admit_ms == approx(e3)
    assert b.first_token_ms == approx(e4) and b.ttft_ms == approx(e4 - 40.0)
    assert a.last_token_ms == approx(e4)
    assert list(res.passes.start_ms) == [approx(v) for v in (0, e1, e2, e3)]


def test_an_arrival_exactly_at_a_pass_end_joins_the_next_pass(sim):
    e1 = P(1000)
    assert e1 == 32.105859                                    # on the grid, exactly
    res = sim([row(0, [1, 2], 3, 1000), row(e1, [3], 1, 100)])
    e2 = e1 + (P(100) + D(1001))
    e3 = e2 + D(1002)
    a, b = req(res, 0), req(res, 1)
    assert b.arrival_time_ms == e1
    assert b.first_admit_ms == e1
    assert b.ttft_ms == approx(P(100) + D(1001))
    assert a.last_token_ms == approx(e3)
    assert list(res.passes.prefill_tokens) == [1000, 100, 0]


def test_an_arrival_just_after_a_pass_end_waits_a_whole_pass(sim):
    e1 = P(1000)
    res = sim([row(0, [1, 2], 3, 1000), row(e1 + 0.001, [3], 1, 100)])
    e2 = e1 + D(1001)
    b = req(res, 1)
    assert b.first_admit_ms == approx(e2)
    assert b.first_token_ms == approx(e2 + (P(100) + D(1002)))


# -- prefix caching --------------------------------------------------------------------------

def test_identical_prompts_in_one_pass_share_blocks_cached_at_scheduling(sim):
    # The second reuses 15 blocks (960 tokens) of the first; t = 2*(2000//2 - 960//2) = 1040.
    res = sim([row(0, [1, 2], 2, 1000), row(0, [1, 2], 2, 1000)])
    assert P(1040) == pytest.approx(32.748, abs=5e-4)          # §4
    a, b = req(res, 0), req(res, 1)
    assert a.reused_input_tokens == 0 and b.reused_input_tokens == 960
    assert b.first_admission_reused_input_tokens == 960
    for r in (a, b):
        assert r.ttft_ms == approx(P(1040))
        assert r.ttst_ms == approx(D(2002))
    assert res.passes.prefill_tokens.iloc[0] == 1040
    assert res.summary["committed_prefill_tokens"] == 1000 + 40   # §8
    assert res.summary["prefix_cache_reused_ratio"] == pytest.approx(960 / 2000)


def test_a_fully_cached_prompt_still_computes_its_last_token(sim):
    # 1024 tokens fully cached -> reuse capped at (1024-1)//64 blocks = 960;
    # 1025 tokens -> 1024.  The repeats arrive alone, long after the originals.
    res = sim([row(0, [1, 2], 1, 1024), row(0, [3, 4, 5], 1, 1025),
               row(1000, [1, 2], 1, 1024), row(2000, [3, 4, 5], 1, 1025)])
    r = [req(res, i) for i in range(4)]
    assert r[0].ttft_ms == approx(P(2048))                    # t = 2*(2049//2 - 0)
    assert [x.reused_input_tokens for x in r] == [0, 0, 960, 1024]
    assert r[2].ttft_ms == approx(P(64))
    assert r[3].ttft_ms == approx(P(1))
    # committed counts the granted chunks, not the integer-mean t
    assert res.summary["committed_prefill_tokens"] == 1024 + 1025 + 64 + 1


def test_prefix_caching_off_means_no_reuse(sim):
    res = sim([row(0, [1, 2], 1, 1000), row(0, [1, 2], 1, 1000), row(500, [1, 2], 1, 1000)],
              engine={"enable_prefix_caching": False})
    assert list(res.requests.reused_input_tokens) == [0, 0, 0]
    assert req(res, 0).ttft_ms == approx(P(2000))
    assert req(res, 1).ttft_ms == approx(P(2000))
    assert req(res, 2).ttft_ms == approx(P(1000))
    assert res.summary["committed_prefill_tokens"] == 3000
    assert res.summary["prefix_cache_reused_ratio"] == 0


# -- KV pressure and preemption ----------------------------------------------------------------

@pytest.mark.parametrize("mode", ["lifo", "fifo"])
def test_kv_pressure_preempts_newest_with_lifo_oldest_with_fifo(sim, mode):
    """§3.2: 40 blocks (2560 tokens), two 1000-in/1000-out requests arriving together.

    Pass k >= 2 grows each sequence to 999+k tokens; both fit while 2*ceil((999+k)/64)
    <= 40, i.e. up to k = 281.  In pass 282 the first one to grow fails and the victim
    (the newer with lifo, the older -- itself -- with fifo) is preempted with 20 cached
    blocks, one of which the survivor's growth evicts at once.  The victim waits: its
    whole sequence would fit, but the new blocks of its chunk cannot be allocated once
    its inactive prefix hits are taken.  The survivor grows to 1999 tokens (32 blocks),
    evicting the victim's blocks from the tail, so when the survivor finishes (pass
    1000) 8 blocks = 512 tokens of the victim remain.  Pass 1001 recomputes it:
    t = 1000 - 512 = 488 prompt tokens charged (its 281 generated tokens are free), and
    it also decodes at its full length 1281.  It then emits tokens 283..1000.
    """
    cap = 40 * 64
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], 1000, 1000)],
              engine={"num_gpu_blocks": 40, "preemption_mode": mode})
    t = P(2000)
    ends = {1: t}
    for k in range(2, 282):
        t += D(2 * (999 + k), cap)
        ends[k] = t
    for k in range(282, 1001):
        t += D(999 + k, cap)
        ends[k] = t
    t += P(488) + D(1281, cap)
    ends[1001] = t
    for k in range(1002, 1720):
        t += D(k + 280, cap)
        ends[k] = t
    survivor, victim = (req(res, 0), req(res, 1)) if mode == "lifo" else (req(res, 1), req(res, 0))
    assert survivor.admission_count == 1 and survivor.readmission_count == 0
    assert survivor.last_token_ms == approx(ends[1000])
    assert survivor.ttst_ms == approx(D(2002, cap))
    assert victim.admission_count == 2 and victim.readmission_count == 1
    assert victim.first_token_ms == approx(ends[1])
    assert victim.reused_input_tokens == 512
    assert victim.first_admission_reused_input_tokens == 0
    assert victim.last_token_ms == approx(ends[1719])
    assert victim.terminal_time_ms == approx(ends[1719])
    for r in (survivor, victim):
        assert r.output_length == 1000 and r.terminal_status == "completed"
        assert r.tpot_ms == approx((r.last_token_ms - r.first_token_ms) / 999)
    p = res.passes
    assert len(p) == 1719
    readmit = p.iloc[1000]                                    # pass 1001
    assert (readmit.prefill_tokens, readmit.num_prefill, readmit.num_decode,
            readmit.decode_tokens) == (488, 1, 1, 1281)
    assert readmit.end_ms == approx(ends[1001])
    assert p.kv_blocks_active.max() == 40
    s = res.summary
    assert s["committed_prefill_tokens"] == 2000 + (1281 - 512)
    assert s["max_itl_ms"] == approx(ends[1001] - ends[281])  # the victim's stall
    assert s["duration_ms"] == approx(ends[1719])


@pytest.mark.parametrize("mode", ["fifo", "lifo"])
def test_fifo_preemption_skips_the_request_behind(sim, mode):
    """Block size 64, 3 blocks (cap 192 tokens).  V (10 tokens), R (64), S (10) fill
    the pool in pass 1 (t = 3*(84//3) = 84).  In pass 2 R needs a second block.

    fifo: the victim is V, ahead of R; the scheduler walks the running list by
    position, so S, right behind R, is skipped in pass 2 (R decodes alone: D(65)).  R
    completes; pass 3 re-admits V, recomputing 11 tokens of which only its 10 prompt
    tokens are charged, and V decodes at length 11 next to S: P(10) + D(11 + 11).

    lifo: the victim is S; V and R decode in pass 2 (D(11 + 65)) and complete; pass 3
    re-admits S alone: P(10) + D(11).
    """
    cap = 3 * 64
    res = sim([row(0, [1], 2, 10), row(0, [2], 2, 64), row(0, [3], 2, 10)],
              engine={"num_gpu_blocks": 3, "preemption_mode": mode})
    v, r, s = (req(res, i) for i in range(3))
    e1 = P(84)
    if mode == "fifo":
        e2 = e1 + D(65, cap)
        e3 = e2 + (P(10) + D(22, cap))
        victim = v
        assert s.admission_count == 1                  # not preempted, just skipped
        assert s.second_token_ms == approx(e3)
        assert v.second_token_ms == approx(e3)
    else:
        e2 = e1 + D(76, cap)
        e3 = e2 + (P(10) + D(11, cap))
        victim = s
        assert v.second_token_ms == approx(e2)
        assert s.second_token_ms == approx(e3)
    assert r.second_token_ms == approx(e2)
    assert victim.admission_count == 2 and victim.reused_input_tokens == 0
    for x in (v, r, s):
        assert x.first_token_ms == approx(e1)
        assert x.output_length == 2 and x.terminal_status == "completed"
    assert list(res.passes.prefill_tokens) == [84, 0, 10]
    # V's (or S's) recompute chunk counts whole: 10 prompt + 1 generated token
    assert res.summary["committed_prefill_tokens"] == 84 + 11


def test_a_waiting_readmission_does_not_refresh_its_prefix_in_the_lru(sim):
    """Block size 16, 8 blocks (cap 128): A (8 tokens, 12 out), B (16, 38 out), C (96,
    11 out).  Pass 1 fills the pool (t = 3*(120//3) = 120).

    * pass 2: B needs a block, C (newest) is preempted: 6 cached blocks, LRU order
      C5..C0; B's growth evicts C5.  A and B decode: D(9 + 17).
    * passes 3..: C waits -- its 7-block sequence minus 5 hits fits the 5 non-active
      blocks, but its 2 new blocks cannot come from a pool whose only evictable blocks
      are its own hits.  A's growth (pass 10) evicts C4.
    * pass 12: A completes; its full block A0 goes to the LRU *after* C3..C0, its
      partial block to the free pool.  C still waits (3 new blocks > 1 free + A0).
    * pass 18: B takes the free block; pass 34: B's growth evicts the LRU head, which
      is C3 because C's failed admissions left its blocks where they were (had they
      been refreshed, A0 would go and C would keep 4 blocks).
    * pass 38: B completes; pass 39 re-admits C with 3 blocks = 48 tokens cached:
      P(96 - 48) + D(97).  C then emits tokens 3..11 in passes 40..48.
    """
    cap = 8 * 16
    res = sim([row(0, [1], 12, 8), row(0, [2], 38, 16), row(0, ids(3, 6), 11, 96)],
              engine={"block_size": 16, "num_gpu_blocks": 8},
              workload={"trace_block_size": 16})
    a, b, c = (req(res, i) for i in range(3))
    t = P(120)
    ends = {1: t}
    for k in range(2, 13):
        t += D((7 + k) + (15 + k), cap)
        ends[k] = t
    for k in range(13, 39):
        t += D(15 + k, cap)
        ends[k] = t
    t += P(48) + D(97, cap)
    ends[39] = t
    for k in range(40, 49):
        t += D(k + 58, cap)
        ends[k] = t
    assert a.last_token_ms == approx(ends[12])
    assert b.last_token_ms == approx(ends[38])
    assert c.reused_input_tokens == 48
    assert c.admission_count == 2
    assert c.second_token_ms == approx(ends[39])
    assert c.last_token_ms == approx(ends[48])
    assert list(res.passes.prefill_tokens) == [120] + [0] * 37 + [48] + [0] * 9


# -- limits ----------------------------------------------------------------------------------

def test_max_model_len_rejects_and_caps_generation(sim):
    # limit 100: a 100-token prompt is rejected; 90 + 50 requested stops at 10 tokens;
    # 99 + 5 stops at 1.
    res = sim([row(0, [1], 50, 90), row(500, [2], 5, 99), row(1000, [3], 5, 100)],
              engine={"max_model_len": 100})
    y, z, x = req(res, 0), req(res, 1), req(res, 2)
    assert x.terminal_status == "rejected"
    assert x.output_length == 0 and math.isnan(x.first_token_ms)
    assert math.isnan(x.first_admit_ms) and x.admission_count == 0
    assert x.terminal_time_ms == 1000
    assert y.terminal_status == "completed"
    assert (y.requested_output_length, y.output_length) == (50, 10)
    assert y.last_token_ms == approx(P(90) + sum(D(90 + j) for j in range(1, 10)))
    assert (z.requested_output_length, z.output_length) == (5, 1)
    assert z.ttft_ms == approx(P(99))
    s = res.summary
    assert s["num_requests"] == 3 and s["completed_requests"] == 2
    assert s["total_output_tokens"] == 11 and s["total_input_tokens"] == 189
    assert s["duration_ms"] == approx(500 + P(99))
    # the rejection at 1000 ms is the last thing that happened
    assert s["decode_worker_seconds"] == pytest.approx(1.0)


def test_a_prompt_larger_than_the_pool_is_rejected(sim):
    res = sim([row(0, [1, 2], 3, 1000)], engine={"num_gpu_blocks": 15})   # needs 16
    assert req(res, 0).terminal_status == "rejected"
    assert res.summary["completed_requests"] == 0


def test_chunked_prefill_off_refuses_a_prompt_over_the_budget(sim):
    with pytest.raises(UserError, match="max_num_batched_tokens"):
        sim([row(0, [1, 2], 1, 513)],
            engine={"enable_chunked_prefill": False, "max_num_batched_tokens": 512})


def test_chunked_prefill_off_runs_a_prompt_of_exactly_the_budget(sim):
    res = sim([row(0, [1], 2, 512)],
              engine={"enable_chunked_prefill": False, "max_num_batched_tokens": 512})
    assert req(res, 0).ttft_ms == approx(P(512))


def test_chunked_prefill_splits_at_the_budget(sim):
    res = sim([row(0, [1, 2], 2, 1000)], engine={"max_num_batched_tokens": 512})
    r = req(res, 0)
    assert r.ttft_ms == approx(P(512) + P(488))
    assert r.ttst_ms == approx(D(1001))
    assert list(res.passes.prefill_tokens) == [512, 488, 0]


def test_speedup_ratio_divides_every_duration(sim):
    res = sim([row(0, [1], 3, 77)], engine={"speedup_ratio": 2.0, "decode_speedup_ratio": 2.0})
    r = req(res, 0)
    assert P(77, 2.0) == pytest.approx(8.836521, abs=1e-9)
    assert r.ttft_ms == approx(P(77, 2.0))
    assert r.last_token_ms == approx(P(77, 2.0) + D(78, ratio=4.0) + D(79, ratio=4.0))


# -- routing, sessions, the clock ------------------------------------------------------------

def test_round_robin_over_three_workers(sim):
    res = sim([row(i, [i + 1], 1, 100) for i in range(8)], workers=3)
    df = res.requests.sort_values(UID)
    assert list(df.decode_worker_idx) == [0, 1, 2, 0, 1, 2, 0, 1]
    # worker 0: 0 alone, then 3 and 6 together; worker 1: 1, then 4 and 7; worker 2: 2, 5
    expected_first = [P(100), 1 + P(100), 2 + P(100),
                      P(100) + P(200), 1 + P(100) + P(200), 2 + P(100) + P(100),
                      P(100) + P(200), 1 + P(100) + P(200)]
    assert list(df.first_token_ms) == [approx(v) for v in expected_first]
    last = 1 + P(100) + P(200)
    assert res.summary["duration_ms"] == approx(last)
    assert res.summary["decode_worker_seconds"] == pytest.approx(3 * last / 1000, abs=1e-12)


def test_round_robin_breaks_timestamp_ties_in_file_order(sim):
    res = sim([row(0, [i + 1], 1, 10) for i in range(5)], workers=2)
    df = res.requests.sort_values(UID)
    assert list(df.session_id) == [f"request_{i}" for i in range(1, 6)]
    assert list(df.decode_worker_idx) == [0, 1, 0, 1, 0]


def test_max_sim_time_cuts_the_run(sim):
    # A (100 in, 2 out) completes exactly at the cut; C arrives exactly at it; D later.
    e1 = P(1100)
    cut = e1 + D(101 + 1001)
    res = sim([row(0, [1], 2, 100), row(0, [2, 3], 1000, 1000),
               row(cut, [4], 1, 100), row(cut + 1, [5], 1, 100)],
              run={"max_sim_time_ms": cut})
    df = res.requests
    by_session = {r.session_id: r for r in df.itertuples()}
    a, b, c = (by_session[f"request_{i}"] for i in range(1, 4))
    assert a.terminal_status == "completed" and a.last_token_ms == approx(cut)
    assert b.terminal_status == "incomplete" and b.output_length == 2
    assert c.terminal_status == "incomplete" and c.arrival_time_ms == cut   # processed
    assert "request_4" not in by_session               # never released: no row, counted
    assert len(df) == 3
    s = res.summary
    assert s["undispatched_requests"] == 1 and s["service_end_ms"] == approx(cut)
    assert s["num_requests"] == 3 == len(df)
    assert s["completed_requests"] == 1
    assert s["total_input_tokens"] == 100 and s["total_output_tokens"] == 2
    assert s["num_ttft_samples"] == 1
    assert s["duration_ms"] == approx(cut)
    assert s["decode_worker_seconds"] == pytest.approx(cut / 1000, abs=1e-12)
    # the pass started at the cut (C's prefill) has not ended: not counted
    assert s["committed_prefill_tokens"] == 1100


def test_multi_turn_session_waits_for_completion_plus_delay(sim):
    # session s: turn 0 (1000 tokens, 3 out) then turn 1 (1500 tokens sharing the first
    # 1000) 10 ms after turn 0 completes; turn 1 reuses 15 blocks (960 tokens): the 16th
    # block of turn 0 held generated tokens.  Session t: delay from timestamps (7 ms).
    res = sim([row(0, [1, 2], 3, 1000, session_id="s"),
               row(None, [1, 2, 3], 1, 1500, session_id="s", delay=10),
               row(1000, [20], 2, 100, session_id="t"),
               row(1007, [21], 1, 100, session_id="t"),
               row(2000, [30], 1, 10)])
    df = res.requests.set_index(["session_id", "turn_index"])
    c0 = P(1000) + D(1001) + D(1002)
    assert df.loc[("s", 0)].terminal_time_ms == approx(c0)
    s1 = df.loc[("s", 1)]
    assert s1.arrival_time_ms == approx(c0 + 10)
    assert s1.reused_input_tokens == 960
    assert s1.ttft_ms == approx(P(540))
    t0_done = 1000 + P(100) + D(101)
    assert df.loc[("t", 0)].terminal_time_ms == approx(t0_done)
    assert df.loc[("t", 1)].arrival_time_ms == approx(t0_done + 7)
    lone = df.loc[("request_5", 0)]                        # 1-based line number
    assert lone.arrival_time_ms == 2000 and lone.ttft_ms == approx(P(10))
    assert (df.terminal_status == "completed").all()


def test_a_zero_delay_next_turn_joins_the_pass_starting_at_the_completion(sim):
    # A (1000 tokens) and turn 0 of s (100 tokens, 1 out) share pass 1: t = 1100.  Turn 1
    # (200 tokens, the first 100 shared, delay 0) is released at that pass end, before
    # the worker forms pass 2: it reuses turn 0's one full block (64 tokens) and is
    # prefilled next to A's first decode: P(136) + D(1001).
    res = sim([row(0, [1, 2], 5, 1000),
               row(0, [3], 1, 100, session_id="s"),
               row(None, [3, 4], 1, 200, session_id="s", delay=0)])
    e1 = P(1100)
    e2 = e1 + (P(136) + D(1001))
    df = res.requests.set_index(["session_id", "turn_index"])
    s1 = df.loc[("s", 1)]
    assert df.loc[("s", 0)].terminal_time_ms == approx(e1)
    assert s1.arrival_time_ms == approx(e1) and s1.first_admit_ms == approx(e1)
    assert s1.reused_input_tokens == 64
    assert s1.first_token_ms == approx(e2)
    assert df.loc[("request_1", 0)].second_token_ms == approx(e2)
    assert list(res.passes.prefill_tokens[:2]) == [1100, 136]


def test_worker_seconds_run_to_the_service_end(tmp_path):
    """Workers are billed from their start to ``service_end_ms`` (the last event, or the
    cut-off when work was left), which ``duration_ms`` (the last completion) may precede."""
    import simmodel
    from simmodel.scenario import scenario_from_dict

    data = {"workload": {"synthetic": {"requests": 5, "input_tokens": 1000, "output_tokens": 5,
                                       "arrival_interval_ms": 100.0}},
            "cluster": {"workers": 2, "engine": {"block_size": 64, "num_gpu_blocks": 8}}}
    res = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="s"))
    s = res.summary
    assert (res.requests["terminal_status"] == "rejected").all()        # 16 blocks > 8
    assert s["duration_ms"] == 0.0 and s["completed_requests"] == 0
    assert s["service_end_ms"] == res.requests["terminal_time_ms"].max() >= 400.0
    assert s["decode_worker_seconds"] == pytest.approx(2 * s["service_end_ms"] / 1000)
