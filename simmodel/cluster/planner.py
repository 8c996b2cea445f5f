"""Scaling in simulated time: a planner process ticks, a policy decides, workers come
and go (reference §9).

The policy has the reference's interface, so a policy written for Dynamo runs unchanged:

* ``initial_tick_ms() -> float``: the first tick (non-finite: no ticks);
* ``on_tick(snapshot: dict) -> {"target_prefill", "target_decode", "next_tick_ms"}``;
  ``None`` means unchanged / no more ticks.  An aggregated cluster is one pool, the
  reference's *decode* pool: ``target_decode`` is its worker count.

Semantics: a tick runs after everything else at its timestamp (``PLANNER`` priority);
a tick due after the workload is done is dropped and not re-armed; a non-increasing
``next_tick_ms`` is not re-armed.  Scale-up appends workers with the next ids; they start
*starting* and become active after the pool's ``startup_time`` seconds (at once when
unset).  Scale-down drains the highest-id active workers: routers stop sending to them at
once, they finish their work and leave when empty.  Requests that find no active worker
of a pool wait in its router until one is ready.  Every transition is recorded in
``Planner.lifecycle``.  Forward-pass metrics are collected only while ticks remain.

Event budget: one event per tick, one per starting worker (its ready time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from simmodel.cluster.clock import PLANNER, WORKER_READY, event_at, event_at_time
from simmodel.cluster.traffic import TrafficWindow
from simmodel.engine import fpm

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


class Planner:
    def __init__(self, env: simpy.Environment, policy, *, pools: dict, driver):
        self.env = env
        self.policy = policy
        self.pools = pools                       # "prefill" / "decode" -> ScalablePool
        self.driver = driver
        self.traffic = TrafficWindow()
        self.lifecycle: list[tuple] = []
        self.ticks = 0
        self.collecting = False
        self._last_tick = 0.0
        for pool in pools.values():
            for w in pool.workers:
                w.on_drained = self.on_drained

    # -- the process ----------------------------------------------------------------------
    def run(self):
        env = self.env
        t = float(self.policy.initial_tick_ms())
        if not math.isfinite(t):
            return
        self._collect(True)
        try:
            while True:
                if t < env.now:
                    t = env.now
                yield event_at_time(env, t, PLANNER)
                if self.driver.workload_done():
                    return                           # dropped, not re-armed
                decision = self.policy.on_tick(self.snapshot()) or {}
                self.apply(decision.get("target_prefill"), decision.get("target_decode"))
                self.ticks += 1
                nxt = decision.get("next_tick_ms")
                if nxt is None or not math.isfinite(float(nxt)) or float(nxt) <= env.now:
                    return                           # no more ticks / would not advance
                t = float(nxt)
        finally:
            self._collect(False)

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
        everyone = [w for p in self.pools.values() for w in p.workers]
        for w in everyone:
            w.sync(now)                          # settle coalesced passes ended by now
        snap = {"tick_ordinal": self.ticks, "now_ms": now}
        for name in ("prefill", "decode"):
            pool = self.pools.get(name)
            fpms = []
            for w in (pool.workers if pool else ()):
                latest, w.fpm_latest = w.fpm_latest, None
                if w.state != "active":
                    continue                     # draining workers are not reported
                beat = fpm.last_heartbeat(w.idle_since, w.idle_until, self._last_tick, now)
                if beat is not None and (latest is None or beat > w.fpm_latest_ms):
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
                w.state = "draining"
                w._wake()
            pool.topology_changed()

    def _add(self, pool: ScalablePool) -> None:
        idx = len(pool.workers)
        w = pool.make_worker(idx)
        w.created_ms = self.env.now
        w.idle_since = self.env.now
        w.on_drained = self.on_drained
        w.collect_fpm = self.collecting
        w.record_gauges = any(x.record_gauges for x in pool.workers)    # telemetry on
        pool.workers.append(w)
        if pool.startup_ms is None:
            self._record(w, "worker_ready", None, "active", "planner_scale")
            w.state = "active"
            pool.topology_changed()
            return
        w.state = "starting"
        self._record(w, "worker_starting", None, "starting", "planner_scale")
        ev = event_at(self.env, pool.startup_ms, WORKER_READY)
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
