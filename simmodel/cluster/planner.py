"""Scaling in simulated time: a planner process ticks, a policy decides, workers come
and go (reference §9).

The policy has the reference's interface, so a policy written for Dynamo runs unchanged:

* ``initial_tick_ms() -> float``: the first tick (``math.inf``: no ticks);
* ``on_tick(snapshot: dict) -> {"target_prefill", "target_decode", "next_tick_ms"}``;
  ``None`` means unchanged / no more ticks.  An aggregated cluster is one pool, the
  reference's *decode* pool: ``target_decode`` is its worker count.

Semantics: a tick runs after everything else at its timestamp (``PLANNER`` priority);
a tick due after the workload is done is dropped and not re-armed; a ``next_tick_ms``
not later than now (or ``math.inf``) is not re-armed; one less than ``MIN_TICK_MS``
after now is refused.  Scale-up appends workers with the next ids; they start
*starting* and become active after the pool's ``startup_time`` seconds (at once when
unset).  Scale-down drains the highest-id active workers: routers stop sending to them at
once, they finish their work and leave when empty.  Requests that find no active worker
of a pool wait in its router until one is ready.

Scale to zero: a pool may be drained to no worker.  A request that is about to wait in
a pool with no active or starting worker (an arrival; in a disaggregated cluster also a
prompt done while the decode pool is empty; requests still held when a tick drains the
last one) starts one worker there at that instant (cause ``request_waiting``); later
targets apply as usual.  So every request is served and every run ends.

What a user's policy says is checked: an exception, a non-dict, a target that is not a
whole non-negative number, a NaN tick time, is a one-line ``UserError`` naming the
policy, the tick and the time.  Every transition is recorded in ``Planner.lifecycle``.
Forward-pass metrics are collected only while ticks remain.

Event budget: one event per tick, one per starting worker (its ready time).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import simpy

from simmodel.cluster.phases import Phase, event_at, event_at_time
from simmodel.cluster.traffic import TrafficWindow
from simmodel.config import MAX_WORKERS, PlannerConfig
from simmodel.engine import fpm
from simmodel.errors import UserError

#: Consecutive ticks are at least this far apart (a policy asking for less is refused).
MIN_TICK_MS = PlannerConfig.MIN_INTERVAL_MS
LIFECYCLE_COLUMNS = ("at_ms", "pool", "worker", "transition", "prior_state", "state", "cause",
                     "tick_ordinal")
STATES = ("active", "starting", "draining")


@dataclass
class ScalablePool:
    """A pool the planner can resize: its worker list (ids = positions), how to start a
    new worker, its start-up delay and what to tell when its topology changes."""

    name: str                      # the reference's role name: "prefill" | "decode"
    workers: list
    make_worker: object            # callable(idx) -> started Worker
    startup_ms: float | None
    topology_changed: object       # callable() -> None
    on_added: list = field(default_factory=list)   # callables(worker): a worker was added


class _WatchedTraffic(TrafficWindow):
    """The planner's traffic window, which also tells the planner of each arrival (the
    driver feeds it just before routing the request; the planner's only arrival feed)."""

    __slots__ = ("on_arrival_hook",)

    def __init__(self, hook):
        super().__init__()
        self.on_arrival_hook = hook

    def on_arrival(self, req) -> None:
        self.on_arrival_hook(req)
        TrafficWindow.on_arrival(self, req)


