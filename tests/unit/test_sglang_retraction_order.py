"""SGLang retraction of several requests in one decode step: the victims are chosen
fewest-generated first, but their computed tokens join the radix tree in *running order*,
so the one admitted earlier holds the older LRU time (found by ``long_runs.py --scale small
--shapes sglang_pressure --seeds 75,212``: a request retracted together with a later one
kept 28 more cached tokens than in the reference, whose eviction took the earlier
request's tokens first).  Hand-built on a pool of 63 slots (page size 1, reserve clip 1 so
admissions overcommit).

Six requests run before pass 9: S (prompt 1000..1019), T, U, V (4-token prompts), then P
(prompt 1000..1009, S's first 10 tokens) and Q (1000..1007), admitted in that order, with
6, 6, 6, 6, 4 and 2 tokens generated.  One slot is free and nothing is evictable, so the
step (6 slots) retracts Q (fewest generated), then P.  Their generated tokens become two
leaves under S's held prompt: P's 4 (its KV covers its 4 generated tokens), Q's 2.  The
four survivors' step then takes 4 slots: the free one and 3 evicted from the older leaf.
In running order P's leaf is the older: it keeps 1 token, Q's keeps both.  (Cached in the
order chosen, Q's would go first: Q's leaf gone, P's left with 3.)
"""
from __future__ import annotations

from simmodel.config import EngineConfig
from simmodel.config.engine import SglangConfig
from simmodel.engine.request import EngineRequest
from simmodel.engine.sglang import SglangScheduler
from simmodel.engine.timing import make_timing
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt


def request(uid: int, ids, out: int) -> EngineRequest:
    ids = tuple(ids)
    return EngineRequest(uid, TokenSequence(Prompt(ids, 1, len(ids)), 1, uid), out,
                         arrival_ms=0.0)


def cached(kv, prompt, uid: int, generated: int) -> int:
    """Cached prefix of ``uid``'s sequence: its prompt, then its generated tokens (unique
    to it: the radix cache's segment ``(-1 - uid, 0, n)``)."""
    segs = [(t, -1, 1) for t in prompt] + [(-1 - uid, 0, generated)]
    return kv.match(segs, len(prompt) + generated)[0]


def retract_two():
    eng = EngineConfig(backend="sglang", num_gpu_blocks=63, block_size=1,
                       sglang=SglangConfig(clip_max_new_tokens=1))
    sched = SglangScheduler(eng, make_timing(eng))
    s = request(1, range(1000, 1020), 30)
    rest = [request(uid, range(base, base + 4), 30) for uid, base in
            ((2, 4000), (5, 5000), (6, 6000))]
    p = request(3, range(1000, 1010), 30)
    q = request(4, range(1000, 1008), 30)
    arrivals = {0: [s] + rest, 3: [p], 6: [q]}
    t = 0.0
    plans = []
    for idx in range(9):
        for r in arrivals.get(idx, ()):
            sched.enqueue(r)
        plan = sched.schedule(t)
        sched.settle(plan, t + plan.duration_ms, idx, True)
        t += plan.duration_ms
        plans.append(plan)
    return sched, plans, p, q


def test_two_victims_fewest_generated_first():
    sched, plans, p, q = retract_two()
    assert not any(pl.preempted for pl in plans[:-1]) and plans[-1].preempted
    assert [r.uid for r in sched.waiting] == [4, 3]            # Q chosen, then P
    assert [(r.uid, r.generated) for r in sched.running] == [(1, 7), (2, 7), (5, 7), (6, 7)]
    assert (sched.kv.free_tokens, sched.kv.evictable) == (0, 3)


def test_victims_are_cached_in_running_order():
    sched, _, p, q = retract_two()
    kv = sched.kv
    assert cached(kv, range(1000, 1010), 3, 4) == 11            # P: prompt + 1 of 4
    assert cached(kv, range(1000, 1008), 4, 2) == 10            # Q: prompt + both
