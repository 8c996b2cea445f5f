"""The SGLang backend (reference §3.4; ``simmodel.engine.sglang``): micro-scenarios, one
per scheduling rule, and hypothesis invariants.

Micro-scenarios run tiny Mooncake traces through ``simmodel.run`` (decode coalescing on
and off: the optimisation must not move a single token).  Every expected time is composed
here, pass by pass, from the cost model on the reference's nanosecond grid and from the
rules in the module docstring (prefill-first passes, the admission budget with
``new_token_ratio``, chunk continuation, retraction); the only literal numbers are the
reference notes' own.  The SGLang pool is ``num_gpu_blocks`` tokens (block size 1), which
is also the decode polynomial's denominator.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.engine.timing import decode_poly_ms, duration_ns, prefill_poly_ms
from simmodel.finish import collect
from simmodel.rng import Streams
from simmodel.scenario import scenario_from_dict
from simmodel.sim import build, run_until

SGLANG_CAP = 16384             # default SGLang pool: 16,384 one-token blocks
EXACT = 1e-9                   # ms
LONG = 1e-6                    # ms, for sums over hundreds of passes


def P(t: int) -> float:
    """Prefill pass of ``t`` new tokens, ms on the ns grid."""
    return duration_ns(prefill_poly_ms(t)) / 1e6 if t > 0 else 0.0


def D(active: int, cap: int = SGLANG_CAP) -> float:
    """Decode step with ``active`` tokens in the running batch, ms on the ns grid."""
    return duration_ns(decode_poly_ms(active, cap)) / 1e6


def row(ts, hash_ids, out, input_length, **extra) -> dict:
    r = {"timestamp": ts, "hash_ids": list(hash_ids), "output_length": out,
         "input_length": input_length}
    r.update(extra)
    return r


@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    """``sim(rows, engine=..., workers=..., cluster=...)`` -> Result (SGLang backend)."""
    coalesce = request.param

    def _run(rows, *, engine=None, workers=1, cluster=None, tbs=512):
        path = tmp_path / "trace.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        eng = {"backend": "sglang", **(engine or {})}
        data = {
            "workload": {"trace": str(path), "trace_block_size": tbs},
            "cluster": cluster or {"workers": workers, "engine": eng},
            "run": {"coalesce_decode": coalesce},
        }
        return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="sg"))
    return _run


def by_uid(result, i: int):
    df = result.requests
    return df[df.uid == i].iloc[0]


def approx(x, tol=EXACT):
    return pytest.approx(x, abs=tol)


# -- pass structure --------------------------------------------------------------------

def test_the_reference_single_request_numbers():
    # §2.4 / §3.4: a lone 1000-token prompt; the decode denominator is the 16,384-token pool
    assert P(1000) == pytest.approx(32.105859, abs=1e-6)
    assert D(1001) == pytest.approx(8.943724, abs=1e-6)


def test_a_prefill_batch_runs_alone_and_running_requests_stall(sim):
    # A (1000 tokens) decodes; B (2000 tokens) arrives during A's first decode step.  The
    # next pass is B's prefill alone (A emits nothing), B's first token at its end with no
    # decode cost; then one decode step for both: D(1002 + 2001).
    res = sim([row(0, [1, 2], 4, 1000), row(40.0, [3, 4, 5, 6], 2, 2000)])
    e1 = P(1000)
    e2 = e1 + D(1001)
    assert e1 < 40.0 < e2                                  # B arrives mid-pass
    e3 = e2 + P(2000)
    e4 = e3 + D(1002 + 2001)
    e5 = e4 + D(1003)
    a, b = by_uid(res, 0), by_uid(res, 1)
    assert (a.first_token_ms, a.second_token_ms) == (approx(e1), approx(e2))
    assert a.last_token_ms == approx(e5)
    assert b.first_admit_ms == approx(e2)
    assert b.first_token_ms == approx(e3) and b.last_token_ms == approx(e4)
    p = res.passes
    assert list(p.num_prefill) == [1, 0, 1, 0, 0]
    assert list(p.num_decode) == [0, 1, 0, 2, 1]
    assert list(p.decode_tokens) == [0, 1001, 0, 3003, 1003]


def test_prompts_batched_together_do_not_share_their_prefix(sim):
    # §4: two identical prompts in one pass both compute it (cached only at the pass end)
    res = sim([row(0, [1, 2], 2, 1000), row(0, [1, 2], 2, 1000)])
    for i in (0, 1):
        r = by_uid(res, i)
        assert r.ttft_ms == approx(P(2000)) and r.reused_input_tokens == 0
    assert res.summary["committed_prefill_tokens"] == 2000


def test_a_running_requests_prompt_is_already_cached(sim):
    # A's prompt joins the radix tree at the end of its prefill pass, so B (the same
    # 2048 tokens) arriving while A decodes reuses 2047 (at least one token is computed).
    res = sim([row(0, [1, 2, 3, 4], 20, 2048), row(100.0, [1, 2, 3, 4], 1, 2048)])
    ends = [P(2048)]
    while ends[-1] < 100.0:
        ends.append(ends[-1] + D(2048 + len(ends)))
    b = by_uid(res, 1)
    assert b.reused_input_tokens == 2047
    assert b.first_admit_ms == approx(ends[-1])
    assert b.first_token_ms == approx(ends[-1] + P(1))


# -- chunked prefill -----------------------------------------------------------------------

def test_a_chunked_prompt_continues_at_the_head_of_the_queue(sim):
    # chunked_prefill_size 2048: A (5000 tokens) takes chunks 2048, 2048 (B, arriving
    # during the first, waits behind the continuing chunk: the budget is spent), then
    # A's last 904 tokens and B's 300 share a pass: t = 2·(⌊5300/2⌋ − ⌊4096/2⌋) = 1204.
    res = sim([row(0, range(10, 20), 2, 5000), row(10.0, [30], 2, 300)],
              engine={"sglang": {"chunked_prefill_size": 2048}})
    e1 = P(2048)
    e2 = e1 + P(2048)
    e3 = e2 + P(1204)
    e4 = e3 + D(5001 + 301)
    a, b = by_uid(res, 0), by_uid(res, 1)
    assert a.first_token_ms == approx(e3) and b.first_token_ms == approx(e3)
    assert a.last_token_ms == approx(e4) and b.last_token_ms == approx(e4)
    assert b.first_admit_ms == approx(e2)
    assert list(res.passes.prefill_tokens) == [2048, 2048, 1204, 0]
    assert res.summary["committed_prefill_tokens"] == 5300


# -- admission budget and new_token_ratio ------------------------------------------------------

def _admission_step(pool: int, a_out: int, b_total: int, conservativeness: float = 1.0,
                    clip: int = 4096) -> int:
    """The decode step k after which B (prompt + reserve = ``b_total``) first fits while
    A (1000-token prompt, ``a_out`` outputs) runs alone: A holds 1001 + k slots, reserves
    ``min(a_out − 1 − k, clip) × ratio_k``, and the ratio decays once per decode step."""
    init = 0.7 * conservativeness
    floor = 0.14 * init
    decay = (init - floor) / 600
    ratio = init
    for k in range(a_out):
        room = pool - (1000 + 1 + k)
        if b_total < room - min(a_out - 1 - k, clip) * ratio:
            return k
        ratio = max(ratio - decay, floor)
    raise AssertionError("never fits")


@pytest.mark.parametrize("b_out", [100, 300, 320, 350])
def test_admission_budget_with_a_decaying_new_token_ratio(sim, b_out):
    # pool 3000: at t=0 A takes 1000 + 1000 of the budget, so B (1000 + b_out) waits;
    # after each of A's decode steps the reservation shrinks (fewer outputs left, smaller
    # ratio) until B fits -- then its prefill pass stalls A.
    pool = 3000
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], b_out, 1000)],
              engine={"num_gpu_blocks": pool})
    k = _admission_step(pool, 1000, 1000 + b_out)
    admit = P(1000) + sum(D(1001 + j, pool) for j in range(k))
    b = by_uid(res, 1)
    assert b.first_admit_ms == approx(admit, LONG)
    assert b.first_token_ms == approx(admit + P(1000), LONG)
    a = by_uid(res, 0)
    assert a.first_token_ms == approx(P(1000))


def test_conservativeness_scales_the_ratio_beyond_one(sim):
    # the initial ratio 0.7 × 1.5 = 1.05 is not capped at 1: B needs A's reservation to
    # shrink further before it fits
    pool = 3000
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], 280, 1000)],
              engine={"num_gpu_blocks": pool, "sglang": {"schedule_conservativeness": 1.5}})
    k = _admission_step(pool, 1000, 1280, conservativeness=1.5)
    assert k != _admission_step(pool, 1000, 1280, conservativeness=1.0 / 0.7)  # capped
    admit = P(1000) + sum(D(1001 + j, pool) for j in range(k))
    assert by_uid(res, 1).first_admit_ms == approx(admit, LONG)


def test_max_prefill_tokens_is_a_hard_per_pass_limit(sim):
    # two 600-token prompts with max_prefill_tokens 1000: one pass each
    res = sim([row(0, [1, 2], 2, 600), row(0, [3, 4], 2, 600)],
              engine={"sglang": {"max_prefill_tokens": 1000}})
    assert by_uid(res, 0).first_token_ms == approx(P(600))
    assert by_uid(res, 1).first_token_ms == approx(P(600) + P(600))


# -- decode out of memory: retraction ------------------------------------------------------------

def test_retraction_takes_the_first_of_equals_caches_it_and_recomputes_it_later(sim):
    # pool 3000, clip 10: A and B (1000 + 1000 each) are both admitted; after 499 decode
    # steps the pool is full (2 × 1500).  Step 500 retracts A (equal outputs: the first in
    # running order), whose 1500 tokens stay cached.  While B runs, A's re-admission
    # locks its own cached prefix, which leaves no slot for its one new token, so it
    # waits; B's growth trims A's cached tail one token per step, down to A's prompt.  A
    # then recomputes its 500 generated tokens (charged in P) and decodes alone.
    pool = 3000
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], 1000, 1000)],
              engine={"num_gpu_blocks": pool, "sglang": {"clip_max_new_tokens": 10}})
    t = P(2000)
    for j in range(1, 500):
        t += D(2 * (1000 + j), pool)
    for p in range(500, 1000):
        t += D(1000 + p, pool)
    b_last = t
    t += P(500)
    for s in range(1501, 2000):
        t += D(s, pool)
    a, b = by_uid(res, 0), by_uid(res, 1)
    assert (a.readmission_count, b.readmission_count) == (1, 0)
    assert b.last_token_ms == approx(b_last, LONG)
    assert a.last_token_ms == approx(t, LONG)
    assert a.reused_input_tokens == 1000 and a.output_length == 1000


def test_retraction_prefers_the_request_with_fewest_generated_tokens(sim):
    # C arrives later with a short prompt; when the pool runs out (A and B at 2 × 1351
    # tokens, C at 297) C has generated the least and is the one retracted.
    pool = 3000
    rows = [row(0, [1, 2], 450, 1000), row(0, [3, 4], 450, 1000), row(2000.0, [5], 300, 10)]
    res = sim(rows, engine={"num_gpu_blocks": pool, "sglang": {"clip_max_new_tokens": 10}})
    assert [by_uid(res, i).readmission_count for i in range(3)] == [0, 0, 1]
    assert (res.requests.terminal_status == "completed").all()


# -- policies and intervals -----------------------------------------------------------------

def _lpm_rows():
    # P: a 1536-token prompt cached first; R keeps the worker busy; then, at one instant,
    # Q1 (no hit), Q2 (512 cached) and Q3 (1024 cached), each with 1100 new tokens.
    return [row(0, [1, 2, 3], 1, 1536), row(100, [50, 51, 52], 5, 1400),
            row(101, [10, 11, 12], 2, 1100), row(101, [1, 20, 21, 22], 2, 1612),
            row(101, [1, 2, 30, 31, 32], 2, 2124)]


def test_lpm_serves_the_longest_cached_prefix_first(sim):
    # max_prefill_tokens 2100 fits one 1100-token extension per pass
    res = sim(_lpm_rows(), engine={"num_gpu_blocks": 20000,
                                   "sglang": {"schedule_policy": "lpm", "max_prefill_tokens": 2100}})
    q1, q2, q3 = (by_uid(res, i) for i in (2, 3, 4))
    assert q3.first_admit_ms < q2.first_admit_ms < q1.first_admit_ms
    assert (q1.reused_input_tokens, q2.reused_input_tokens, q3.reused_input_tokens) == (0, 512, 1024)


def test_fifo_serves_arrival_order(sim):
    res = sim(_lpm_rows(), engine={"num_gpu_blocks": 20000,
                                   "sglang": {"max_prefill_tokens": 2100}})
    q1, q2, q3 = (by_uid(res, i) for i in (2, 3, 4))
    assert q1.first_admit_ms < q2.first_admit_ms < q3.first_admit_ms


def test_lpm_puts_a_request_sharing_an_uncached_prefix_with_an_earlier_one_last(sim):
    # Q2 and Q3 share 1024 uncached tokens, Q1 is unrelated: Q3 goes behind Q1, so Q2 and
    # Q1 share a pass and Q3 then reuses what Q2 computed.
    rows = [row(100, [50, 51, 52], 5, 1400), row(101, [60, 61, 62], 2, 1101),
            row(101, [60, 61, 63], 2, 1102), row(101, [10, 11, 12], 2, 1100)]
    res = sim(rows, engine={"num_gpu_blocks": 20000,
                            "sglang": {"schedule_policy": "lpm", "max_prefill_tokens": 2500}})
    q2, q3, q1 = (by_uid(res, i) for i in (1, 2, 3))
    assert q2.first_admit_ms == q1.first_admit_ms < q3.first_admit_ms
    assert q3.reused_input_tokens == 1024


def test_prefill_decode_interval_forces_decode_steps_after_a_prefill(sim):
    # interval 2: after A's prefill two decode steps run although B is waiting
    res = sim([row(0, [1, 2], 6, 1000), row(10.0, [3], 3, 500)],
              engine={"prefill_decode_interval": 2})
    e = P(1000) + D(1001) + D(1002)
    b = by_uid(res, 1)
    assert b.first_admit_ms == approx(e)
    assert b.first_token_ms == approx(e + P(500))


# -- disaggregation --------------------------------------------------------------------------

def test_disaggregated_destination_first(sim):
    # §6 (SGLang): the decode slots are reserved at arrival; the prefill worker's pass
    # costs P only, the decode worker's first step D(prompt) emits the first visible token.
    cluster = {"prefill": {"workers": 1, "engine": {"backend": "sglang"}},
               "decode": {"workers": 1, "engine": {"backend": "sglang"}}}
    res = sim([row(0, [1, 2], 5, 1000)], cluster=cluster)
    r = by_uid(res, 0)
    assert r.destination_reserved_ms == 0.0
    assert r.source_held_ms == approx(P(1000))
    assert r.destination_activated_ms == approx(P(1000))
    assert r.ttft_ms == approx(P(1000) + D(1000))
    assert r.ttst_ms == approx(D(1001))


# -- invariants ---------------------------------------------------------------------------------

@st.composite
def workloads(draw):
    bs = draw(st.sampled_from([1, 1, 16]))
    pool = draw(st.sampled_from([1500, 3000, 8000]))
    chunk = draw(st.sampled_from([256, 1024, 8192]))
    sg = {"chunked_prefill_size": chunk,
          "schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
          "clip_max_new_tokens": draw(st.sampled_from([16, 4096])),
          "schedule_conservativeness": draw(st.sampled_from([0.5, 1.0, 2.0]))}
    engine = {"block_size": bs, "num_gpu_blocks": pool // bs, "sglang": sg,
              "max_num_seqs": draw(st.sampled_from([2, 256])),
              "prefill_decode_interval": draw(st.sampled_from([0, 0, 2]))}
    n = draw(st.integers(1, 10))
    rows, fresh = [], 1000
    for i in range(n):
        out = draw(st.integers(1, 200))
        shared = draw(st.integers(0, 3))
        ids = list(range(shared)) + list(range(fresh, fresh + 2))
        fresh += 2
        isl = draw(st.integers(1, min(len(ids) * 64, pool - min(out, sg["clip_max_new_tokens"]) - 2 * bs - 1)))
        ids = ids[: -(-isl // 64)]
        rows.append(row(draw(st.sampled_from([0.0, 5.0, 50.0, 300.0])), ids, out, isl,
                        session_id=f"r{i}"))
    rows.sort(key=lambda r: r["timestamp"])
    return rows, engine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(workloads())
def test_invariants(tmp_path, case):
    """No request lost, TTFT <= E2E, output lengths as asked, the pool's slots always
    accounted for and within bounds, and decode coalescing changes nothing."""
    rows, engine = case
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frames = []
    for coalesce in (True, False):
        data = {"workload": {"trace": str(path), "trace_block_size": 64},
                "cluster": {"workers": 1, "engine": {"backend": "sglang", **engine}},
                "run": {"coalesce_decode": coalesce}}
        scenario = scenario_from_dict(data, base_dir=str(tmp_path), source="inv")
        cluster = build(scenario, Streams(scenario.seed))
        run_until(cluster.env, None)
        sched = cluster.workers[0].sched
        sched.kv.check()
        assert sched.kv.private == 0 and sched.kv.protected == 0   # nothing held at the end
        res = collect(scenario, cluster, 0.0)
        df = res.requests
        assert len(df) == len(rows)
        assert (df.terminal_status == "completed").all()
        assert (df.output_length == df.requested_output_length).all()
        assert (df.ttft_ms <= df.e2e_latency_ms + 1e-9).all()
        assert (df.first_token_ms >= df.first_admit_ms).all()
        assert (res.passes.kv_blocks_active <= engine["num_gpu_blocks"]).all()
        assert ((res.passes.end_ms - res.passes.start_ms) > 0).all()
        frames.append(df[["ttft_ms", "e2e_latency_ms", "reused_input_tokens",
                          "readmission_count"]].to_numpy())
    assert (abs(frames[0] - frames[1]) <= 1e-9).all()