class Planner:
    def __init__(self, env: simpy.Environment, policy, *, pools: dict, driver):
        self.env = env
        self.policy = policy
        self.name = policy_name(policy)
        self.user_code = not getattr(policy, "builtin", False)
        self.pools = pools                       # "prefill" / "decode" -> ScalablePool
        self.driver = driver
        self.traffic = _WatchedTraffic(self._on_arrival)
        self.lifecycle: list[tuple] = []
        self.ticks = 0
        self.collecting = False
        self._last_tick = 0.0
        self._last_arrival_ms = None
        # The pools a new request waits in first; a disaggregated one is routed after
        # the ticks of its instant (Phase.ROUTE_LAST), and its decode pool is needed when
        # its prompt is done (SGLang's order reserves the destination at arrival).
        self.disagg = "prefill" in pools
        first_decode = getattr(driver.router, "order", None) == "destination_first"
        self._entry = (("decode", "prefill") if first_decode else ("prefill",)) \
            if self.disagg else ("decode",)
        self._watch_prefill = self.disagg and not first_decode
        for pool in pools.values():
            for w in pool.workers:
                self._adopt(w, pool)

    def _adopt(self, w, pool: ScalablePool) -> None:
        """Hear when ``w`` empties, and, on a prefill worker, when a prompt is done
        (before the handoff looks for a decode worker)."""
        w.subscribe(on_drained=self.on_drained)
        if pool.name == "prefill" and self._watch_prefill:
            w.subscribe(on_done=self._on_prefilled, first=True)

    def _on_prefilled(self, part) -> None:
        """A prompt is done: its decode pool must have a worker (scale-to-zero)."""
        if part.status == "prefilled":
            self._ensure_live("decode")

    # -- the process ----------------------------------------------------------------------
    def run(self):
        env = self.env
        t = self._first_tick()
        if t is None:
            return
        self._collect(True)
        try:
            while True:
                yield event_at_time(env, t, Phase.PLANNER)
                if self.driver.workload_done():
                    return                           # dropped, not re-armed
                decision = self._on_tick()
                t = self._next_tick(decision)
                self.ticks += 1
                if t is None:
                    return                           # no more ticks / would not advance
        finally:
            self._collect(False)

    def _first_tick(self) -> float | None:
        t = self._number(self._call("initial_tick_ms"), "initial_tick_ms()")
        if t == math.inf:
            return None                              # no ticks
        if t < 0:
            raise self._error(f"initial_tick_ms() returned {t!r}; the first tick must be "
                              "at 0 ms or later (math.inf: no ticks)")
        return t

    def _on_tick(self) -> dict:
        decision = self._call("on_tick", self.snapshot())
        if not isinstance(decision, Mapping):
            raise self._error(f"on_tick() returned {_short(decision)}; expected a dict "
                              "with target_prefill, target_decode, next_tick_ms ({} for "
                              "no change and no more ticks)")
        targets = [self._target(decision, key) for key in ("target_prefill", "target_decode")]
        self.apply(*targets)
        return decision

    def _next_tick(self, decision) -> float | None:
        nxt = decision.get("next_tick_ms")
        if nxt is None:
            return None
        t = self._number(nxt, "next_tick_ms")
        now = self.env.now
        if t == math.inf or t <= now:
            return None                              # no more ticks (as the reference)
        if t - now < MIN_TICK_MS - 1e-6:             # 1e-6: float noise in now + 1.0
            raise self._error(f"next_tick_ms={nxt!r} is only {t - now:g} ms after now; "
                              f"ticks must be at least {MIN_TICK_MS:g} ms apart (None: "
                              "no more ticks)")
        return t

    # -- checking what the policy says ------------------------------------------------------
    def _call(self, method: str, *args):
        if not self.user_code:
            return getattr(self.policy, method)(*args)
        try:
            return getattr(self.policy, method)(*args)
        except Exception as e:  # noqa: BLE001 - user code: one line, no traceback
            raise self._error(f"{method}() raised {type(e).__name__}: {e}") from None

    def _number(self, value, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or math.isnan(value):
            raise self._error(f"{what} is {_short(value)}; expected a number of ms")
        return float(value)

    def _target(self, decision, key: str) -> int | None:
        v = decision.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
                or (not isinstance(v, numbers.Integral) and not float(v).is_integer()):
            raise self._error(f"{key} is {_short(v)}; expected a whole number of workers "
                              "or None")
        if v < 0:
            raise self._error(f"{key} is {v!r}; a worker count cannot be negative")
        if v > MAX_WORKERS:
            raise self._error(f"{key} is {int(v):,}; more than the limit of {MAX_WORKERS:,} "
                              "workers per pool")
        return int(v)

    def _error(self, message: str) -> UserError:
        when = f"tick {self.ticks} at {self.env.now:g} ms" if self.collecting else "at start"
        return UserError(" ".join(f"planner policy {self.name}: {when}: {message}".split()))

    def _collect(self, on: bool) -> None:
        for pool in self.pools.values():
            for w in pool.workers:
                w.collect_fpm = on
                if not on:
                    w.fpm_latest = None
        self.collecting = on

    # -- snapshot -------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What the policy sees (the reference's keys)."""
        now = self.env.now
        snap = {"tick_ordinal": self.ticks, "now_ms": now}
        for name in ("prefill", "decode"):
            pool = self.pools.get(name)
            fpms = []
            for w in (pool.workers if pool else ()):
                latest, v = w.take_fpm(), w.view()
                if v.state != "active":
                    continue                     # draining workers are not reported
                beat = fpm.last_heartbeat(v.idle_since, v.idle_until, self._last_tick, now)
                if beat is not None and (latest is None or beat > v.fpm_latest_ms):
                    latest = fpm.idle(w.idx)
                if latest is not None:
                    fpms.append(latest)
            snap[f"{name}_fpm_snapshots"] = fpms
        self._last_tick = now
        for name in ("prefill", "decode"):
            pool = self.pools.get(name)
            ids = {s: [w.idx for w in pool.workers if w.state == s] if pool else []
                   for s in STATES}
            for s in STATES:
                snap[f"{s}_{name}_count"] = len(ids[s])
                snap[f"{s}_{name}_ids"] = ids[s]
            total = sum(len(v) for v in ids.values())
            snap[f"non_draining_{name}_count"] = total - len(ids["draining"])
            snap[f"total_{name}_count"] = total
        decode = self.pools.get("decode")
        snap["traffic"] = self.traffic.drain(now, decode.workers if decode else ())
        return snap

    # -- decisions ------------------------------------------------------------------------
    def apply(self, target_prefill, target_decode) -> None:
        for name, target in (("prefill", target_prefill), ("decode", target_decode)):
            if target is not None and name in self.pools:
                self.scale_to(self.pools[name], int(target))
        for name, pool in self.pools.items():     # drained to zero under waiting requests
            if not _live(pool) and self._held(name):
                self._add(pool, "request_waiting")

    # -- scale-to-zero: a waiting request starts a worker ---------------------------------
    def _on_arrival(self, req) -> None:
        self._last_arrival_ms = self.env.now
        for name in self._entry:
            self._ensure_live(name)

    def _ensure_live(self, name: str) -> None:
        """A request is about to wait in pool ``name``: start a worker there now if it
        has none active or starting (``engine.startup_time`` applies)."""
        pool = self.pools[name]
        if not _live(pool):
            self._add(pool, "request_waiting")

    def _held(self, name: str) -> int:
        """Requests waiting in pool ``name``'s routing, counting a disaggregated
        arrival of this instant, which is routed only after the tick."""
        queued = self.driver.router.queued()
        held = queued[name] if isinstance(queued, dict) else queued
        late = self.disagg and name in self._entry and self._last_arrival_ms == self.env.now
        return held + int(late)

    def scale_to(self, pool: ScalablePool, target: int) -> None:
        target = max(0, target)
        live = [w for w in pool.workers if w.state in ("active", "starting")]
        if target > len(live):
            for _ in range(target - len(live)):
                self._add(pool)
        elif target < len(live):
            # The highest-id active workers drain first (starting ones are not drained).
            active = sorted((w for w in live if w.state == "active"), key=lambda w: -w.idx)
            for w in active[: len(live) - target]:
                self._record(w, "worker_draining", "active", "draining", "planner_scale")
                w.drain()
            pool.topology_changed()

    def _add(self, pool: ScalablePool, cause: str = "planner_scale") -> None:
        idx = len(pool.workers)
        w = pool.make_worker(idx)
        w.created_ms = self.env.now
        w.idle_since = self.env.now
        self._adopt(w, pool)
        w.collect_fpm = self.collecting
        w.record_gauges = any(x.record_gauges for x in pool.workers)    # telemetry on
        pool.workers.append(w)
        for fn in pool.on_added:          # (random faults: cluster.faults)
            fn(w)
        if pool.startup_ms is None:
            self._record(w, "worker_ready", None, "active", cause)
            w.state = "active"
            pool.topology_changed()
            return
        w.state = "starting"
        self._record(w, "worker_starting", None, "starting", cause)
        ev = event_at(self.env, pool.startup_ms, Phase.WORKER_READY)
        ev.callbacks.append(lambda _e, w=w: self._ready(w, pool))

    def _ready(self, w, pool: ScalablePool) -> None:
        self._record(w, "worker_ready", "starting", "active", "worker_ready_event")
        w.state = "active"
        if w.idle_until is None:
            w.idle_since = self.env.now       # idle heartbeats count from readiness
        pool.topology_changed()

    def on_drained(self, w) -> None:
        self._record(w, "worker_removed", "draining", "removed", "drain_settlement")
        w.state = "removed"
        w.removed_ms = self.env.now

    def _record(self, w, transition, prior, state, cause) -> None:
        self.lifecycle.append((self.env.now, w.pool, w.idx, transition, prior, state, cause,
                               self.ticks if cause == "planner_scale" else None))


def _live(pool: ScalablePool) -> bool:
    """Whether ``pool`` has a worker that is or will be routable (active or starting)."""
    return any(w.state == "active" or w.state == "starting" for w in pool.workers)


def policy_name(policy) -> str:
    """How error messages name a policy: its ``policy_name`` (a scenario's spec, e.g.
    ``policies.py:make``), else ``module:Class`` of the object."""
    name = getattr(policy, "policy_name", None)
    if isinstance(name, str):
        return name
    cls = type(policy)
    return f"{cls.__module__}:{cls.__qualname__}"


def _short(value) -> str:
    text = repr(value)
    return (text if len(text) <= 60 else text[:57] + "...") + f" ({type(value).__name__})"
