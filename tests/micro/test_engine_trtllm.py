"""TRT-LLM backend (guaranteed no evict, reference §3.5): unit, micro-scenario and invariants.

The rules under test (``simmodel/engine/trtllm.py``; docs/model.md, "TRT-LLM backend"):

* a request's footprint is ``ceil((prompt + max_output) / block_size)`` blocks, with
  ``max_output`` clamped to the pool (``prompt + max_output <= num_blocks * block_size``);
  a prompt of the pool's size or more is rejected;
* the waiting head is admitted only if its footprint beyond its cached prefix, plus what
  every running request still owes to completion, fits in what the pool can supply once
  its prefix is held; nothing is ever preempted;
* a prompt whose every block is cached (block-aligned) computes nothing: it decodes in the
  pass that admits it (prompt length in the decode term, no prefill, no budget);
* admission goes on with the budget spent only for such fully cached prompts, and stops
  after the first one admitted with no budget left.

Micro-scenarios run whole scenarios through ``simmodel.run`` on tiny Mooncake traces, with
every expected time composed pass by pass from the cost model (``P``, ``D`` on the
reference's nanosecond grid), as in tests/test_micro_scenarios.py; each runs with decode
coalescing on and off.  No number is copied from the reference's output.
"""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.config import EngineConfig
from simmodel.engine.request import DONE, EngineRequest
from simmodel.engine.timing import (batch_new_tokens, decode_poly_ms, duration_ns, make_timing,
                                    prefill_poly_ms)
from simmodel.engine.tokens import TokenSequence
from simmodel.engine.trtllm import NoEvictViolation, TrtllmScheduler
from simmodel.scenario import scenario_from_dict
from simmodel.workload.model import Prompt

EXACT = 1e-9                   # ms; far below the 1e-6 ms grid, above float noise
LONG = 1e-6                    # ms; sums over ~1000 passes (float accumulation)
BS = 32                        # the trtllm default block size
WALL_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def P(t: int) -> float:
    """Prefill part of a pass with ``t`` new tokens, ms on the ns grid."""
    return duration_ns(prefill_poly_ms(t)) / 1e6 if t > 0 else 0.0


def D(active: int, blocks: int) -> float:
    """Decode part of a pass with ``active`` tokens in its decoders, pool of ``blocks``."""
    return duration_ns(decode_poly_ms(active, blocks * BS)) / 1e6


def decode_ends(start: float, first_len: int, n: int, blocks: int) -> list[float]:
    """End times of ``n`` consecutive passes of one lone decoder of length ``first_len``,
    ``first_len + 1``, ... starting at ``start`` (summed pass by pass)."""
    ends, t = [], start
    for j in range(n):
        t += D(first_len + j, blocks)
        ends.append(t)
    return ends


def row(ts, hash_ids, out, input_length) -> dict:
    return {"timestamp": ts, "hash_ids": list(hash_ids), "output_length": out,
            "input_length": input_length}


def approx(x, tol=EXACT):
    return pytest.approx(x, abs=tol)


@pytest.fixture(params=[True, False], ids=["coalesced", "per-pass"])
def sim(request, tmp_path):
    """``sim(rows, engine=..., tbs=512)`` -> Result of one trtllm worker."""
    coalesce = request.param

    def _run(rows, *, engine=None, tbs=512):
        path = tmp_path / "trace.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        data = {
            "workload": {"trace": str(path), "trace_block_size": tbs},
            "cluster": {"workers": 1, "engine": {"backend": "trtllm", **(engine or {})}},
            "run": {"coalesce_decode": coalesce},
        }
        return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="trtllm"))
    return _run


def req(result, i: int):
    """Row of the ``i``-th request of the trace (release order)."""
    df = result.requests
    col = "uid" if "uid" in df.columns else "request_id"
    return df[df[col] == i].iloc[0]


def never_preempted(result) -> bool:
    df = result.requests
    done = df[df.terminal_status == "completed"]
    return bool((done.admission_count == 1).all() and (done.readmission_count == 0).all())


# -- unit tier: the pure scheduler ----------------------------------------------------------

