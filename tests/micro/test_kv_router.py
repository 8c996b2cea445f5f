"""The KV-cache-aware router (reference §5.2): the cost examples, stickiness, seeded tie
breaking, temperature, the router queue, ``kv_event_lag_ms``, and decode coalescing.

Costs are read where the router computes them: a ``KvRouter`` subclass records the cost
vector of every decision (``_choose``).  Unit cases drive a router over stand-in workers
(events and lifecycle signals fed by hand); whole runs swap the recording subclass into
``simmodel.sim`` and run ``router: {mode: kv}`` scenarios on Python-built workloads.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
import simmodel.cluster.kv_router
import simmodel.sim
from simmodel.cluster.kv_router import KvRouter
from simmodel.config import (ClusterConfig, EngineConfig, RouterConfig, RunConfig, Scenario,
                             WorkloadConfig)
from simmodel.engine.kv_cache import STORED
from simmodel.engine.request import EngineRequest
from simmodel.engine.timing import decode_poly_ms, div_ns, duration_ns, prefill_poly_ms
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt, Session, Turn, Workload

BS = 64
CAP = 16384 * BS
EXACT = 1e-9


def P(t: int) -> float:
    return div_ns(duration_ns(prefill_poly_ms(t)), 1.0) / 1e6 if t > 0 else 0.0


def D(active: int, cap: int = CAP) -> float:
    return div_ns(duration_ns(decode_poly_ms(active, cap)), 1.0) / 1e6


def approx(x):
    return pytest.approx(x, abs=EXACT)


_fresh = itertools.count(10**6)


def fresh_ids(n_blocks: int) -> tuple:
    return tuple(next(_fresh) for _ in range(n_blocks))


def prompt(tokens: int, ids=None) -> Prompt:
    ids = tuple(ids) if ids is not None else fresh_ids(-(-tokens // BS))
    return Prompt(ids, BS, tokens)


class Recording(KvRouter):
    """A KvRouter that keeps (costs, chosen worker) of every decision."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.log: list[tuple[list[float], int]] = []

    def _choose(self, costs):
        i = super()._choose(costs)
        self.log.append((list(costs), i))
        return i


# -- unit level: a router over stand-in workers ----------------------------------------------

class _Env:
    now = 0.0


class _Worker:
    def __init__(self, idx):
        self.idx = idx
        self.state = "active"
        self.got = []

    def view(self):
        return self               # (a stand-in: its own view, always current)

    def submit(self, req):
        self.got.append(req)


def make_router(n_workers=4, seed=0, **cfg):
    env = _Env()
    workers = [_Worker(i) for i in range(n_workers)]
    r = Recording(env, workers, RouterConfig(mode="kv", **cfg), block_size=BS,
                  max_num_batched_tokens=8192, rng=np.random.default_rng(seed))
    r.attach()
    return env, workers, r


_uid = itertools.count()


def engine_request(p: Prompt, osl=5, at=0.0) -> EngineRequest:
    u = next(_uid)
    return EngineRequest(u, TokenSequence(p, BS, u), osl, arrival_ms=at)


def worker_of(workers, req) -> int:
    return next(w.idx for w in workers if req in w.got)


