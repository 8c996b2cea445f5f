"""Disaggregated prefill/decode (reference §6): hand-computed micro-scenarios, the
components of TTFT one by one, lifecycle columns, per-pool worker-seconds, a decode pool
too small for two prompts, and hypothesis invariants.

Workloads are built in Python (``Workload`` objects, prompts of fresh 64-token blocks
unless ids are shared on purpose).  Expected times are composed from the cost model on the
reference's nanosecond grid (``prefill_poly_ms`` / ``decode_poly_ms`` through
``duration_ns`` / ``div_ns``), pass by pass; the only literal numbers are the reference's
own (§6).  Timing-sensitive cases run with decode coalescing on and off.
"""
from __future__ import annotations

import itertools
import math
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.cluster.driver import Driver
from simmodel.config import (ClusterConfig, EngineConfig, KvTransferConfig, PoolConfig,
                             RouterConfig, RunConfig, Scenario, TimingConfig,
                             WorkloadConfig)
from simmodel.engine.timing import decode_poly_ms, div_ns, duration_ns, prefill_poly_ms
from simmodel.finish import collect
from simmodel.rng import Streams
from simmodel.sim import build, run_until
from simmodel.workload.model import Prompt, Session, Turn, Workload

BS = 64
CAP = 16384 * BS               # default KV capacity in tokens (the decode denominator)
EXACT = 1e-9                   # ms; far below the 1e-6 ms grid, above float noise
REF = 1e-6                     # ms; the reference's printed precision


def P(t: int, ratio: float = 1.0) -> float:
    """Prefill pass of ``t`` new tokens, ms on the ns grid."""
    return div_ns(duration_ns(prefill_poly_ms(t)), ratio) / 1e6 if t > 0 else 0.0


def D(active: int, cap: int = CAP, ratio: float = 1.0) -> float:
    """Decode pass with ``active`` tokens in its decoders, ms on the ns grid."""
    return div_ns(duration_ns(decode_poly_ms(active, cap)), ratio) / 1e6


def X(tokens: int, bandwidth_gb_s: float, bytes_per_token: int) -> float:
    """KV transfer of ``tokens`` tokens, ms on the ns grid."""
    return duration_ns(tokens * bytes_per_token / (bandwidth_gb_s * 1e9) * 1000.0) / 1e6


def approx(x, tol=EXACT):
    return pytest.approx(x, abs=tol)


_fresh = itertools.count(10**6)


def prompt(tokens: int, ids=None) -> Prompt:
    """A prompt of fresh 64-token blocks (no sharing) unless ``ids`` are given."""
    n = -(-tokens // BS)
    ids = tuple(ids) if ids is not None else tuple(next(_fresh) for _ in range(n))
    return Prompt(ids, BS, tokens)


def workload(*reqs) -> Workload:
    """``reqs``: (input tokens, output tokens, arrival ms[, Prompt]) -> one-turn sessions."""
    sessions = []
    for i, spec in enumerate(reqs):
        isl, osl, at = spec[:3]
        p = spec[3] if len(spec) > 3 else prompt(isl)
        assert p.length == isl
        sessions.append(Session(f"r{i}", (Turn(f"r{i}", 0, p, osl, arrival_ms=float(at)),)))
    return Workload(tuple(sessions), source="test")


def scenario(prefill=1, decode=1, *, transfer=None, peng=None, deng=None, coalesce=True,
             seed=0, router="round_robin") -> Scenario:
    return Scenario(
        workload=WorkloadConfig(trace="(python)"),
        cluster=ClusterConfig(prefill=PoolConfig(prefill, peng or EngineConfig()),
                              decode=PoolConfig(decode, deng or EngineConfig()),
                              kv_transfer=transfer or KvTransferConfig(),
                              router=RouterConfig(mode=router)),
        run=RunConfig(coalesce_decode=coalesce), seed=seed)


def run(sc, *reqs):
    return simmodel.run(sc, workload=workload(*reqs))


def rows(res):
    """Request rows in release order."""
    return [r for _, r in res.requests.sort_values("uid").iterrows()]


#: 10 GB/s and 100 kB per token: 1 ms per 100 tokens (the reference's example)
BW = dict(bandwidth_gb_s=10.0, bytes_per_token=100_000)

coalescing = pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "per-pass"])


