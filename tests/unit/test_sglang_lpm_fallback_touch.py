"""A hold that fails refreshes its prefix's LRU time, except when ``lpm`` serves a queue
too long to sort (more than 128 waiting): then nothing is refreshed.  Found by
``long_runs.py --scale small --shapes sglang_pressure --seeds 17`` (kept as fidelity case
``long_sglang_lpm_failed_admission``).  There a request's one failed hold, in a queue of
246, refreshed its 1,182-token prefix, and later decode steps evicted a request that had
just completed.  The reference trimmed the prefix to 807 tokens instead.  With ``fifo``
(``sglang_retraction``), and with a sorted ``lpm`` queue (``sglang_lpm``), failed holds
have to refresh for those cases to agree.

Hand-built on a pool of 20 slots (page size 1, reserve clip 1):

* pass 0: D (prompt 300..304, 1,000 tokens out) is admitted; it holds 5 + 1 slots;
* pass 1: A (prompt 100..109, one token out) is prefilled and completes: 10 cached;
* pass 2: B (prompt 200..203, one token out) likewise: 4 cached, newer than A;
* then free 0, evictable 14, and R (A's prompt plus 500..505, one token out) waits.

From pass 3 on, R's walk: cached prefix 10 (A's), charged 6, reserve 1, offset 0.7 (D's
one reserved token at ratio 0.7), so 7 < 14 - 0.7 passes the room check; holding A's 10
tokens leaves 4 evictable for R's 6 new slots, so the hold fails.  D's decode step then
takes one slot, evicted from the least recently used leaf:

* refreshed (fifo, or lpm with R plus 127 others, 128 waiting, sorted): A is now newer
  than B, so B loses one token per pass;
* not refreshed (lpm with R plus 128 others, 129 waiting): A is the older leaf and loses
  one token per pass.  R's next holds fail too (prefix 9 → 7 new slots against 4, …).
"""
from __future__ import annotations

import pytest

from simmodel.config import EngineConfig
from simmodel.config.engine import SglangConfig
from simmodel.engine.sglang import SglangScheduler
from simmodel.engine.timing import make_timing

from test_sglang_retraction_order import cached, request


def run(policy: str, others: int, passes: int = 7):
    """The module docstring's run; (A's, B's) cached tokens after each pass from 3 on."""
    eng = EngineConfig(backend="sglang", num_gpu_blocks=20, block_size=1,
                       sglang=SglangConfig(clip_max_new_tokens=1, schedule_policy=policy))
    sched = SglangScheduler(eng, make_timing(eng))
    kv = sched.kv
    d = request(1, range(300, 305), 1000)
    a = request(2, range(100, 110), 1)
    b = request(3, range(200, 204), 1)
    r = request(4, list(range(100, 110)) + list(range(500, 506)), 1)
    rest = [request(10 + i, range(1000 + 50 * i, 1040 + 50 * i), 1) for i in range(others)]
    arrivals = {0: [d], 1: [a], 2: [b], 3: [r] + rest}
    t, seen = 0.0, []
    for idx in range(passes):
        for q in arrivals.get(idx, ()):
            sched.enqueue(q)
        if idx == 3:
            assert (kv.free_tokens, kv.evictable) == (0, 14)
        plan = sched.schedule(t)
        if idx >= 3:
            assert [e[0].uid for e in plan.entries] == [1]          # only D decodes
            seen.append((cached(kv, range(100, 110), 2, 0), cached(kv, range(200, 204), 3, 0)))
        sched.settle(plan, t + plan.duration_ms, idx, True)
        t += plan.duration_ms
    assert sched.waiting[0] is r and r.admissions == 0
    return seen


REFRESHED = [(10, 3), (10, 2), (10, 1), (10, 0)]
NOT_REFRESHED = [(9, 4), (8, 4), (7, 4), (6, 4)]


@pytest.mark.parametrize("policy,others", [("fifo", 0), ("fifo", 128), ("lpm", 0),
                                           ("lpm", 127)])
def test_a_failed_hold_refreshes_its_prefix(policy, others):
    assert run(policy, others) == REFRESHED


def test_lpm_with_a_queue_too_long_to_sort_refreshes_nothing():
    assert run("lpm", 128) == NOT_REFRESHED