def engine_request(uid: int, prompt: int, out: int, ids=None, run_len: int = 512,
                   max_model_len=None) -> EngineRequest:
    ids = tuple(ids) if ids is not None else tuple(range(1000 * (uid + 1),
                                                         1000 * (uid + 1) + -(-prompt // run_len)))
    seq = TokenSequence(Prompt(ids, run_len, prompt), BS, uid)
    return EngineRequest(uid, seq, out, arrival_ms=0.0, max_model_len=max_model_len)


def scheduler(**kw) -> TrtllmScheduler:
    eng = EngineConfig(backend="trtllm", **kw)
    return TrtllmScheduler(eng, make_timing(eng))


def test_default_block_size_is_32():
    assert scheduler().bs == BS


def test_output_is_clamped_to_the_pool_and_a_pool_sized_prompt_is_rejected():
    s = scheduler(num_gpu_blocks=32)                      # 1024 tokens
    a, b, c = engine_request(0, 1000, 1000), engine_request(1, 1023, 5), engine_request(2, 1024, 5)
    for r in (a, b, c):
        s.enqueue(r)
    assert (a.max_output, b.max_output) == (24, 1)
    assert a.requested_output == 1000
    assert s.footprint(a) == 32 and s.footprint(b) == 32
    assert s.rejects(c) and not s.rejects(b)


def test_max_model_len_clamps_first_and_the_footprint_follows():
    s = scheduler(num_gpu_blocks=100, max_model_len=1100)
    r = engine_request(0, 1000, 1000, max_model_len=1100)
    s.enqueue(r)
    assert r.max_output == 100
    assert s.footprint(r) == -(-1100 // BS)


def test_running_requests_owe_their_footprint_minus_the_blocks_they_hold():
    s = scheduler(num_gpu_blocks=80)
    a, b = engine_request(0, 1000, 1000), engine_request(1, 1000, 1000)
    s.enqueue(a)
    s.enqueue(b)
    plan = s.schedule(0.0)
    assert [e[0] for e in plan.entries] == [a]           # b waits: 63 + 63 > 80
    assert a.n_blocks == -(-1000 // BS)
    assert s.owed() == -(-2000 // BS) - a.n_blocks
    assert s.owed() <= s.kv.available
    s.settle(plan, plan.duration_ms, 0, False)
    assert list(s.waiting) == [b]


def test_a_blocked_head_does_not_stop_decode_coalescing():
    # B cannot fit before A completes, so the passes until then may be covered at once.
    s = scheduler(num_gpu_blocks=80)
    a, b = engine_request(0, 1000, 1000), engine_request(1, 1000, 1000)
    s.enqueue(a)
    s.enqueue(b)
    for idx in range(2):                                 # prompt pass, first decode pass
        plan = s.schedule(float(idx))
        s.settle(plan, float(idx + 1), idx, False)
    durations, total = s.decode_run()
    assert len(durations) == 1000 - a.generated           # up to A's completion
    assert total == a.seq_len and list(s.waiting) == [b]


def test_a_decode_that_lacks_a_block_raises_instead_of_preempting():
    # By construction a running request never lacks a block; if something took the
    # blocks it was promised, the pass stops with an error rather than preempt.
    s = scheduler(num_gpu_blocks=8)
    r = engine_request(0, BS * 2, 100)
    s.enqueue(r)
    now, idx = 0.0, 0
    plan = s.schedule(now)
    now += plan.duration_ms
    s.settle(plan, now, idx, False)
    assert s.kv.allocate(s.kv.free)                       # a rogue allocation
    with pytest.raises(NoEvictViolation):
        for idx in range(1, BS + 2):                     # the next block boundary
            plan = s.schedule(now)
            now += plan.duration_ms
            s.settle(plan, now, idx, False)
    assert s.preemptions == 0


# -- micro-scenarios -------------------------------------------------------------------------

def test_two_requests_in_80_blocks_run_strictly_one_after_the_other(sim):
    # §3.5's example: 1000 in + 1000 out each; ceil(2000/32) = 63 blocks each, 126 > 80.
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], 1000, 1000)],
              engine={"num_gpu_blocks": 80})
    e1 = P(1000)
    a_last = decode_ends(e1, 1001, 999, 80)[-1]
    b_first = a_last + P(1000)
    b_last = decode_ends(b_first, 1001, 999, 80)[-1]
    a, b = req(res, 0), req(res, 1)
    assert a.first_token_ms == approx(e1)
    assert a.last_token_ms == approx(a_last, LONG)
    assert b.first_admit_ms == a.last_token_ms            # exactly at A's completion
    assert b.first_token_ms == approx(b_first, LONG)
    assert b.last_token_ms == approx(b_last, LONG)
    assert (a.output_length, b.output_length) == (1000, 1000)
    p = res.passes
    assert ((p.num_prefill + p.num_decode) == 1).all()    # never together
    assert never_preempted(res)


@pytest.mark.parametrize("blocks, together", [(125, False), (126, True)])
def test_the_footprint_counts_the_last_emitted_token(sim, blocks, together):
    # 1000 + 985 = 1985 tokens -> 63 blocks (62 if the last token were not counted).
    res = sim([row(0, [1, 2], 985, 1000), row(0, [3, 4], 985, 1000)],
              engine={"num_gpu_blocks": blocks})
    a, b = req(res, 0), req(res, 1)
    if together:
        assert a.ttft_ms == approx(P(2000)) and b.ttft_ms == approx(P(2000))
    else:
        assert a.ttft_ms == approx(P(1000))
        assert b.first_admit_ms == a.last_token_ms
    assert never_preempted(res)


@pytest.mark.parametrize("blocks", [125, 126])
def test_a_running_request_owes_its_blocks_to_completion(sim, blocks):
    # B arrives at 5 s while A decodes and holds only ~1200 tokens' worth of blocks: with
    # 125 blocks it still waits for A to complete, with 126 it joins at the next pass.
    res = sim([row(0, [1, 2], 1000, 1000), row(5000, [3, 4], 1000, 1000)],
              engine={"num_gpu_blocks": blocks})
    ends = [P(1000)] + decode_ends(P(1000), 1001, 999, blocks)
    a, b = req(res, 0), req(res, 1)
    if blocks == 125:
        assert a.last_token_ms == approx(ends[-1], LONG)
        assert b.first_admit_ms == a.last_token_ms
    else:
        joins = next(t for t in ends if t >= 5000)
        assert b.first_admit_ms == approx(joins, LONG)
        assert b.first_admit_ms < a.last_token_ms
    assert never_preempted(res)


@pytest.mark.parametrize("blocks", [54, 55])
def test_prefix_blocks_held_by_a_running_request_cost_nothing(sim, blocks):
    # A: 1024 tokens + 100 out -> 36 blocks.  B shares A's first 512 tokens (16 blocks,
    # cached when A is scheduled in the same pass): 1000 + 100 -> 35 blocks, 19 beyond the
    # prefix.  A owes 36 - 32 = 4 after its prompt: 19 + 4 fits 55 - 32 = 23, not 22.
    res = sim([row(0, [1, 2], 100, 1024), row(0, [1, 3], 100, 1000)],
              engine={"num_gpu_blocks": blocks})
    a, b = req(res, 0), req(res, 1)
    assert b.reused_input_tokens == 512
    if blocks == 55:
        t = batch_new_tokens(2, 1024 + 1000, 0 + 512)
        assert t == 1512
        assert a.ttft_ms == approx(P(t)) and b.ttft_ms == approx(P(t))
    else:
        a_last = decode_ends(P(1024), 1025, 99, blocks)[-1]
        assert a.last_token_ms == approx(a_last, LONG)
        assert b.first_admit_ms == a.last_token_ms
        assert b.first_token_ms == approx(a_last + P(1000 - 512), LONG)  # inactive hits
    assert never_preempted(res)


def test_a_fully_cached_prompt_decodes_in_the_pass_that_admits_it(sim):
    # 1024 tokens = 32 whole blocks.  B, identical to A and behind it in the same pass,
    # hits all 32 (vLLM would cap the hit at 31 and compute the last block): no prefill,
    # it decodes with its prompt length and emits its first token at that pass end.  C,
    # the same prompt alone later, is a pure decode pass.
    blocks = 1000
    res = sim([row(0, [1, 2], 3, 1024), row(0, [1, 2], 3, 1024), row(1000, [1, 2], 2, 1024)],
              engine={"num_gpu_blocks": blocks})
    e1 = P(1024) + D(1024, blocks)
    e2 = e1 + D(1025 + 1025, blocks)
    e3 = e2 + D(1026 + 1026, blocks)
    a, b, c = req(res, 0), req(res, 1), req(res, 2)
    assert (a.reused_input_tokens, b.reused_input_tokens, c.reused_input_tokens) == (0, 1024, 1024)
    assert a.first_token_ms == approx(e1) and b.first_token_ms == approx(e1)
    assert a.last_token_ms == approx(e3) and b.last_token_ms == approx(e3)
    assert c.ttft_ms == approx(D(1024, blocks))
    assert c.e2e_latency_ms == approx(D(1024, blocks) + D(1025, blocks))
    first = res.passes.iloc[0]
    assert (first.prefill_tokens, first.num_prefill, first.num_decode,
            first.decode_tokens) == (1024, 1, 1, 1024)
    assert res.summary["committed_prefill_tokens"] == 1024


def test_with_the_budget_spent_one_fully_cached_prompt_is_still_admitted(sim):
    # Budget 64.  W1, W2 (64 tokens each) leave their blocks cached.  At 1000: X (64 new
    # tokens) spends the budget; C1 (W1's prompt, fully cached) is admitted anyway and
    # decodes in that pass; C2 (W2's) waits for the next pass, where budget is left.
    blocks = 100
    res = sim([row(0, [1], 1, 64), row(0, [2], 1, 64),
               row(1000, [10], 2, 64), row(1000, [1], 2, 64), row(1000, [2], 2, 64)],
              engine={"num_gpu_blocks": blocks, "max_num_batched_tokens": 64}, tbs=64)
    w1, w2 = req(res, 0), req(res, 1)
    assert w1.ttft_ms == approx(P(64))
    assert w2.first_admit_ms == approx(P(64))             # the budget was spent on W1
    f1 = 1000 + P(64) + D(64, blocks)
    f2 = f1 + D(65 + 65 + 64, blocks)
    f3 = f2 + D(65, blocks)
    x, c1, c2 = req(res, 2), req(res, 3), req(res, 4)
    assert x.first_token_ms == approx(f1) and c1.first_token_ms == approx(f1)
    assert x.last_token_ms == approx(f2) and c1.last_token_ms == approx(f2)
    assert c2.first_admit_ms == approx(f1)
    assert c2.first_token_ms == approx(f2) and c2.last_token_ms == approx(f3)
    assert (x.reused_input_tokens, c1.reused_input_tokens, c2.reused_input_tokens) == (0, 64, 64)


def test_outputs_are_clamped_to_the_pool(sim):
    # 32 blocks = 1024 tokens: 1000 + 1000 is cut to 1000 + 24; a 1024-token prompt is
    # rejected (vLLM would run it); a 1023-token prompt emits one token.
    blocks = 32
    res = sim([row(0, [1, 2], 1000, 1000), row(0, [3, 4], 5, 1024), row(10_000, [5, 6], 5, 1023)],
              engine={"num_gpu_blocks": blocks})
    a, r, c = req(res, 0), req(res, 1), req(res, 2)
    assert a.output_length == 24 and a.requested_output_length == 1000
    assert a.last_token_ms == approx(decode_ends(P(1000), 1001, 23, blocks)[-1])
    assert r.terminal_status == "rejected" and r.output_length == 0
    assert r.terminal_time_ms == approx(P(1000))          # at the end of the pass formed
    assert c.output_length == 1 and c.ttft_ms == approx(P(1023))


# -- invariants tier ---------------------------------------------------------------------------

@st.composite
def workloads(draw):
    bs = draw(st.sampled_from([8, 16, 32]))
    tbs = draw(st.sampled_from([16, 32, 64, 128]))
    blocks = draw(st.integers(4, 40))
    pool = blocks * bs
    chunked = draw(st.booleans())
    budget = draw(st.sampled_from([16, 64, 256, 8192]))
    engine = {
        "backend": "trtllm",
        "block_size": bs,
        "num_gpu_blocks": blocks,
        "max_num_batched_tokens": budget,
        "max_num_seqs": draw(st.sampled_from([1, 2, 4, 256])),
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": draw(st.booleans()) or draw(st.booleans()),
        "max_model_len": draw(st.one_of(st.none(), st.integers(8, 2 * pool))),
    }
    n = draw(st.integers(1, 10))
    rows, seen, fresh = [], set(), 1000
    for _ in range(n):
        base = draw(st.integers(0, 2))
        n_shared = draw(st.integers(0, 4))
        n_own = draw(st.integers(0 if n_shared else 1, 2))
        hash_ids = [100 * base + j for j in range(n_shared)] + list(range(fresh, fresh + n_own))
        fresh += n_own
        longest = len(hash_ids) * tbs
        if not chunked:
            longest = min(longest, budget)    # otherwise it could never be scheduled
        # block-aligned prompts (whole-prompt hits) often, others sometimes over the pool
        length = draw(st.sampled_from([longest, max(1, longest - 1)])
                      | st.integers(1, longest))
        r = {"hash_ids": hash_ids, "input_length": length,
             "output_length": draw(st.integers(1, 3 * pool // 2))}
        session = draw(st.sampled_from([None, None, "s1", "s2"]))
        if session is not None:
            r["session_id"] = session
        if session is None or session not in seen:
            r["timestamp"] = draw(st.sampled_from([0, 0, 4, 17.5, 60, 300]))
        else:
            r["delay"] = draw(st.sampled_from([0, 3, 25.0]))
        if session is not None:
            seen.add(session)
        rows.append(r)
    return {"rows": rows, "engine": engine, "tbs": tbs,
            "workers": draw(st.sampled_from([1, 1, 2]))}


def run_spec(tmp_path, spec, coalesce: bool):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in spec["rows"]))
    data = {
        "workload": {"trace": str(path), "trace_block_size": spec["tbs"]},
        "cluster": {"workers": spec["workers"], "engine": spec["engine"]},
        "run": {"coalesce_decode": coalesce, "max_sim_time_ms": 1e7},
    }
    return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="trtllm"))


def check_invariants(res, spec) -> None:
    df = res.requests
    eng = spec["engine"]
    pool = eng["num_gpu_blocks"] * eng["block_size"]
    limit = pool if eng["max_model_len"] is None else min(pool, eng["max_model_len"])
    # nothing lost: every request ends, completed or rejected
    assert len(df) == len(spec["rows"])
    assert set(df.terminal_status) <= {"completed", "rejected"}, df.terminal_status.tolist()
    assert ((df.terminal_status == "rejected") == (df.input_length >= limit)).all()
    done = df[df.terminal_status == "completed"]
    # never preempted; outputs clamped to max_model_len and to the pool
    assert (done.admission_count == 1).all() and (done.readmission_count == 0).all()
    assert (done.output_length == done.requested_output_length.clip(
        upper=limit - done.input_length)).all()
    assert (done.reused_input_tokens <= done.input_length).all()
    if not eng["enable_prefix_caching"]:
        assert (df.reused_input_tokens == 0).all()
    for r in done.itertuples():
        assert r.arrival_time_ms <= r.first_admit_ms <= r.first_token_ms <= r.last_token_ms
    # KV within bounds in every pass
    p = res.passes
    assert (p.kv_blocks_active >= 0).all()
    assert (p.kv_blocks_active <= eng["num_gpu_blocks"]).all()


def assert_same_runs(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.passes.reset_index(drop=True),
                                  b.passes.reset_index(drop=True), check_exact=True)
    for k, x in a.summary.items():
        if k in WALL_KEYS:
            continue
        y = b.summary[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        assert x == y, (k, x, y)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(workloads())
def test_invariants_and_coalescing_changes_nothing(tmp_path, spec):
    coalesced = run_spec(tmp_path, spec, True)
    stepped = run_spec(tmp_path, spec, False)
    check_invariants(coalesced, spec)
    check_invariants(stepped, spec)
    assert_same_runs(coalesced, stepped)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_pool_always_covers_what_running_requests_owe(data):
    """Pure engine, pass by pass: after every batch is formed, what the running requests
    may still take to completion is available, every block is accounted for, and no
    request is ever preempted or lost."""
    blocks = data.draw(st.integers(4, 30))
    eng = EngineConfig(backend="trtllm", num_gpu_blocks=blocks,
                       max_num_batched_tokens=data.draw(st.sampled_from([16, 100, 8192])),
                       max_num_seqs=data.draw(st.sampled_from([2, 256])))
    s = TrtllmScheduler(eng, make_timing(eng))
    n = data.draw(st.integers(1, 8))
    arrivals = sorted(data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    reqs = []
    for uid, at in enumerate(arrivals):
        ids = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
        length = data.draw(st.integers(1, len(ids) * 64))
        out = data.draw(st.integers(1, blocks * BS))
        seq = TokenSequence(Prompt(tuple(ids), 64, length), BS, uid)
        reqs.append((at, EngineRequest(uid, seq, out, arrival_ms=float(at))))
    pending = list(reqs)
    now, idx = 0.0, 0
    while pending or s.has_work():
        while pending and pending[0][0] <= idx:
            s.enqueue(pending.pop(0)[1])
        if not s.has_work():
            idx = pending[0][0]
            continue
        plan = s.schedule(now)
        assert plan.entries or plan.rejected, "a request can never be scheduled"
        assert s.owed() <= s.kv.available
        s.kv.check()
        now += plan.duration_ms
        s.settle(plan, now, idx, False)
        idx += 1
    assert s.preemptions == 0
    for _, r in reqs:
        assert r.state == DONE and r.status in ("completed", "rejected")
        if r.status == "completed":
            assert r.generated == r.max_output == min(r.requested_output,
                                                      blocks * BS - r.prompt_len)