def decode_ends(start: float, first_len: int, n: int, cap: int = CAP) -> list[float]:
    """Pass ends of a lone decoder activated at ``start`` with ``first_len`` tokens."""
    ends, t = [], start
    for k in range(n):
        t = t + D(first_len + k, cap)
        ends.append(t)
    return ends


def first_end_at_or_after(ends, t):
    return next(e for e in ends if e >= t)


# -- the reference's 1P1D example ------------------------------------------------------------

@coalescing
def test_one_prefill_one_decode_reference_example(coalesce):
    # §6: isl 1000, osl 5.  Prefill 0 -> P(1000); held, reserved, activated and released
    # at that instant; TTFT = P(1000) + D(1000) (decoder of the prompt's length);
    # TTST = D(1001); E2E = P(1000) + D(1000) + ... + D(1004).
    res = run(scenario(coalesce=coalesce), (1000, 5, 0))
    (r,) = rows(res)
    p = P(1000)
    assert p == pytest.approx(32.105859, abs=REF)
    assert r.prefill_admit_ms == 0 and r.first_admit_ms == 0
    for col in ("source_held_ms", "destination_reserved_ms", "destination_activated_ms",
                "decode_admit_ms", "source_released_ms"):
        assert r[col] == approx(p), col
    assert r.transfer_ms == 0
    assert r.ttft_ms == approx(p + D(1000))
    assert r.ttft_ms == pytest.approx(37.897344, abs=REF)
    assert r.ttst_ms == approx(D(1001))
    assert r.e2e_latency_ms == approx(p + sum(D(1000 + j) for j in range(5)))
    assert r.e2e_latency_ms == pytest.approx(61.063796, abs=REF)
    assert r.output_length == 5 and r.terminal_status == "completed"
    assert r.prefill_worker_idx == 0 and r.decode_worker_idx == 0


@coalescing
def test_one_prefill_one_decode_with_transfer_delay(coalesce):
    # 1000 tokens x 100 kB / 10 GB/s = 10 ms: activation (and release) 10 ms after the
    # reservation, and every later time shifts by exactly 10 ms.
    res = run(scenario(transfer=KvTransferConfig(**BW), coalesce=coalesce), (1000, 5, 0))
    (r,) = rows(res)
    p = P(1000)
    assert r.source_held_ms == approx(p)
    assert r.destination_reserved_ms == approx(p)
    assert r.transfer_ms == approx(10.0)
    assert r.destination_activated_ms == approx(p + 10.0)
    assert r.destination_activated_ms == pytest.approx(42.105859, abs=REF)
    assert r.decode_admit_ms == approx(p + 10.0)
    assert r.source_released_ms == approx(p + 10.0)
    assert r.ttft_ms == approx(p + 10.0 + D(1000))
    assert r.ttft_ms == pytest.approx(47.897344, abs=REF)
    assert r.ttst_ms == approx(D(1001))
    assert r.e2e_latency_ms == approx(p + 10.0 + sum(D(1000 + j) for j in range(5)))


@coalescing
def test_two_prompts_in_one_prefill_pass_then_one_decode_pass(coalesce):
    # 1000 + 1001 tokens prefilled together: t = 2 * (2001 // 2) = 2000 (integer mean),
    # so the prefill pass is P(2000), not P(2001).  Both decoders join the same decode
    # pass D(1000 + 1001), which gives both first tokens; the next one D(1001 + 1002).
    res = run(scenario(coalesce=coalesce), (1000, 3, 0), (1001, 3, 0))
    a, b = rows(res)
    p = P(2000)
    for r in (a, b):
        assert r.source_held_ms == approx(p)
        assert r.decode_admit_ms == approx(p)
        assert r.ttft_ms == approx(p + D(2001))
        assert r.ttst_ms == approx(D(2003))
        assert r.e2e_latency_ms == approx(p + D(2001) + D(2003) + D(2005))
    ps = res.passes
    pre, dec = ps[ps.pool == "prefill"], ps[ps.pool == "decode"]
    assert list(pre.prefill_tokens) == [2000] and list(pre.num_prefill) == [2]
    assert list(dec.decode_tokens) == [2001, 2003, 2005]
    assert list(dec.num_decode) == [2, 2, 2]


def test_first_token_of_a_one_token_request_comes_from_the_decode_worker():
    # The prefill part's token is never reported: osl 1 still takes one decode pass.
    res = run(scenario(), (1000, 1, 0))
    (r,) = rows(res)
    assert r.output_length == 1
    assert r.first_token_ms == approx(P(1000) + D(1000))
    assert r.last_token_ms == r.first_token_ms == r.terminal_time_ms
    assert math.isnan(r.ttst_ms) and math.isnan(r.tpot_ms)
    dec = res.passes[res.passes.pool == "decode"]
    assert list(dec.decode_tokens) == [1000]


