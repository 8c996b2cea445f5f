"""Event priorities that reproduce the reference's ordering of same-time events (§3.1).

At one timestamp the reference handles pass completions first, then arrivals (router
placement + engine enqueue), and only then starts new passes.  SimPy orders events at
equal times by (priority, insertion order), so:

* a pass end is scheduled ``URGENT`` (before anything else at that time);
* arrivals, session releases and completions' notifications are ordinary events;
* the driver releases every turn that became ready at that instant in one ``DISPATCH``
  event, in the reference's order (ready time, session index, turn index);
* a worker that is about to form a batch first waits on a ``LATE`` zero-delay event, so
  every arrival at the current time (including ones caused by completions at this very
  instant) is in its queue before the batch is formed.
"""
from __future__ import annotations

from heapq import heappush

import simpy

URGENT, NORMAL, DISPATCH, LATE = 0, 1, 2, 3
#: Workers becoming ready come after pass ends; KV transfer completions after those,
#: both before arrivals; planner ticks after everything else (even batch formation).
WORKER_READY = 0.5
TRANSFER_DONE = 0.9
PLANNER = 4
#: Telemetry samples: after pass ends and arrivals, before batches form (measured on the
#: reference's telemetry: a request arriving at the sample instant is still waiting).
SAMPLE = 2.5
#: Disaggregated clusters route a new request to a prefill worker only after everything
#: else at its instant, batch formation and planner ticks included (measured on the
#: reference: a request arriving exactly when a prefill pass ends waits for the next one).
ROUTE_LAST = 5
#: ... and an idle prefill worker woken by such a request forms its batch after them all.
AFTER_ROUTING = 6


def pass_end_priority(rank: int) -> float:
    """Pass ends at one instant are handled in worker order (prefill pool first, then
    decode / aggregated workers by index), as the reference walks its workers."""
    return URGENT + rank * 1e-6


def event_at(env: simpy.Environment, delay: float, priority: int) -> simpy.Event:
    """A pre-triggered event processed ``delay`` from now with the given priority."""
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    env.schedule(ev, priority, delay)
    return ev


def event_at_time(env: simpy.Environment, when: float, priority: int = NORMAL) -> simpy.Event:
    """A pre-triggered event processed at the absolute time ``when`` (>= now).

    ``env.timeout(when - env.now)`` would land on ``now + (when - now)``, which can differ
    from ``when`` in the last bit; trace arrivals must land exactly on their timestamps so
    that ties with pass ends are ordered as in the reference.
    """
    if when < env.now:
        raise ValueError(f"time {when} is in the past (now {env.now})")
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = None
    heappush(env._queue, (when, priority, next(env._eid), ev))
    return ev
