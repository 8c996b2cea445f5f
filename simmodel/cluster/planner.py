"""Scaling in simulated time: a planner process ticks, a policy decides, workers come
and go (reference §9).  First part: aggregated clusters with round-robin routing.

The policy has the reference's interface, so a policy written for Dynamo runs unchanged:

* ``initial_tick_ms() -> float``: the first tick (non-finite: no ticks);
* ``on_tick(snapshot: dict) -> {"target_prefill", "target_decode", "next_tick_ms"}``;
  in aggregated mode ``target_decode`` is the worker count; ``None`` means unchanged /
  no more ticks.

Semantics: a tick runs after everything else at its timestamp (``PLANNER`` priority);
a tick due after the workload is done is dropped and not re-armed; a non-increasing
``next_tick_ms`` is not re-armed.  Scale-up appends workers with the next ids; they start
*starting* and become active after ``startup_time`` seconds (at once when unset).
Scale-down drains the highest-id active workers: the router stops sending to them at once,
they finish their work and leave when empty.  Requests that find no active worker wait
in the router until one is ready.  Every transition is recorded in ``Planner.lifecycle``.

Event budget: one event per tick, one per starting worker (its ready time).
"""
from __future__ import annotations

import math

import simpy

from simmodel.cluster.clock import PLANNER, WORKER_READY, event_at, event_at_time

LIFECYCLE_COLUMNS = ("at_ms", "pool", "worker", "transition", "prior_state", "state", "cause",
                     "tick_ordinal")


class Planner:
    def __init__(self, env: simpy.Environment, policy, *, workers: list, router, driver,
                 make_worker, startup_time_s: float | None):
        self.env = env
        self.policy = policy
        self.workers = workers
        self.router = router
        self.driver = driver
        self.make_worker = make_worker          # callable(idx) -> started Worker
        self.startup_ms = None if startup_time_s is None else startup_time_s * 1000.0
        self.lifecycle: list[tuple] = []
        self.ticks = 0
        self._last_tick = 0.0

    # -- the process ----------------------------------------------------------------------
    def run(self):
        env = self.env
        t = float(self.policy.initial_tick_ms())
        while math.isfinite(t):
            if t < env.now:
                t = env.now
            yield event_at_time(env, t, PLANNER)
            if self.driver.workload_done():
                return                               # dropped, not re-armed
            decision = self.policy.on_tick(self.snapshot()) or {}
            target = decision.get("target_decode")
            if target is not None:
                self.scale_to(int(target))
            self.ticks += 1
            self._last_tick = env.now
            nxt = decision.get("next_tick_ms")
            if nxt is None or not math.isfinite(float(nxt)) or float(nxt) <= t:
                return                               # no more ticks / would not advance
            t = float(nxt)

    # -- decisions ----------------------------------------------------------------------
    def snapshot(self) -> dict:
        ids = {s: [w.idx for w in self.workers if w.state == s]
               for s in ("active", "starting", "draining")}
        now = self.env.now
        arrived = [r for r in self.driver.requests if self._last_tick < r.arrival_ms <= now
                   or (self.ticks == 0 and r.arrival_ms == 0.0)]
        traffic = {
            "duration_s": (now - self._last_tick) / 1000.0,
            "num_req": len(arrived),
            "avg_isl": (sum(r.prompt_len for r in arrived) / len(arrived)) if arrived else 0.0,
            "avg_osl": (sum(r.requested_output for r in arrived) / len(arrived)) if arrived else 0.0,
        }
        snap = {
            "tick_ordinal": self.ticks,
            "now_ms": now,
            "prefill_fpm_snapshots": [],
            "decode_fpm_snapshots": [],
            "traffic": traffic,
        }
        for pool in ("prefill", "decode"):
            mine = pool == "decode"
            for state in ("active", "starting", "draining"):
                snap[f"{state}_{pool}_count"] = len(ids[state]) if mine else 0
                snap[f"{state}_{pool}_ids"] = list(ids[state]) if mine else []
            total = sum(len(ids[s]) for s in ids) if mine else 0
            snap[f"total_{pool}_count"] = total
            snap[f"non_draining_{pool}_count"] = (total - len(ids["draining"])) if mine else 0
        return snap

    def scale_to(self, target: int) -> None:
        live = [w for w in self.workers if w.state in ("active", "starting")]
        if target > len(live):
            for _ in range(target - len(live)):
                self._add()
        elif target < len(live):
            # The highest-id active workers drain first (starting ones are not drained).
            active = sorted((w for w in live if w.state == "active"), key=lambda w: -w.idx)
            for w in active[: len(live) - target]:
                self._record(w, "worker_draining", "active", "draining", "planner_scale")
                w.state = "draining"
                w._wake()

    def _add(self) -> None:
        idx = len(self.workers)
        w = self.make_worker(idx)
        w.created_ms = self.env.now
        w.on_drained = self.on_drained
        self.workers.append(w)
        if self.startup_ms is None:
            self._record(w, "worker_starting", None, "starting", "planner_scale")
            self._ready(w)
            return
        w.state = "starting"
        self._record(w, "worker_starting", None, "starting", "planner_scale")
        ev = event_at(self.env, self.startup_ms, WORKER_READY)
        ev.callbacks.append(lambda _e, w=w: self._ready(w))

    def _ready(self, w) -> None:
        self._record(w, "worker_ready", "starting", "active", "worker_ready_event")
        w.state = "active"
        self.router.topology_changed()

    def on_drained(self, w) -> None:
        self._record(w, "worker_removed", "draining", "removed", "drain_settlement")
        w.state = "removed"
        w.removed_ms = self.env.now

    def _record(self, w, transition, prior, state, cause) -> None:
        self.lifecycle.append((self.env.now, w.pool, w.idx, transition, prior, state, cause,
                               self.ticks if cause == "planner_scale" else None))