# -- KV transfer accounting ------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["destination_missing", "full_prompt"])
def test_transfer_charges_whole_missing_blocks_or_the_full_prompt(mode):
    # destination_missing: nothing resident -> 16 whole blocks = 1024 tokens = 10.24 ms.
    # A repeat after the first finished finds its 15 full prompt blocks resident on the
    # (only) decode worker: 1 block = 64 tokens = 0.64 ms.  full_prompt: 10 ms both times.
    # The repeat's prefill reuses 960 tokens on the prefill worker: P(40).
    pr = prompt(1000)
    res = run(scenario(transfer=KvTransferConfig(**BW, timing=mode)),
              (1000, 2, 0, pr), (1000, 2, 500, pr))
    a, b = rows(res)
    xa, xb = (10.24, 0.64) if mode == "destination_missing" else (10.0, 10.0)
    assert X(1024, **BW) == 10.24 and X(64, **BW) == 0.64 and X(1000, **BW) == 10.0
    assert a.transfer_ms == approx(xa) and b.transfer_ms == approx(xb)
    assert a.terminal_time_ms < 500
    assert a.ttft_ms == approx(P(1000) + xa + D(1000))
    assert b.reused_input_tokens == 960
    assert b.source_held_ms == approx(500 + P(40))
    assert b.destination_activated_ms - b.destination_reserved_ms == approx(xb)
    assert b.ttft_ms == approx(P(40) + xb + D(1000))


def test_transfer_delay_is_zero_unless_both_sizes_are_set():
    for t in (KvTransferConfig(bandwidth_gb_s=10.0), KvTransferConfig(bytes_per_token=100_000)):
        (r,) = rows(run(scenario(transfer=t), (1000, 2, 0)))
        assert r.transfer_ms == 0
        assert r.ttft_ms == approx(P(1000) + D(1000))


# -- handoff steps land on pass boundaries ---------------------------------------------------

@coalescing
def test_reservation_and_activation_wait_for_the_decode_pass_in_flight(coalesce):
    # A (1000 tokens, long output) is activated at P(1000) + 10 and decodes alone.
    # B (300 tokens, on the second prefill worker) is held at 40 + P(300), in the middle
    # of one of A's passes: reserved at that pass's end; its 3 ms transfer ends in the
    # middle of the next pass: activated at that one's end; first token one pass later,
    # D(A's length + 300).  B's source is released at its activation (p1 is idle).
    sc = scenario(prefill=2, transfer=KvTransferConfig(**BW), coalesce=coalesce)
    res = run(sc, (1000, 40, 0), (300, 3, 40))
    a, b = rows(res)
    act_a = P(1000) + 10.0
    ends = decode_ends(act_a, 1000, 40)
    held = 40 + P(300)
    reserved = first_end_at_or_after(ends, held)
    activated = first_end_at_or_after(ends, reserved + X(300, **BW))
    # the case is built so that both steps really wait for a pass end
    assert held < reserved and reserved + 3.0 < activated
    assert b.prefill_worker_idx == 1
    assert b.source_held_ms == approx(held)
    assert b.destination_reserved_ms == approx(reserved)
    assert b.transfer_ms == approx(3.0)
    assert b.destination_activated_ms == approx(activated)
    assert b.decode_admit_ms == approx(activated)
    assert b.source_released_ms == approx(activated)
    k = ends.index(activated) + 1                 # A's pass in which B first decodes
    assert b.first_token_ms == approx(activated + D(1000 + k + 300))
    assert a.first_token_ms == approx(ends[0])


@coalescing
def test_source_release_waits_for_the_prefill_pass_in_flight(coalesce):
    # A's transfer ends at P(1000) + 10 while the prefill worker runs B's 4000-token
    # pass (33 -> 33 + P(4000)): A is activated on time, its source released at that
    # pass's end; A's 16 held blocks are still counted in B's pass.
    res = run(scenario(transfer=KvTransferConfig(**BW), coalesce=coalesce),
              (1000, 5, 0), (4000, 2, 33))
    a, b = rows(res)
    assert a.destination_activated_ms == approx(P(1000) + 10.0)
    assert a.ttft_ms == approx(P(1000) + 10.0 + D(1000))
    assert b.prefill_admit_ms == 33
    assert a.source_released_ms == approx(33 + P(4000))
    pre = res.passes[res.passes.pool == "prefill"]
    assert list(pre.kv_blocks_active) == [16, 16 + 63]


