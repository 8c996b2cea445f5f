"""The run loop of a built cluster: run to completion or to a cut-off (``run_until``), in
slices with progress reports (``run_with_progress``), under a last-resort ``Watchdog``.
``simmodel.sim.run`` drives it (and re-exports these names)."""
from __future__ import annotations

import math
import time

import simpy
from simpy.core import EmptySchedule, StopSimulation

from simmodel.cluster.phases import PhasedEnvironment
from simmodel.errors import UserError


def cut_short(env, scenario) -> bool:
    """Whether ``max_sim_time_ms`` ended the run with events still due."""
    cut = scenario.run.max_sim_time_ms
    return cut is not None and env.peek() != math.inf


#: Watchdog (docs/model.md): a window of events with no request released or ended, no pass
#: completed and time still or at > MAX_EVENTS_PER_SIM_S events per simulated s stops a run.
WATCHDOG_EVENTS = 2_000_000        # the window: this many events, plus
WATCHDOG_PER_ITEM = 10             # ... this many per request and per worker
MAX_EVENTS_PER_SIM_S = 1e9


class Watchdog:
    """Last-resort guard of the run loop: ``check()`` after every ``window`` events."""

    def __init__(self, env: simpy.Environment, cluster=None, window=None):
        self.env, self.cluster = env, cluster
        n = 0 if cluster is None else (cluster.workload.num_requests + len(cluster.workers)
                                       + len(cluster.prefill_workers))
        self.window = self._left = window or WATCHDOG_EVENTS + WATCHDOG_PER_ITEM * n
        self._mark = (env.now, self._progress())

    def step(self) -> None:
        """``env.step()``, counted (for loops that step one event at a time)."""
        self.env.step()
        self._left -= 1
        if not self._left:
            self.check()

    def _progress(self) -> int:
        c = self.cluster                  # (an environment alone: only time counts)
        return 0 if c is None else (c.driver.ended + len(c.driver.requests) + sum(
            len(w.passes) for w in c.workers + c.prefill_workers))

    def check(self) -> None:
        self._left = self.window
        now, done = self.env.now, self._progress()
        (t0, done0), self._mark = self._mark, (now, done)
        if done != done0:
            return
        if now != t0 and self.window <= MAX_EVENTS_PER_SIM_S * (now - t0) / 1000.0:
            return                        # slow but moving (e.g. idle planner ticks)
        cause = (f"simulated time stood still at {now:g} ms" if now == t0 else
                 f"simulated time advanced only {now - t0:.3g} ms to {now:g} ms")
        raise UserError(f"watchdog: {self.window:,} events without a request released or "
                        f"ended or a pass completed, and {cause} ({_next_event(self.env)}): "
                        "the simulation is spinning; stopped")


def _next_event(env: simpy.Environment) -> str:
    """The next event and the process it resumes, for the watchdog's message."""
    ev = env.next_event() if isinstance(env, PhasedEnvironment) else None
    procs = [cb.__self__.name for cb in getattr(ev, "callbacks", None) or ()
             if isinstance(getattr(cb, "__self__", None), simpy.Process)]
    return (f"next: a {type(ev).__name__}" if ev is not None else "no event left") + (
        f" resuming process {procs[0]!r}" if procs else "")


def run_until(env: simpy.Environment, until: float | None,
              watchdog: Watchdog | None = None) -> None:
    """Run to completion, or up to and including every event at time ``until`` (the
    reference processes events at exactly the cut-off).  SimPy's own ``env.run`` loop,
    in windows of ``watchdog.window`` events with one check between them."""
    guard = watchdog or Watchdog(env)
    step, n = env.step, guard.window
    if until is not None:
        env.timeout(until - env.now).callbacks.append(StopSimulation.callback)
    try:
        while True:
            for _ in range(n):
                step()
            guard.check()
    except (StopSimulation, EmptySchedule):
        pass
    while until is not None and env.peek() <= until:
        guard.step()


def run_with_progress(cluster, until: float | None, progress,
                      every_s: float = 0.2, stop_when=None,
                      watchdog: Watchdog | None = None) -> bool:
    """``run_until`` in slices of simulated time, reporting between slices (``progress``
    may be None); return True if ``stop_when(request)`` ended the run early.  Stopping
    and resuming the environment does not reorder events, so results are identical."""
    env = cluster.env
    guard = watchdog or Watchdog(env, cluster)
    total = sum(len(s.turns) for s in cluster.workload.sessions)
    driver = cluster.driver
    stopped = [False]
    if stop_when is not None:
        def on_end(req) -> None:
            if not stopped[0] and stop_when(req):
                stopped[0] = True
        driver.on_end = on_end

    def report() -> None:
        if progress is not None:
            progress(env.now, driver.ended + len(driver.unreleased_cancelled), total)

    span = 100.0                              # simulated ms per slice, adapted to speed
    while env.peek() != math.inf and not stopped[0]:
        nxt = env.peek()
        if until is not None and nxt > until:
            break
        stop = nxt + span if until is None else min(nxt + span, until)
        t = time.perf_counter()
        step = guard.step
        while env.peek() <= stop and not stopped[0]:  # ``stop`` included
            step()
        took = time.perf_counter() - t
        span = span * 2.0 if took < every_s / 2 else (span / 2.0 if took > every_s * 2 else span)
        report()
    report()
    return stopped[0] and env.peek() != math.inf
