"""A decode worker's preempted request at the head of its waiting queue (measured on the
reference, the fidelity cases ``benchmarks/scenarios/long_disagg_*.yaml``): while
reservations wait on the worker (for its blocks, or deferred to its pass end), activated
requests go in past it and it is not re-admitted; otherwise it blocks them (strict FCFS).  Hand-built on a pool of 8 blocks of
64 tokens."""
from __future__ import annotations

from simmodel.config import EngineConfig
from simmodel.engine.api import PassPlan
from simmodel.engine.request import EngineRequest
from simmodel.engine.scheduler import VllmScheduler
from simmodel.engine.timing import make_timing
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt


def request(uid: int, blocks: int) -> EngineRequest:
    ids = tuple(range(100 * uid, 100 * uid + blocks))
    return EngineRequest(uid, TokenSequence(Prompt(ids, 64, 64 * blocks), 64, uid), 50,
                         arrival_ms=0.0)


def one_pass(sched, now: float, idx: int):
    plan = sched.schedule(now)
    sched.settle(plan, now + plan.duration_ms, idx, True)
    return plan


def preempted_head_and_an_activated_request(waiting: bool):
    """R and P (3 blocks each) decode; T's reservation (2 blocks) fills the pool, so R's
    next block preempts P (LIFO); T is activated behind P."""
    eng = EngineConfig(num_gpu_blocks=8, block_size=64)
    sched = VllmScheduler(eng, make_timing(eng), role="decode")
    sched.reservations_waiting = lambda: waiting
    r, p, t = request(1, 3), request(2, 3), request(3, 2)
    for q in (r, p):
        assert sched.reserve(q) is not None
        sched.activate(q)
    one_pass(sched, 0.0, 0)                  # R and P emit their first tokens
    assert sched.reserve(t) is not None      # the pool is full: 3 + 3 + 2 blocks
    plan = one_pass(sched, 10.0, 1)          # R needs a 4th block: P is preempted
    assert plan.preempted and list(sched.waiting) == [p]
    sched.activate(t)
    return sched, r, p, t


def test_without_waiting_reservations_the_preempted_head_blocks_an_activated_request():
    sched, r, p, t = preempted_head_and_an_activated_request(waiting=False)
    plan = sched.schedule(20.0)
    assert [e[0] for e in plan.entries] == [r]
    assert list(sched.waiting) == [p, t]


def test_while_reservations_wait_activated_requests_pass_the_preempted_head():
    sched, r, p, t = preempted_head_and_an_activated_request(waiting=True)
    plan = sched.schedule(20.0)
    assert [e[0] for e in plan.entries] == [r, t]
    assert list(sched.waiting) == [p]


def mtp_decode_scheduler() -> VllmScheduler:
    """A decode worker of 8 blocks with one draft token (always rejected)."""
    eng = EngineConfig(num_gpu_blocks=8, block_size=64, aic_nextn=1,
                       aic_nextn_accept_rates=(0.0,))
    return VllmScheduler(eng, make_timing(eng), role="decode")


def test_a_start_no_room_can_be_made_for_puts_the_head_back_holding_nothing():
    # Speculative decoding's admission spares a later copy whose other copy is held
    # (engine/vllm_mtp.py, _inactive_hits), so the start may fall short and preempt
    # running requests (_make_room).  A decode worker's reservation holds cached blocks
    # while not running: if the batch empties and the blocks are still short, the head
    # goes back to the waiting queue holding nothing, and the run goes on.
    sched = mtp_decode_scheduler()
    t, w = request(1, 6), request(2, 4)
    assert sched.reserve(t) is not None      # 6 of the 8 blocks, held, not running
    held_t = list(t.cached)
    sched.waiting.append(w)
    free, active = sched.kv.free, sched.kv.active_blocks
    plan = PassPlan()
    assert sched._start(w, [], 4 * 64, plan) is False   # 4 blocks wanted, 2 to be had
    assert list(sched.waiting) == [w] and sched.running == []
    assert w.cached == [] and w.n_private == 0
    assert (sched.kv.free, sched.kv.active_blocks) == (free, active) == (2, 6)
    assert t.cached == held_t and not plan.preempted


def test_a_start_short_of_blocks_preempts_the_newest_running_request_first():
    # The same start with a running request to preempt: it is preempted (lifo) and the
    # head starts in the blocks it freed.
    sched = mtp_decode_scheduler()
    t, p, w = request(1, 4), request(2, 2), request(3, 3)
    assert sched.reserve(t) is not None and sched.reserve(p) is not None
    sched.activate(p)
    one_pass(sched, 0.0, 0)                  # P runs: 6 of the 8 blocks held
    assert sched.running == [p]
    sched.waiting.append(w)
    plan = PassPlan()
    assert sched._start(w, [], 3 * 64, plan) is True
    assert plan.preempted and sched.running == [w] and list(sched.waiting) == [p]
    assert sched.kv.available == 8 - 4 - 3     # T holds 4 blocks, W 3