# -- roles -------------------------------------------------------------------------------------

@coalescing
def test_prefill_passes_cost_prefill_only_and_decode_passes_decode_only(coalesce):
    reqs = [(1000, 6, 0), (2500, 3, 0), (300, 8, 5), (9000, 4, 20), (700, 1, 20), (64, 5, 90)]
    res = run(scenario(prefill=2, decode=2, transfer=KvTransferConfig(25.0, 131072),
                       coalesce=coalesce), *reqs)
    ps = res.passes
    dur = ps.end_ms - ps.start_ms
    pre, dec = ps.pool == "prefill", ps.pool == "decode"
    assert pre.any() and dec.any() and set(ps.pool) == {"prefill", "decode"}
    assert (ps[pre].num_decode == 0).all() and (ps[pre].decode_tokens == 0).all()
    assert (ps[dec].num_prefill == 0).all() and (ps[dec].prefill_tokens == 0).all()
    for (_, p), d in zip(ps[pre].iterrows(), dur[pre]):
        assert d == pytest.approx(P(int(p.prefill_tokens)), abs=1e-6)
    for (_, p), d in zip(ps[dec].iterrows(), dur[dec]):
        assert d == pytest.approx(D(int(p.decode_tokens)), abs=1e-6)
    # the 9000-token prompt is chunked (8192, then 808 batched with the 64-token prompt,
    # t = 2 * (9064 // 2 - 8192 // 2) = 872)
    assert {8192, 872} <= set(ps[pre].prefill_tokens)
    r = res.requests
    assert (r.output_length == r.requested_output_length).all()
    assert (r.terminal_status == "completed").all()


def test_worker_seconds_and_gpus_per_pool():
    peng = EngineConfig(tensor_parallel_size=2)
    res = run(scenario(prefill=2, decode=3, peng=peng), (1000, 5, 0), (500, 3, 10))
    s = res.summary
    end_s = res.requests.terminal_time_ms.max() / 1000.0
    assert end_s == pytest.approx(res.passes.end_ms.max() / 1000.0)
    assert s["prefill_worker_seconds"] == pytest.approx(2 * end_s)
    assert s["decode_worker_seconds"] == pytest.approx(3 * end_s)
    assert s["prefill_gpus_per_worker"] == 2 and s["decode_gpus_per_worker"] == 1
    assert s["gpu_hours"] == pytest.approx((2 * end_s * 2 + 3 * end_s * 1) / 3600)


# -- the components of TTFT, one at a time ---------------------------------------------------
# Baseline: a lone 1000-token request, TTFT = P(1000) + D(1000).  Each test adds exactly
# one component and checks TTFT moves by exactly that amount.

BASE = P(1000) + D(1000)


def test_ttft_component_prefill_queueing():
    # B arrives at 10 while A's 4000-token prefill runs: it is admitted at P(4000) and
    # decodes on the second decode worker (round robin), which is idle.
    res = run(scenario(decode=2), (4000, 2, 0), (1000, 2, 10))
    _, b = rows(res)
    queue = P(4000) - 10
    assert b.prefill_admit_ms == approx(P(4000))
    assert b.decode_worker_idx == 1
    assert b.ttft_ms == approx(BASE + queue)
    assert b.ttft_ms - (b.prefill_admit_ms - b.arrival_time_ms) == approx(BASE)


def test_ttft_component_prefill():
    # The prefill pool at speed-up 2: the prefill term alone shrinks to P(1000)/2.
    res = run(scenario(peng=EngineConfig(speedup_ratio=2.0)), (1000, 2, 0))
    (r,) = rows(res)
    assert r.source_held_ms == approx(P(1000, 2.0))
    assert r.ttft_ms == approx(BASE - (P(1000) - P(1000, 2.0)))
    assert r.ttst_ms == approx(D(1001))                   # decode pool unaffected


@pytest.mark.parametrize("gb_s", [10.0, 4.0])
def test_ttft_component_transfer(gb_s):
    res = run(scenario(transfer=KvTransferConfig(gb_s, 100_000)), (1000, 2, 0))
    (r,) = rows(res)
    x = X(1000, gb_s, 100_000)
    assert x == approx(1000 * 100_000 / (gb_s * 1e9) * 1000)
    assert r.transfer_ms == approx(x)
    assert r.ttft_ms == approx(BASE + x)


