"""An SGLang decode worker's retracted request while reservations wait for the worker
(measured on the reference, the fidelity case
``benchmarks/scenarios/long_disagg_sglang_retract.yaml``): it is not re-admitted while
reservations wait and requests run; otherwise it is, as soon as it fits.  Hand-built on a
pool of 26 slots (page size 1)."""
from __future__ import annotations

from simmodel.config import EngineConfig
from simmodel.engine.request import EngineRequest
from simmodel.engine.sglang import SglangScheduler
from simmodel.engine.timing import make_timing
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt


def request(uid: int, tokens: int, out: int) -> EngineRequest:
    ids = tuple(range(100 * uid, 100 * uid + tokens))
    return EngineRequest(uid, TokenSequence(Prompt(ids, 1, tokens), 1, uid), out,
                         arrival_ms=0.0)


def one_pass(sched, now: float, idx: int):
    plan = sched.schedule(now)
    sched.settle(plan, now + plan.duration_ms, idx, True)
    return plan


def retracted_while(waiting: bool, early=None, slots: int = 26):
    """R (10 tokens), P (10, two outputs) and Q (3) hold 23 slots; their first decode step
    fills the pool (26), so the second retracts R (fewest generated, first in running
    order) and P completes, freeing its 11 slots (cached)."""
    eng = EngineConfig(backend="sglang", num_gpu_blocks=slots, block_size=1)
    sched = SglangScheduler(eng, make_timing(eng), role="decode")
    sched.reservations_waiting = lambda: waiting
    r, p, q = request(1, 10, 10), request(2, 10, 2), request(3, 3, 10)
    for one in (r, p, q):
        assert sched.reserve(one) is not None
        sched.activate(one)
    if early is not None:                       # reserved now, its prompt arrives later
        assert sched.reserve(early) is not None
    one_pass(sched, 0.0, 0)
    plan = one_pass(sched, 40.0, 1)
    assert plan.preempted and list(sched.waiting) == [r]
    assert [x.uid for x in sched.running] == [3]
    return sched, r, q


def test_without_waiting_reservations_the_retracted_request_is_readmitted():
    sched, r, q = retracted_while(waiting=False)
    plan = sched.schedule(80.0)
    # a prefill batch of R alone (recomputing what the cache lacks); Q stalls for it
    assert [e[0] for e in plan.entries] == [r] and r.admissions == 2
    assert not sched.waiting


def test_while_reservations_wait_the_retracted_request_waits():
    sched, r, q = retracted_while(waiting=True)
    plan = sched.schedule(80.0)
    assert [e[0] for e in plan.entries] == [q]     # a decode step of Q alone
    assert list(sched.waiting) == [r]


def test_with_nothing_running_the_retracted_request_goes_in_anyway():
    sched, r, q = retracted_while(waiting=True)
    sched.running.remove(q)                       # as if Q had ended
    plan = sched.schedule(80.0)
    assert [e[0] for e in plan.entries] == [r]


def test_a_request_that_joins_during_a_prefill_pass_gets_its_first_token_from_a_pass():
    """T's prompt arrives while R's re-admission forms (a prefill pass, which T does not
    take part in: a pass is prefill or decode, never both).  T joins the running set
    without a token, so the decode steps that follow cannot be one coalesced run (a run
    emits every decoder's next token, not a first one): T's first token comes from a
    pass of its own and is recorded."""
    t = request(4, 2, 3)
    # T's 2 slots are reserved from the start, in a pool of 29 (one spare slot: R's
    # re-admission still fits once T's output reserve counts)
    sched, r, q = retracted_while(waiting=False, early=t, slots=29)
    sched.activate(t)
    plan = one_pass(sched, 80.0, 2)
    assert [e[0] for e in plan.entries] == [r]
    assert t in sched.running and t.generated == 0 and not sched.waiting
    assert sched.decode_run() is None
    plan = one_pass(sched, 90.0, 3)
    assert t in [e[0] for e in plan.entries]
    assert t.generated == 1 and t.first_token_ms == 90.0 + plan.duration_ms


def test_what_counts_as_waiting_reservations_for_each_order():
    """The handoff's answer to a decode rank, both orders: reservations waiting for
    blocks and those deferred to the rank's pass ends (the waiting ones rejoin that queue
    and go on one per pass end).  Measured: SGLang (destination first) and vLLM (source
    first, ``long_disagg_deferred_readmit``: the second of two reservations retried at a
    pass end is deferred, and the preempted head still waits behind it)."""
    import simpy

    from simmodel.cluster.disagg import Handoff
    from simmodel.config import KvTransferConfig

    def handoff(order):
        return Handoff(simpy.Environment(), [], [], KvTransferConfig(), (None, None),
                       max_model_len=None, notify_done=None, order=order)

    for order in ("source_first", "destination_first"):
        h = handoff(order)
        assert not h.reservations_waiting(0, 0)
        h.deferred[(0, 0)].append(request(5, 4, 2))
        assert h.reservations_waiting(0, 0)
        h.pending[(0, 1)].append(request(6, 4, 2))
        assert h.reservations_waiting(0, 1) and not h.reservations_waiting(1, 1)
