"""The order of events at one simulated instant: named phases, then worker order.

SimPy processes the events of one time by ``(priority, insertion order)``.  The
reference's replay loop handles one instant in a fixed sequence of steps, so every event
here carries an **order key**: its :class:`Phase`, and within the pass-end phase the
rank of the worker whose pass ends (workers are walked in a fixed order).  SimPy's own
events (``Timeout``, ``Event.succeed``, a process resuming) keep their meaning:
``URGENT`` falls in the pass-end phase at rank 0, ``NORMAL`` in :attr:`Phase.NORMAL`.

=====  ===============  ================================================  ==========================
phase  name             what happens then                                 reference rule (spec)
=====  ===============  ================================================  ==========================
0      PASS_END         forward passes end, in worker order (prefill       §3.1: completions first;
                        pool first, then decode / aggregated by index);    workers walked in order
                        SimPy's URGENT (a process starting) shares it
1      FAULT            a worker fails, a straggler window opens or       beyond the reference:
                        closes, a client times out (docs/faults.md)       after pass ends, before
                                                                          arrivals
2      WORKER_READY     a starting worker becomes active                  planner: ready before
                                                                          arrivals (measured)
3      TRANSFER_DONE    a KV transfer's delay is over                     §6: activation at the
                                                                          decode pass boundary
4      NORMAL           SimPy's ordinary events: arrivals, session         §3.1: then arrivals
                        releases, completions' notifications
5      DISPATCH         the driver releases every turn ready now, in       §4: (ready time, session,
                        (ready time, session, turn) order                  turn) order
6      SAMPLE           telemetry samples                                 measured: an arrival at
                                                                          the sample is waiting
7      LATE             a worker about to form a batch waits here, so      §3.1: new passes start
                        every arrival of the instant is queued first       last
8      PLANNER          planner ticks                                     measured: after batch
                                                                          formation
9      ROUTE_LAST       disaggregated: a new request is routed to a        measured: an arrival at a
                        prefill worker                                    prefill pass end waits
10     AFTER_ROUTING    an idle prefill worker woken by such a request     measured (same case)
                        forms its batch
=====  ===============  ================================================  ==========================

Only SimPy's documented extension points are used: :class:`PhasedEnvironment`
overrides ``Environment.schedule``, ``peek`` and ``step`` over an agenda of its own,
turning SimPy's two priorities into order keys, and :class:`At` is a ``Timeout``
carrying its own key and exact time.  Keys are integers
``phase << RANK_BITS | rank``; workers are ordered explicitly by :func:`worker_rank`.
"""
from __future__ import annotations

import itertools
import math
from enum import IntEnum
from heapq import heappop, heappush

import simpy
from simpy.core import BoundClass, EmptySchedule, StopSimulation
from simpy.events import NORMAL as SIMPY_NORMAL
from simpy.events import URGENT as SIMPY_URGENT


class Phase(IntEnum):
    PASS_END = 0
    FAULT = 1
    WORKER_READY = 2
    TRANSFER_DONE = 3
    NORMAL = 4
    DISPATCH = 5
    SAMPLE = 6
    LATE = 7
    PLANNER = 8
    ROUTE_LAST = 9
    AFTER_ROUTING = 10


RANK_BITS = 40
#: Decode workers of a disaggregated cluster come after every prefill worker.
DECODE_RANK_BASE = 1 << 32


def order(phase: Phase, rank: int = 0) -> int:
    """The order key of an event of ``phase`` (``rank``: the worker, in pass-end order)."""
    return (phase << RANK_BITS) | rank       # an int (IntEnum arithmetic)


def worker_rank(pool: str, idx: int) -> int:
    """Where worker ``idx`` of ``pool`` (agg | prefill | decode) comes among the pass ends
    of one instant: the prefill pool first, then the decode pool, each by index."""
    return DECODE_RANK_BASE + idx if pool == "decode" else idx


_URGENT_KEY, _NORMAL_KEY = order(Phase.PASS_END), order(Phase.NORMAL)   # SimPy's priorities