@coalescing
def test_ttft_component_decode_wait(coalesce):
    # No transfer delay.  B (1000 tokens, second prefill worker) is held mid-pass of A's
    # decode on the only decode worker: it waits for that pass's end, then its first
    # decode pass is D(A's length + 1000).  TTFT = P(1000) + wait + that pass.
    res = run(scenario(prefill=2, coalesce=coalesce), (500, 30, 0), (1000, 2, 20))
    a, b = rows(res)
    ends = decode_ends(P(500), 500, 30)
    held = 20 + P(1000)
    e = first_end_at_or_after(ends, held)
    wait = e - held
    assert wait > 0.5
    k = ends.index(e) + 1
    assert b.destination_reserved_ms == approx(e)
    assert b.decode_admit_ms == approx(e)
    assert b.ttft_ms == approx(P(1000) + wait + D(500 + k + 1000))
    # the same request alone: no wait, and its first decode pass has only itself
    (alone,) = rows(run(scenario(prefill=2, coalesce=coalesce), (1000, 2, 20)))
    assert alone.ttft_ms == approx(BASE)
    assert b.ttft_ms - alone.ttft_ms == approx(wait + D(500 + k + 1000) - D(1000))


def test_ttft_component_first_decode_pass():
    # The decode pool at decode speed-up 2: only the first decode pass term changes.
    res = run(scenario(deng=EngineConfig(decode_speedup_ratio=2.0)), (1000, 2, 0))
    (r,) = rows(res)
    assert r.decode_admit_ms == approx(P(1000))
    assert r.ttft_ms == approx(BASE - (D(1000) - D(1000, ratio=2.0)))
    assert r.ttft_ms - (r.decode_admit_ms - r.arrival_time_ms) == approx(D(1000, ratio=2.0))


def test_ttft_components_add_up():
    # All five at once on B (3000 tokens, arriving at 5): queueing behind A's prefill,
    # its own prefill at speed-up 2, a wait for A's decode pass in flight before the
    # reservation, the 30 ms transfer, a wait for the pass in flight before the
    # activation, and a first decode pass with A in it.
    sc = scenario(peng=EngineConfig(speedup_ratio=2.0), transfer=KvTransferConfig(**BW))
    res = run(sc, (2000, 60, 0), (3000, 2, 5))
    a, b = rows(res)
    pa, pb = P(2000, 2.0), P(3000, 2.0)
    act_a = pa + X(2000, **BW)
    ends = decode_ends(act_a, 2000, 60)
    queue = pa - 5
    held = pa + pb
    reserved = first_end_at_or_after(ends, held)
    x = X(3000, **BW)
    activated = first_end_at_or_after(ends, reserved + x)
    assert act_a < held < reserved and reserved + x < activated      # every wait is real
    k = ends.index(activated) + 1
    first_pass = D(2000 + k + 3000)
    assert a.destination_activated_ms == approx(act_a)
    assert b.prefill_admit_ms - b.arrival_time_ms == approx(queue)
    assert b.source_held_ms - b.prefill_admit_ms == approx(pb)
    assert b.destination_reserved_ms == approx(reserved)
    assert b.transfer_ms == approx(30.0)
    assert b.destination_activated_ms == approx(activated)
    assert b.ttft_ms == approx(queue + pb + (reserved - held) + x
                               + (activated - reserved - x) + first_pass)
    # and the decomposition into the lifecycle columns is exact
    assert b.ttft_ms == approx((b.prefill_admit_ms - b.arrival_time_ms)
                               + (b.source_held_ms - b.prefill_admit_ms)
                               + (b.decode_admit_ms - b.source_held_ms)
                               + (b.first_token_ms - b.decode_admit_ms))
    assert b.first_token_ms - b.decode_admit_ms == approx(first_pass)


# -- lifecycle order ---------------------------------------------------------------------------

LIFECYCLE = ("arrival_time_ms", "prefill_admit_ms", "source_held_ms",
             "destination_reserved_ms", "destination_activated_ms", "decode_admit_ms",
             "first_token_ms")