def prefill_done_and_cached(router, workers, req, t):
    """What a worker reports at the end of ``req``'s prefill pass (at ``t``): its prompt
    blocks are Stored, and its first token drops it from the prefill load."""
    w = worker_of(workers, req)
    hashes = req.seq.ensure(req.prompt_len // BS)[: req.prompt_len // BS]
    router.on_kv_events(w, [(t, STORED, h) for h in hashes])
    router.on_first_token(req)
    return w


def test_idle_worker_cost_is_prefill_plus_new_blocks():
    # §5.2: idle worker, 2048-token prompt, block 64 -> 32 (prefill) + 32 (new blocks).
    env, workers, r = make_router(n_workers=1)
    r.route(engine_request(prompt(2048)))
    assert r.log == [([64.0], 0)]


def test_same_prompt_again_on_the_worker_holding_it_costs_only_its_blocks():
    # After the first finished: prefill max(0, 32 - 32) = 0, decode 0 + 32 -> 32 on the
    # holder; 64 elsewhere.  The repeat goes to the holder.
    env, workers, r = make_router()
    p = prompt(2048)
    a = engine_request(p)
    r.route(a)
    env.now = 50.0
    w = prefill_done_and_cached(r, workers, a, 50.0)
    r.on_done(a)
    env.now = 100.0
    b = engine_request(p)
    r.route(b)
    costs, chosen = r.log[-1]
    assert costs == [32.0 if i == w else 64.0 for i in range(4)]
    assert chosen == w


def test_eight_simultaneous_prompts_on_four_workers():
    # §5.2: the first four get 64 (one per worker), the next four see 128 (64 + 64).
    env, workers, r = make_router()
    for _ in range(8):
        r.route(engine_request(prompt(2048)))
    mins = [min(c) for c, _ in r.log]
    assert mins == [64.0] * 4 + [128.0] * 4
    chosen = [i for _, i in r.log]
    assert sorted(chosen[:4]) == [0, 1, 2, 3]
    assert sorted(chosen[4:]) == [0, 1, 2, 3]
    assert r.log[4][0] == [128.0] * 4


def test_prefill_load_drops_at_first_token_and_blocks_at_completion():
    # One worker.  A (2048 fresh tokens) routed: a fresh 2048-token B costs
    # (2048 + 2048)/64 + 32 + 32 = 128; after A's first token 32 + 64 = 96; after A's
    # completion 64 again.  A's events are never published here: no overlap for anyone.
    env, workers, r = make_router(n_workers=1)
    a = engine_request(prompt(2048))
    r.route(a)

    def probe():
        b = engine_request(prompt(2048))
        return r._costs(b, b.seq.ensure(32)[:32], [0], r.views)[0]
    assert probe() == 128.0
    r.on_first_token(a)
    assert probe() == 96.0
    r.on_done(a)
    assert probe() == 64.0


def test_shared_prefix_overlap_credit():
    # B shares A's first 16 blocks (1024 tokens) and A finished: on A's worker the
    # prefill term is 32 - 16 = 16, the decode term 0 + 32 -> 48; elsewhere 64.
    env, workers, r = make_router()
    base = fresh_ids(32)
    a = engine_request(prompt(2048, base))
    r.route(a)
    w = prefill_done_and_cached(r, workers, a, 40.0)
    r.on_done(a)
    env.now = 60.0
    b = engine_request(prompt(2048, base[:16] + fresh_ids(16)))
    r.route(b)
    costs, chosen = r.log[-1]
    assert costs == [48.0 if i == w else 64.0 for i in range(4)]
    assert chosen == w


def test_events_become_visible_only_after_the_lag():
    env, workers, r = make_router(n_workers=2, kv_event_lag_ms=20.0)
    p = prompt(2048)
    a = engine_request(p)
    r.route(a)
    w = prefill_done_and_cached(r, workers, a, 50.0)
    r.on_done(a)
    env.now = 69.999
    r.route(engine_request(p))
    assert r.log[-1][0] == [64.0, 64.0]
    r.on_done(workers[r.log[-1][1]].got[-1])
    env.now = 70.0                                   # pass end + lag: visible
    r.route(engine_request(p))
    assert r.log[-1][0] == [32.0 if i == w else 64.0 for i in range(2)]


def test_temperature_softmax_over_normalised_costs():
    # p_i ∝ exp(-(c_i - c_min) / ((c_max - c_min) T)): costs (10, 20), T = 1 ->
    # p_0 = 1 / (1 + e^-1) ≈ 0.731; equal costs -> uniform.
    env, workers, r = make_router(n_workers=2, seed=7, router_temperature=1.0)
    n = 4000
    picks = [r._choose([10.0, 20.0]) for _ in range(n)]
    p0 = 1.0 / (1.0 + math.exp(-1.0))
    assert picks.count(0) / n == pytest.approx(p0, abs=0.03)
    picks = [r._choose([5.0, 5.0]) for _ in range(n)]
    assert picks.count(0) / n == pytest.approx(0.5, abs=0.03)


def test_temperature_zero_breaks_ties_uniformly_with_the_seeded_stream():
    env, workers, r = make_router(n_workers=4, seed=3)
    picks = [r._choose([1.0, 0.5, 0.5, 0.5]) for _ in range(3000)]
    assert 0 not in picks
    for i in (1, 2, 3):
        assert picks.count(i) / 3000 == pytest.approx(1 / 3, abs=0.04)
    again = make_router(n_workers=4, seed=3)[2]
    assert [again._choose([1.0, 0.5, 0.5, 0.5]) for _ in range(3000)] == picks


# -- whole runs ------------------------------------------------------------------------------

@pytest.fixture
def recorded(monkeypatch):
    """Swap the recording router in for the one ``routing.make_router`` builds; returns
    the list of routers built."""
    built = []

    class R(Recording):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            built.append(self)
    monkeypatch.setattr(simmodel.cluster.kv_router, "KvRouter", R)
    return built


def scenario(workers=4, seed=0, coalesce=True, engine=None, **router) -> Scenario:
    return Scenario(workload=WorkloadConfig(trace="(python)"),
                    cluster=ClusterConfig(workers=workers, engine=engine or EngineConfig(),
                                          router=RouterConfig(mode="kv", **router)),
                    run=RunConfig(coalesce_decode=coalesce), seed=seed)


def workload(*reqs) -> Workload:
    """(input tokens, output tokens, arrival ms[, Prompt]) -> one-turn sessions."""
    sessions = []
    for i, spec in enumerate(reqs):
        isl, osl, at = spec[:3]
        p = spec[3] if len(spec) > 3 else prompt(isl)
        sessions.append(Session(f"r{i}", (Turn(f"r{i}", 0, p, osl, arrival_ms=float(at)),)))
    return Workload(tuple(sessions), source="test")


def run(sc, *reqs):
    return simmodel.run(sc, workload=workload(*reqs))


def by_uid(res):
    return res.requests.sort_values("uid").reset_index(drop=True)


def test_run_repeat_after_first_finished_goes_to_the_holder(recorded):
    p = prompt(2048)
    res = run(scenario(), (2048, 2, 0, p), (2048, 2, 500, p))
    a, b = by_uid(res).iloc[0], by_uid(res).iloc[1]
    (router,) = recorded
    (c0, w0), (c1, w1) = router.log
    assert c0 == [64.0] * 4
    assert c1 == [32.0 if i == w0 else 64.0 for i in range(4)]
    assert a.decode_worker_idx == w0 and b.decode_worker_idx == w0 == w1
    assert b.reused_input_tokens == 1984            # the engine keeps the last block
    assert b.ttft_ms == approx(P(64))


def test_run_eight_simultaneous_prompts(recorded):
    res = run(scenario(), *[(2048, 3, 0)] * 8)
    (router,) = recorded
    assert [min(c) for c, _ in router.log] == [64.0] * 4 + [128.0] * 4
    counts = res.requests.decode_worker_idx.value_counts()
    assert sorted(counts.index) == [0, 1, 2, 3] and (counts == 2).all()
    # each worker prefills its two 2048-token prompts in one pass
    assert list(res.requests.ttft_ms) == [approx(P(4096))] * 8


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_repeats_stick_to_the_worker_holding_the_prompt(seed):
    # Six repeats, every 60 ms, each still decoding when the next arrives (osl 30): the
    # holder costs 32 (no prefill, its blocks already active), the others 64.
    p = prompt(2048)
    res = run(scenario(seed=seed), *[(2048, 30, 60 * k, p) for k in range(6)])
    assert res.requests.decode_worker_idx.nunique() == 1
    assert list(by_uid(res).reused_input_tokens) == [0] + [1984] * 5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prefix_sharing_requests_stick_to_the_prefix_holder(seed):
    base = fresh_ids(16)
    reqs = [(2048, 5, 150 * k, prompt(2048, base + fresh_ids(16))) for k in range(6)]
    res = run(scenario(seed=seed), *reqs)
    r = by_uid(res)
    assert r.decode_worker_idx.nunique() == 1
    assert list(r.reused_input_tokens) == [0] + [1024] * 5


def _mixed_workload():
    shared = fresh_ids(32)
    reqs = []
    for k in range(24):
        n = 512 + 256 * (k % 7)
        p = prompt(n, shared[: n // BS]) if k % 3 == 0 else prompt(n)
        reqs.append((n, 4 + k % 9, 7.5 * (k // 4), p))
    return reqs


def test_same_seed_same_run_and_ties_use_the_seeded_stream():
    reqs = _mixed_workload()
    a = run(scenario(seed=11), *reqs)
    b = run(scenario(seed=11), *reqs)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.passes, b.passes)
    # ties are broken at random: across seeds the placements are not all the same
    placements = {tuple(run(scenario(seed=s), *reqs).requests.decode_worker_idx)
                  for s in range(6)}
    assert len(placements) > 1


@pytest.mark.parametrize("temperature", [0.3, 2.0])
def test_temperature_runs_are_valid_and_seeded(temperature):
    reqs = _mixed_workload()
    a = run(scenario(seed=5, router_temperature=temperature), *reqs)
    b = run(scenario(seed=5, router_temperature=temperature), *reqs)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    r = a.requests
    assert (r.terminal_status == "completed").all()
    assert (r.output_length == r.requested_output_length).all()
    assert r.decode_worker_idx.between(0, 3).all()
    assert a.summary["completed_requests"] == len(reqs)


# -- the router queue ----------------------------------------------------------------------------

@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "per-pass"])
def test_queue_fcfs_dispatches_in_arrival_order(coalesce):
    # Threshold 0.5 x 8192 = 4096 prefill tokens, one worker.  A (5000) is placed and
    # makes the worker busy; B (5000) and C (1000) queue.  A's first token (P(5000))
    # frees the worker: B is dispatched, busy again; C waits for B's first token.
    sc = scenario(workers=1, coalesce=coalesce, router_queue_threshold=0.5,
                  router_queue_policy="fcfs")
    res = run(sc, (5000, 10, 0), (5000, 10, 0), (1000, 10, 0))
    a, b, c = (by_uid(res).iloc[i] for i in range(3))
    e1 = P(5000)
    e2 = e1 + P(5000) + D(5001)
    assert a.first_admit_ms == 0 and a.first_token_ms == approx(e1)
    assert b.first_admit_ms == approx(e1)
    assert b.first_token_ms == approx(e2)
    assert c.first_admit_ms == approx(e2)
    assert c.first_token_ms == approx(e2 + P(1000) + D(5002 + 5001))


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "per-pass"])
def test_queue_wspt_dispatches_the_short_prompt_first_then_the_long_one(coalesce):
    # wspt scores 1/isl: C (1000) goes first at A's first token; 1000 <= 4096 leaves
    # the worker not busy, so B (5000) follows at the same instant.  Both prefill in
    # one pass: t = 2 * (6000 // 2) = 6000, plus A's decode.
    sc = scenario(workers=1, coalesce=coalesce, router_queue_threshold=0.5,
                  router_queue_policy="wspt")
    res = run(sc, (5000, 10, 0), (5000, 10, 0), (1000, 10, 0))
    a, b, c = (by_uid(res).iloc[i] for i in range(3))
    e1 = P(5000)
    assert b.first_admit_ms == approx(e1) and c.first_admit_ms == approx(e1)
    assert b.first_token_ms == approx(e1 + P(6000) + D(5001))
    assert c.first_token_ms == b.first_token_ms


def test_queue_lcfs_serves_the_latest_arrival_first():
    # A (5000) at 0 busies the worker; C (1000) at 1 and B (5000) at 2 queue.  lcfs
    # takes B first (busy again, C waits for B's first token); fcfs takes C first (not
    # busy), then B at the same instant.
    reqs = [(5000, 10, 0), (1000, 10, 1), (5000, 10, 2)]
    e1 = P(5000)
    lcfs = by_uid(run(scenario(workers=1, router_queue_threshold=0.5,
                               router_queue_policy="lcfs"), *reqs))
    assert lcfs.first_admit_ms[2] == approx(e1)
    assert lcfs.first_admit_ms[1] == approx(lcfs.first_token_ms[2])
    assert lcfs.first_admit_ms[1] > e1 + 1
    fcfs = by_uid(run(scenario(workers=1, router_queue_threshold=0.5,
                               router_queue_policy="fcfs"), *reqs))
    assert fcfs.first_admit_ms[1] == approx(e1) and fcfs.first_admit_ms[2] == approx(e1)


def test_without_a_threshold_nothing_queues():
    # the same arrivals with no threshold all reach the worker at 0 (a budget that
    # takes them all shows it)
    sc = scenario(workers=1, engine=EngineConfig(max_num_batched_tokens=16384))
    res = run(sc, (5000, 10, 0), (5000, 10, 0), (1000, 10, 0))
    assert list(res.requests.first_admit_ms) == [0.0] * 3


# -- kv_event_lag_ms -------------------------------------------------------------------------------

@pytest.mark.parametrize("lag, gap, sees", [(None, 10.0, True), (50.0, 10.0, False),
                                            (50.0, 60.0, True)])
def test_event_lag_delays_what_the_index_sees(recorded, lag, gap, sees):
    # A (2048 tokens, one output token) ends with its prefill pass at P(2048); the repeat
    # arrives ``gap`` later.  Within the lag the index does not hold A's blocks yet: both
    # workers cost 64.  Otherwise A's worker costs 32.
    p = prompt(2048)
    res = run(scenario(workers=2, kv_event_lag_ms=lag), (2048, 1, 0, p),
              (2048, 1, P(2048) + gap, p))
    (router,) = recorded
    (_, w0), (costs, w1) = router.log
    if sees:
        assert costs == [32.0 if i == w0 else 64.0 for i in range(2)]
        assert w1 == w0 and by_uid(res).reused_input_tokens[1] == 1984
    else:
        assert costs == [64.0, 64.0]


def test_event_lag_does_not_delay_prefill_done_or_completion(recorded):
    # A (2048, decoding) and, after A's first token, a fresh B: A's worker costs
    # 32 (A's active blocks) + 32 + 32 = 96 -- its prefill load is already gone, even
    # with a lag of a second.  After A's completion, C costs 64 everywhere.
    res = run(scenario(workers=2, kv_event_lag_ms=1000.0), (2048, 5, 0), (2048, 2, 60),
              (2048, 2, 300))
    (router,) = recorded
    (_, w0), (cb, _), (cc, _) = router.log
    assert cb[w0] == 96.0 and cb[1 - w0] == 64.0
    assert by_uid(res).terminal_time_ms[0] < 300
    assert cc[w0] == 64.0


# -- decode coalescing does not change kv-mode runs ------------------------------------------------

@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "per-pass"])
def test_router_sees_evictions_of_passes_ended_inside_a_decode_run(recorded, coalesce):
    # Two workers, 40-block pools, decode_active_request_weight 20.  X (prompt P, 32
    # blocks, one token) leaves P cached on its worker; Y (P's first block, 2400 output
    # tokens) follows it there (overlap) and, growing, evicts P's blocks pass after pass.
    # Z (prompt P) arrives in the middle of Y's long decode: the router must see the
    # Removed events of the passes already ended (Worker.sync settles them in a coalesced
    # run), so P's overlap there is small and Z goes to the idle worker.  A stale index
    # would still credit 32 blocks (cost 52 < 64).
    p = fresh_ids(32)
    sc = scenario(workers=2, coalesce=coalesce, engine=EngineConfig(num_gpu_blocks=40),
                  decode_active_request_weight=20.0)
    res = run(sc, (2048, 1, 0, prompt(2048, p)), (64, 2400, 100, prompt(64, p[:1])),
              (2048, 2, 45000, prompt(2048, p)))
    (router,) = recorded
    (_, wx), (_, wy), (cz, wz) = router.log
    assert wy == wx and wz != wx
    assert cz[wz] == 64.0 and cz[wx] > 64.0
    r = by_uid(res)
    assert r.first_admit_ms[2] == 45000.0
    assert r.terminal_time_ms[1] > 45000.0                     # Y still decoding then


