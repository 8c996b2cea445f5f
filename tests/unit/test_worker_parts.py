"""The parts a worker process is built from: its inbox (a ``simpy.Store``), the handoff
steps it owes between passes, and the arithmetic of a coalesced decode run.  Expected
values are hand-derived from each part's documented rules."""
from __future__ import annotations

import numpy as np
import simpy

from simmodel.cluster.decode_run import CoalescedRun
from simmodel.cluster.inbox import WAKE, Inbox
from simmodel.cluster.steps import BoundarySteps


def test_a_put_with_nobody_waiting_schedules_no_event_and_keeps_routing_order():
    env = simpy.Environment()
    got = []
    box = Inbox(env, got.append)
    assert isinstance(box, simpy.Store)
    box.put("a")
    box.put(WAKE)
    box.put("b")
    assert env.peek() == float("inf")          # nothing scheduled
    assert box.requests() == 2
    box.take()
    assert got == ["a", "b"] and box.items == [] and box.requests() == 0


def test_a_waiting_worker_is_woken_by_a_put_and_takes_it_once():
    env = simpy.Environment()
    got, woke = [], []
    box = Inbox(env, got.append)

    def worker():
        yield env.timeout(1)
        yield from box.wait()
        woke.append(env.now)

    def router():
        yield env.timeout(5)
        box.put("r1")
        box.take()                 # (a handoff step takes the inbox before the wake-up)
        box.put("r2")              # the get is already triggered: stays in the inbox

    env.process(worker())
    env.process(router())
    env.run()
    assert woke == [5]
    assert got == ["r1"]           # taken once, not again when the process resumed
    box.take()
    assert got == ["r1", "r2"]


def test_wake_puts_a_note_only_when_the_worker_waits():
    env = simpy.Environment()
    got = []
    box = Inbox(env, got.append)
    box.wake()
    assert box.items == []         # nobody waits: no note
    woke = []

    def worker():
        yield from box.wait()
        woke.append(env.now)

    env.process(worker())
    env.run(until=1)
    box.wake()
    env.run(until=2)
    assert woke == [1] and got == []


def test_a_wait_with_another_event_cancels_its_get_when_the_other_fires_first():
    env = simpy.Environment()
    box = Inbox(env, lambda r: None)

    def worker():
        yield from box.wait(env.timeout(3))

    env.process(worker())
    env.run()
    assert box.get_queue == []     # the pending get was withdrawn
    box.put("late")
    assert box.items == ["late"]


def test_boundary_steps_run_at_once_when_idle_else_in_their_named_order():
    log = []
    idle = [True]
    steps = BoundarySteps(lambda: idle[0], lambda: log.append("take"),
                          lambda: log.append("wake"))
    steps.command(lambda: log.append("c0"))
    assert log == ["take", "c0", "wake"]
    log.clear()
    nxt = lambda: log.append("next")                  # noqa: E731
    steps.after_next_pass(nxt)
    assert steps.pending() and not steps.due()
    promoted = steps.start_pass()                     # a pass starts: it is owed at its end
    assert promoted == [nxt] and steps.next == []
    idle[0] = False
    steps.at_boundary(lambda: log.append("hook"))
    steps.command(lambda: log.append("c1"))
    assert log == ["wake", "wake"] and steps.due()
    log.clear()
    steps.end_pass(promoted)                          # the pass ends: its commands, then
    steps.apply()                                     # the promoted step, then the hooks
    assert log == ["take", "c1", "next", "hook"] and not steps.pending()
    log.clear()
    steps.after_next_pass(lambda: log.append("idle-next"))
    steps.apply_next()                                # no pass to run: it runs now
    assert log == ["take", "idle-next"]


def test_a_coalesced_run_is_cut_after_the_passes_that_started_before_the_arrival():
    # three passes of 10, 10, 5 ms from t = 100: ends at 110, 120, 125
    run = CoalescedRun(np.array([10.0, 10.0, 5.0]), 40, 100.0, None)
    assert list(run.ends) == [110.0, 120.0, 125.0] and len(run) == 3
    assert run.ended_by(109.9) == 0 and run.ended_by(110.0) == 1
    assert run.ended_by(125.0) == 2            # the last pass is the process's
    assert run.cut_at(100.0, False) == 1       # formed at 100: its first pass stands
    assert run.cut_at(115.0, False) == 2       # pass 2 started at 110 < 115
    assert run.cut_at(110.0, False) == 1       # pass 2 starts at 110: not before it
    assert run.cut_at(110.0, True) == 2        # ... unless it was formed already
    assert run.cut_at(124.0, True) == 3