def check_lifecycle(req) -> None:
    for earlier, later in zip(LIFECYCLE, LIFECYCLE[1:]):
        assert req[earlier] <= req[later] + EXACT, (earlier, later, req[earlier], req[later])
    assert req.source_released_ms >= req.destination_activated_ms - EXACT
    assert req.destination_activated_ms - req.destination_reserved_ms >= req.transfer_ms - EXACT


@coalescing
def test_lifecycle_columns_are_ordered(coalesce):
    reqs = [(1000, 6, 0), (2500, 3, 0), (300, 8, 5), (3000, 4, 20), (700, 1, 20), (64, 5, 90),
            (1200, 3, 100)]
    sc = scenario(prefill=2, decode=2, transfer=KvTransferConfig(2.0, 131072),
                  deng=EngineConfig(num_gpu_blocks=80), coalesce=coalesce)
    res = run(sc, *reqs)
    r = res.requests
    assert (r.terminal_status == "completed").all()
    for _, req in r.iterrows():
        check_lifecycle(req)
    # the small decode pool made someone wait for a reservation
    assert ((r.destination_reserved_ms - r.source_held_ms) > 1.0).any()


def test_aggregated_runs_leave_the_lifecycle_columns_empty():
    sc = Scenario(workload=WorkloadConfig(trace="(python)"))
    r = simmodel.run(sc, workload=workload((1000, 2, 0))).requests.iloc[0]
    assert r.prefill_worker_idx == -1
    for col in LIFECYCLE[1:-1] + ("source_released_ms", "transfer_ms"):
        assert math.isnan(r[col]), col


# -- a decode pool too small for two prompts -------------------------------------------------

@coalescing
def test_reservations_wait_in_fifo_for_decode_capacity(coalesce):
    # Decode pool of 20 blocks (1280 tokens, also the decode polynomial's denominator):
    # a 1000-token prompt takes 16 blocks, so one request at a time.  A, B, C are
    # prefilled together (P(3000)) and all held; B is reserved when A finishes, C when B
    # finishes.  Their sources stay held on the prefill worker until then.
    cap = 20 * BS
    sc = scenario(deng=EngineConfig(num_gpu_blocks=20), coalesce=coalesce)
    res = run(sc, (1000, 5, 0), (1000, 5, 0), (1000, 5, 0))
    a, b, c = rows(res)
    span = sum(D(1000 + j, cap) for j in range(5))
    t0 = P(3000)
    t_a, t_b = t0 + span, t0 + 2 * span
    for r in (a, b, c):
        assert r.source_held_ms == approx(t0)
    assert a.destination_reserved_ms == approx(t0)
    assert a.terminal_time_ms == approx(t_a)
    assert b.destination_reserved_ms == approx(t_a)
    assert b.destination_activated_ms == approx(t_a) and b.source_released_ms == approx(t_a)
    assert b.ttft_ms == approx(t_a + D(1000, cap))
    assert b.terminal_time_ms == approx(t_b)
    assert c.destination_reserved_ms == approx(t_b)
    assert c.source_released_ms == approx(t_b)
    assert c.terminal_time_ms == approx(t0 + 3 * span)
    dec = res.passes[res.passes.pool == "decode"]
    assert dec.kv_blocks_active.max() == 16
    assert (dec.num_decode == 1).all()
    pre = res.passes[res.passes.pool == "prefill"]
    assert list(pre.kv_blocks_active) == [48]


# -- invariants ----------------------------------------------------------------------------------

@contextmanager
def counting_completions():
    """Count Driver.on_done calls per request uid (every request must end exactly once)."""
    counts: dict[int, int] = {}
    orig = Driver.on_done

    def on_done(self, req):
        counts[req.uid] = counts.get(req.uid, 0) + 1
        return orig(self, req)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Driver, "on_done", on_done)
        yield counts