def _session_workload(shared, k0):
    """Multi-turn sessions sharing prefixes, long outputs, a small pool (evictions)."""
    sessions = []
    for s in range(6):
        turns = []
        for k in range(3):
            n = 300 + 200 * ((s + k + k0) % 5)
            p = prompt(n, shared[(s % 2) * 20:][: -(-n // BS)]) if (s + k) % 2 else prompt(n)
            turns.append(Turn(f"s{s}", k, p, 8 + 5 * ((s * 3 + k) % 7),
                              arrival_ms=float(13 * s) if k == 0 else None,
                              delay_ms=None if k == 0 else 4.0 * s))
        sessions.append(Session(f"s{s}", tuple(turns)))
    return Workload(tuple(sessions), source="test")


ROUTER_VARIANTS = {
    "default": {},
    "lag": {"kv_event_lag_ms": 7.0},
    "queue-fcfs": {"router_queue_threshold": 0.05},
    "queue-wspt": {"router_queue_threshold": 0.05, "router_queue_policy": "wspt"},
    "temperature": {"router_temperature": 0.5},
}


@pytest.mark.parametrize("variant", list(ROUTER_VARIANTS))
def test_coalescing_on_and_off_give_identical_kv_runs(variant):
    shared = fresh_ids(60)
    wl = _session_workload(shared, 0)
    eng = EngineConfig(num_gpu_blocks=60, max_num_batched_tokens=1024)
    out = [simmodel.run(scenario(workers=3, seed=4, coalesce=c, engine=eng,
                                 **ROUTER_VARIANTS[variant]), workload=wl)
           for c in (True, False)]
    pd.testing.assert_frame_equal(out[0].requests, out[1].requests)
    pd.testing.assert_frame_equal(out[0].passes, out[1].passes, check_exact=False, atol=1e-9)
    assert (out[0].requests.terminal_status == "completed").all()


@st.composite
def kv_cases(draw):
    n_workers = draw(st.integers(1, 3))
    blocks = draw(st.sampled_from([40, 80, 16384]))
    router = {}
    if draw(st.booleans()):
        router["kv_event_lag_ms"] = draw(st.sampled_from([0.0, 3.0, 25.0]))
    if draw(st.booleans()):
        router["router_queue_threshold"] = draw(st.sampled_from([0.0, 0.1, 0.5]))
        router["router_queue_policy"] = draw(st.sampled_from(["fcfs", "lcfs", "wspt"]))
    if draw(st.booleans()):
        router["router_temperature"] = draw(st.sampled_from([0.2, 1.0]))
    bases = [fresh_ids(30) for _ in range(2)]
    reqs = []
    for _ in range(draw(st.integers(1, 8))):
        isl = draw(st.integers(1, min(1800, blocks * BS // 2)))
        osl = draw(st.integers(1, 30))
        at = draw(st.integers(0, 40)) * 2.5
        if draw(st.booleans()):
            p = prompt(isl, draw(st.sampled_from(bases))[: -(-isl // BS)])
        else:
            p = prompt(isl)
        reqs.append((isl, osl, at, p))
    return n_workers, blocks, router, draw(st.integers(0, 3)), reqs


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kv_cases())
def test_coalescing_invariance_random_kv_runs(case):
    n_workers, blocks, router, seed, reqs = case
    eng = EngineConfig(num_gpu_blocks=blocks)
    out = [run(scenario(workers=n_workers, seed=seed, coalesce=c, engine=eng, **router), *reqs)
           for c in (True, False)]
    pd.testing.assert_frame_equal(out[0].requests, out[1].requests)
    pd.testing.assert_frame_equal(out[0].passes, out[1].passes, check_exact=False, atol=1e-9)
    r = out[0].requests
    assert (r.terminal_status == "completed").all()
    assert (r.output_length == r.requested_output_length).all()


# -- regressions ---------------------------------------------------------------------------------

def test_wspt_scores_see_events_of_passes_ended_inside_a_decode_run():
    # One worker, 40 blocks, max_num_seqs 1, threshold 0 (busy while any prefill is
    # pending).  X leaves prompt P cached; Y (P's first block, 2400 tokens out) decodes
    # for ~58 s, evicting P's blocks as it grows; B waits behind Y (busy).  Z1 (P, 2048)
    # and Z2 (fresh, 1500) queue at 57000, when only 3 of P's blocks are left:
    # 2048 - 192 = 1856 > 1500, so wspt serves Z2 first (what the per-pass run does).
    # A stale index (16 blocks: the wspt score used to skip Worker.sync) made Z1's
    # remainder 1024 and served it first in the coalesced run.
    p = fresh_ids(32)
    out = []
    for coalesce in (True, False):
        sc = scenario(workers=1, coalesce=coalesce,
                      engine=EngineConfig(num_gpu_blocks=40, max_num_seqs=1),
                      router_queue_threshold=0.0, router_queue_policy="wspt")
        out.append(by_uid(run(sc, (2048, 1, 0, prompt(2048, p)), (64, 2400, 100, prompt(64, p[:1])),
                              (1000, 5, 30000), (2048, 3, 57000, prompt(2048, p)),
                              (1500, 3, 57000))))
    per_pass = out[1]
    assert per_pass.first_admit_ms[4] < per_pass.first_admit_ms[3]      # Z2 before Z1
    coalesced = out[0]
    assert coalesced.first_admit_ms[4] < coalesced.first_admit_ms[3]
    pd.testing.assert_frame_equal(coalesced, per_pass)