class At(simpy.Timeout):
    """A timeout processed at ``when`` (absolute simulated time, >= now) in the order of
    ``key`` (see :func:`order`)."""

    def __init__(self, env: simpy.Environment, when: float, key: int):
        self.key, self.when = key, when
        super().__init__(env, when - env.now)


class PhasedEnvironment(simpy.Environment):
    """A SimPy environment whose same-time events are ordered by order keys.

    It keeps its own agenda, a heap of ``(time, key, insertion number, event)``, through
    SimPy's documented extension points ``schedule``, ``peek`` and ``step`` (as SimPy's
    ``RealtimeEnvironment`` overrides ``step``).  An :class:`At` is queued at its exact
    absolute time with its own key: ``now + (when - now)`` can miss ``when`` in the last
    bit, and trace arrivals and coalesced pass ends must land on their times so that ties
    are ordered as in the reference.  Every other event is queued ``delay`` from now with
    the key of SimPy's priority (``URGENT`` or ``NORMAL``)."""

    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        self._agenda: list = []
        self._inserted = itertools.count()
        # SimPy binds its event factories (``timeout``, ``event``, ...) to the instance only
        # for its own class; bind them for this subclass too (a descriptor call per
        # ``env.timeout`` otherwise)
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is BoundClass:
                setattr(self, name, getattr(self, name))

    def schedule(self, event, priority=SIMPY_NORMAL, delay=0) -> None:
        if type(event) is At:
            heappush(self._agenda, (event.when, event.key, next(self._inserted), event))
        else:
            # (identity tests: hashing SimPy's priority enum would cost a Python call)
            key = (_NORMAL_KEY if priority is SIMPY_NORMAL else
                   _URGENT_KEY if priority is SIMPY_URGENT else priority)
            heappush(self._agenda, (self._now + delay, key, next(self._inserted), event))

    def peek(self) -> float:
        return self._agenda[0][0] if self._agenda else math.inf

    def next_event(self):
        """The event processed next (None if none), for diagnostics such as the
        watchdog's message."""
        return self._agenda[0][3] if self._agenda else None

    def step(self) -> None:
        """Process the next event: SimPy's ``Environment.step`` over this agenda."""
        try:
            self._now, _, _, event = heappop(self._agenda)
        except IndexError:
            raise EmptySchedule from None
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            # resume the remaining callbacks when the simulation goes on (as SimPy does)
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            heappush(self._agenda, (self._now, -1, next(self._inserted), event))
            raise
        # (read as SimPy's own step reads them: a property call per event costs ~5 %)
        if not event._ok and not hasattr(event, "_defused"):
            failure = event._value
            exc = type(failure)(*failure.args)
            exc.__cause__ = failure
            raise exc


def event_at(env: simpy.Environment, delay: float, phase: Phase, rank: int = 0) -> At:
    """An event processed ``delay`` from now, in ``phase`` (at ``rank``)."""
    return At(env, env.now + delay, order(phase, rank))


def event_at_time(env: simpy.Environment, when: float, phase: Phase = Phase.NORMAL,
                  rank: int = 0) -> At:
    """An event processed at exactly the absolute time ``when`` (>= now), in ``phase``."""
    if when < env.now:
        raise ValueError(f"time {when} is in the past (now {env.now})")
    return At(env, when, order(phase, rank))


class BatchFormation:
    """The batch formations of the current instant, shared by a cluster's workers.

    A worker coalescing decode passes must know whether, had it stepped pass by pass, it
    would already have formed its batch at this instant: that is so when a barrier later
    in order than its own pass end was passed now.  A barrier set up at a pass end is
    ordered by that worker's pass-end key; one set up by a wake-up comes after all of
    those (``inf``)."""

    __slots__ = ("at", "key")

    def __init__(self) -> None:
        self.at: float | None = None
        self.key = -math.inf

    def note(self, now: float, key: float) -> None:
        if self.at != now:
            self.at, self.key = now, key
        elif key > self.key:
            self.key = key

    def passed(self, now: float, key: float) -> bool:
        """A barrier later than ``key`` was passed at ``now``."""
        return self.at == now and self.key > key