@st.composite
def disagg_cases(draw):
    n_p = draw(st.integers(1, 2))
    n_d = draw(st.integers(1, 3))
    if draw(st.booleans()):
        transfer = KvTransferConfig(
            bandwidth_gb_s=draw(st.sampled_from([0.5, 2.0, 10.0, 50.0])),
            bytes_per_token=draw(st.sampled_from([10_000, 131_072, 200_000])),
            timing=draw(st.sampled_from(["full_prompt", "destination_missing"])))
    else:
        transfer = KvTransferConfig()
    # Small decode pools: room for one or a few prompts, so reservations wait.  There
    # the outputs stay within the prompt's last block (osl <= its free slots + 1): a
    # decoder that must grow while the rest of the pool is reserved deadlocks (see the
    # report on decode-side preemption); the default pool takes any output.
    d_blocks = draw(st.sampled_from([24, 40, 80, 16384]))
    bases = [prompt(1280) for _ in range(3)]            # shared-prefix sources
    reqs = []
    for _ in range(draw(st.integers(1, 7))):
        isl = draw(st.integers(1, 1200))
        slack = -(-isl // BS) * BS - isl
        osl = draw(st.integers(1, 12 if d_blocks == 16384 else slack + 1))
        at = draw(st.sampled_from([0.0, 0.0, 5.0, 30.0])) + draw(st.integers(0, 40)) * 2.5
        if draw(st.booleans()):
            base = draw(st.sampled_from(bases))
            p = Prompt(base.ids, BS, isl)                # a prefix of a shared prompt
        else:
            p = prompt(isl)
        reqs.append((isl, osl, at, p))
    sc = scenario(n_p, n_d, transfer=transfer, deng=EngineConfig(num_gpu_blocks=d_blocks),
                  coalesce=draw(st.booleans()), seed=draw(st.integers(0, 3)),
                  router=draw(st.sampled_from(["round_robin", "kv"])))
    return sc, reqs


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(disagg_cases())
def test_invariants(case):
    sc, reqs = case
    wl = workload(*reqs)
    with counting_completions() as counts:
        cluster = build(sc, Streams(sc.seed), wl)
        run_until(cluster.env, 1e7)
        res = collect(sc, cluster, 0.0)
    r = res.requests
    n = len(reqs)
    # every request released, ended once, completed, with all its tokens
    assert len(r) == n and sorted(r.uid) == list(range(n))
    assert counts == {i: 1 for i in range(n)}
    assert (r.terminal_status == "completed").all()
    assert (r.output_length == r.requested_output_length).all()
    # nothing left behind: no held source, no reservation, no live request, no pending
    for w in cluster.prefill_workers + cluster.workers:
        assert w.sched.kv.active_blocks == 0, (w.pool, w.idx)
        assert not w.sched.has_work()
    assert not any(cluster.router.pending.values())
    # KV within each pool on every pass
    limits = {"prefill": sc.cluster.prefill.engine.num_gpu_blocks,
              "decode": sc.cluster.decode.engine.num_gpu_blocks}
    ps = res.passes
    for pool, lim in limits.items():
        assert (ps[ps.pool == pool].kv_blocks_active <= lim).all(), pool
    assert (ps[ps.pool == "prefill"].num_decode == 0).all()
    assert (ps[ps.pool == "decode"].prefill_tokens == 0).all()
    t = sc.cluster.kv_transfer
    for _, q in r.iterrows():
        check_lifecycle(q)
        # TTFT covers the prefill, the transfer and at least one decode pass
        prefill = q.source_held_ms - q.prefill_admit_ms
        assert prefill > 0
        assert q.ttft_ms >= prefill + q.transfer_ms + 1.0 - EXACT
        # the transfer charges the whole prompt, or whole missing blocks (possibly none)
        if t.bandwidth_gb_s is None:
            assert q.transfer_ms == 0
        elif t.timing == "full_prompt":
            assert q.transfer_ms == approx(X(q.input_length, t.bandwidth_gb_s, t.bytes_per_token))
        else:
            blocks = -(-q.input_length // BS)
            assert any(q.transfer_ms == approx(X(k * BS, t.bandwidth_gb_s, t.bytes_per_token))
                       for k in range(blocks + 1))
        # first token at the end of the decode pass that admitted it
        dec = ps[(ps.pool == "decode") & (ps.worker == q.decode_worker_idx)]
        hit = dec[(dec.start_ms - q.decode_admit_ms).abs() < EXACT]
        assert len(hit) == 1 and hit.end_ms.iloc[0] == approx(q.first_token_ms)
        # the source is held at the end of one of its prefill worker's passes
        pre = ps[(ps.pool == "prefill") & (ps.worker == q.prefill_worker_idx)]
        assert ((pre.end_ms - q.source_held_ms).abs() < EXACT).any()


# -- regressions ---------------------------------------------------------------------------------

@coalescing
def test_prefill_waits_for_held_sources_to_be_released(coalesce):
    # Prefill pool of 20 blocks: A's 16 held blocks leave 4 during its 10 ms transfer.
    # B (16 blocks) arrives at 35, during the transfer: it waits for A's release at
    # P(1000) + 10 and is admitted then (this used to abort the run with "can never be
    # scheduled").
    sc = scenario(peng=EngineConfig(num_gpu_blocks=20), transfer=KvTransferConfig(**BW),
                  coalesce=coalesce)
    res = run(sc, (1000, 5, 0), (1000, 5, 35))
    a, b = rows(res)
    assert (res.requests.terminal_status == "completed").all()
    assert a.source_released_ms == approx(P(1000) + 10.0)
    assert b.prefill_admit_ms == approx(a.source_released_ms)
    assert b.source_held_ms == approx(P(1000) + 10.0 + P(1000))
    assert b.ttft_ms == approx(2 * P(1000) + 20.0 + D(1000) - 35)


def test_destination_first_order_reserves_at_arrival():
    # SGLang's handoff order (switch: Handoff.order): the destination is reserved when the
    # request arrives, the transfer starts when the source is held.  With idle workers and
    # no transfer delay the times are those of the source-first example: TTFT P(1000)+D(1000).
    from simmodel.rng import Streams
    from simmodel.finish import collect
    from simmodel.sim import build, run_until
    sc = scenario()
    cluster = build(sc, Streams(0), workload((1000, 5, 0.0)))
    cluster.router.order = "destination_first"
    run_until(cluster.env, None)
    r = collect(sc, cluster, 0.0).requests.iloc[0]
    p = P(1000)
    assert r.destination_reserved_ms == approx(0.0)
    assert r.source_held_ms == approx(p)
    assert r.destination_activated_ms == approx(p)
    assert r.ttft_ms == approx(p + D(1000))


# -- several reservations deferred to one busy decode worker ---------------------------------

@coalescing
def test_deferred_reservations_one_per_pass_end_plus_one_per_activation(coalesce):
    # Fixed timing: prefill passes 100 ms, decode passes 7 ms.  A (100 tokens) decodes
    # alone from its activation at 100 + X(100); six 1000-token prompts arriving at 55 are
    # prefilled together in [100, 200) and held at 200, in the middle of A's pass ending
    # at 205.524.  Rule (measured on the reference, 2..10 simultaneous handoffs): at each
    # pass end one deferred reservation is applied, plus one per destination activated at
    # that pass end.  Each transfer (X(1000) = 5.24 ms) ends inside the next pass, so:
    # 205.524: 1 reservation; 212.524: 1 activation -> 2; 219.524: 2 -> the last 3.
    fixed = EngineConfig(timing_model=TimingConfig(type="fixed", prefill_ms=100.0,
                                                   decode_ms=7.0))
    bw = dict(bandwidth_gb_s=25.0, bytes_per_token=131072)
    sc = scenario(transfer=KvTransferConfig(**bw), peng=fixed, deng=fixed, coalesce=coalesce)
    res = run(sc, (100, 300, 0), *[(1000 + 10 * i, 5, 55) for i in range(6)])
    a, *bs = rows(res)
    act_a = 100.0 + X(100, **bw)
    ends = [act_a + 7.0 * k for k in range(1, 40)]
    t1 = first_end_at_or_after(ends, 200.0)
    t2, t3 = t1 + 7.0, t1 + 14.0
    assert all(b.source_held_ms == approx(200.0) for b in bs)
    assert X(1000, **bw) < 7.0 and X(1050, **bw) < 7.0     # each transfer fits in a pass
    assert [b.destination_reserved_ms for b in bs] == [
        approx(t1), approx(t2), approx(t2), approx(t3), approx(t3), approx(t3)]
    assert [b.destination_activated_ms for b in bs] == [
        approx(t2), approx(t3), approx(t3), approx(t3 + 7.0), approx(t3 + 7.0),
        approx(t3 + 7.0)]


def test_deferred_reservations_with_instant_transfers_all_apply_at_once():
    # Same, no transfer delay: every reservation's activation is immediate, so each one
    # applied lets the next through: all six at the first pass end.
    fixed = EngineConfig(timing_model=TimingConfig(type="fixed", prefill_ms=100.0,
                                                   decode_ms=7.0))
    res = run(scenario(peng=fixed, deng=fixed), (100, 300, 0),
              *[(1000 + 10 * i, 5, 55) for i in range(6)])
    a, *bs = rows(res)
    t1 = first_end_at_or_after([100.0 + 7.0 * k for k in range(1, 40)], 200.0)
    assert [b.destination_reserved_ms for b in bs] == [approx(t1)] * 6
