"""Faults in virtual time: failing and repaired workers, stragglers (docs/faults.md).

``Faults`` turns the scenario's ``faults:`` into SimPy processes, one per entry (and per
worker for ``kind: random``).  Each acts in :attr:`Phase.FAULT`, after the pass ends of
its instant (a pass ending when its worker fails completes) and before that instant's
arrivals are routed:

* **fail**: ``Worker.fail`` stops the worker's process; every request on it is lost with
  its KV, and goes to ``Recovery.worker_failed`` (retried elsewhere after the backoff, or
  ``failed``).  The routers stop placing work there at once; the KV router forgets its
  cache (``worker_failed``).  A repair (``repair_ms`` later, or an exponential time for
  ``random``) brings it back with a cold cache (a new scheduler) and a new process.
* **slow**: passes that start in the window take ``factor`` times as long; a coalesced
  decode run in flight when the window opens is cut there (its passes started before it
  keep their cost), and none is coalesced while the worker is slow.

Every transition goes to the lifecycle table (``worker_failed``, ``worker_repaired``).
No fault acts once the workload is done, so a fault scheduled after the workload ends
leaves every result as it was.

Event budget: one event per scheduled fault, repair and window end; per worker with
``random`` faults, two per failure.
"""
from __future__ import annotations

from simmodel.cluster.phases import Phase, event_at, event_at_time
from simmodel.cluster.recovery import Recovery

#: The scheduler counters a repaired worker carries over (its pass log stays too).
CARRIED = ("committed_prefill_tokens", "mtp_emissions", "mtp_tokens",
           "cache_hit_tokens", "preemptions")


class Faults:
    """The fault processes of one run."""

    def __init__(self, env, faults: tuple, pools: dict, *, rng, recovery, new_scheduler,
                 topology: dict, lifecycle: list, done, scaling: bool = False):
        self.env = env
        self.faults = tuple(f for f in faults if not f.is_noop)
        self.pools = pools                   # pool name (agg | prefill | decode) -> workers
        self.rng = rng                       # the "faults" stream
        self.recovery = recovery             # cluster.recovery.Recovery
        self.new_scheduler = new_scheduler   # callable(worker) -> a cold scheduler
        self.topology = topology             # pool name -> callable(): routers re-check
        self.lifecycle = lifecycle           # rows of LIFECYCLE_COLUMNS
        self.done = done                     # callable() -> the workload is done
        self.scaling = scaling               # a planner may add workers to a pool
        self.failures = 0
        self._for_good: set = set()          # ids of workers down with no repair to come
        self.halted = False                  # a pool is empty for good: random faults stop

    def start(self) -> None:
        for f in self.faults:
            if f.kind == "random":
                for pool in ((f.pool,) if f.pool else tuple(self.pools)):
                    for w in list(self.pools[pool]):
                        self.env.process(self._random(f, w))
            elif f.kind == "fail":
                self.env.process(self._fail_at(f))
            elif f.kind == "slow":
                self.env.process(self._slow(f))

    def adopt(self, w) -> None:
        """A planner added ``w``: it fails at random like the others."""
        for f in self.faults:
            if f.kind == "random" and (f.pool is None or f.pool == w.pool):
                self.env.process(self._random(f, w))

    # -- processes -------------------------------------------------------------------------
    def _fail_at(self, f):
        yield event_at_time(self.env, f.at_ms, Phase.FAULT)
        if self.done():
            return
        pool = self.pools[f.pool or "agg"]
        if f.worker is not None:
            chosen = [pool[f.worker]]
        else:
            up = [w for w in pool if w.state == "active"]
            k = min(f.count, len(up))
            picks = sorted(self.rng.choice(len(up), size=k, replace=False).tolist())
            chosen = [up[i] for i in picks]
        for w in chosen:
            if not self.fail(w):
                continue
            if f.repair_ms is None:
                self._down_for_good(w)
            else:
                ev = event_at(self.env, f.repair_ms, Phase.WORKER_READY)
                ev.callbacks.append(lambda _e, w=w: self.repair(w))

    def _down_for_good(self, w) -> None:
        """``w`` will not come back.  Once a pool has no worker that will (and no planner
        can add one), nothing more can be served: random faults stop, so that the run
        ends (its unfinished requests then end ``failed``, ``Recovery.strand``)."""
        self._for_good.add(id(w))
        if self.scaling:
            return
        if all(x.state == "removed" or id(x) in self._for_good for x in self.pools[w.pool]):
            self.halted = True

    def _random(self, f, w):
        env, rng = self.env, self.rng
        while True:
            yield event_at(env, float(rng.exponential(f.mtbf_s * 1000.0)), Phase.FAULT)
            # (a worker down for another fault, or gone, stops failing at random; one still
            # starting does not fail yet)
            if self.done() or self.halted or w.state in ("removed", "failed"):
                return
            if w.state == "starting":
                continue
            if not self.fail(w):
                return
            yield event_at(env, float(rng.exponential(f.mttr_s * 1000.0)), Phase.WORKER_READY)
            if self.halted or w.state != "failed":
                return
            self.repair(w)

    def _slow(self, f):
        env = self.env
        yield event_at_time(env, f.at_ms, Phase.FAULT)
        if self.done():
            return
        w = self.pools[f.pool or "agg"][f.worker]
        w.slow = f.factor
        w._wake()                    # a decode run in flight is cut now
        yield event_at(env, f.duration_ms, Phase.FAULT)
        w.slow = 1.0

    # -- transitions -----------------------------------------------------------------------
    def fail(self, w) -> bool:
        """Fail ``w`` now (False if it is down or gone already)."""
        prior = w.state
        if prior in ("failed", "removed"):
            return False
        lost = w.fail()
        self.failures += 1
        self._record(w, "worker_failed", prior, "failed")
        if prior == "draining":       # it was leaving: it does not come back
            w.state = "removed"
            w.removed_ms = self.env.now
            self._record(w, "worker_removed", "failed", "removed")
            self._down_for_good(w)
        self.recovery.worker_failed(w, lost)
        self.topology[w.pool]()
        return True

    def repair(self, w) -> None:
        """``w`` is back, with a cold cache."""
        if w.state != "failed":
            return
        new = self.new_scheduler(w)
        carry = new.ranks[0] if hasattr(new, "ranks") else new     # attention DP: rank 0
        for name in CARRIED:
            setattr(carry, name, getattr(carry, name) + getattr(w.sched, name))
        w.restart(new)
        self._record(w, "worker_repaired", "failed", "active")
        self.topology[w.pool]()

    def _record(self, w, transition: str, prior, state: str) -> None:
        self.lifecycle.append((self.env.now, w.pool, w.idx, transition, prior, state,
                               "fault", None))


def install(cluster, scenario, streams) -> None:
    """Wire ``scenario``'s faults, retries and client timeouts into a built ``cluster``
    (nothing when it has none; its processes start with the cluster's)."""
    wl = scenario.workload
    faults = tuple(f for f in scenario.faults if not f.is_noop)
    if not faults and wl.client_timeout_ms is None:
        return
    driver, router = cluster.driver, cluster.router
    disagg = bool(cluster.prefill_workers) or scenario.cluster.disaggregated
    forget = router.failed if disagg else _forget(router)
    recovery = Recovery(cluster.env, driver, router, scenario.retry, forget=forget,
                        timeout_ms=wl.client_timeout_ms, client_retries=wl.client_retries)
    driver.recovery = cluster.recovery = recovery
    if not faults:
        return
    if disagg:
        pools = {"prefill": cluster.prefill_workers, "decode": cluster.workers}
        topology = {"prefill": router.prefill_topology_changed,
                    "decode": router.decode_topology_changed}
        _link_windows(cluster.env, router, faults)
    else:
        pools = {"agg": cluster.workers}
        topology = {"agg": router.topology_changed}
    planner = cluster.planner
    cluster.faults = Faults(cluster.env, faults, pools, rng=streams["faults"],
                            recovery=recovery,
                            new_scheduler=lambda w: cluster.new_scheduler(w.pool, w.idx),
                            topology=topology, done=driver.workload_done,
                            lifecycle=planner.lifecycle if planner else cluster.lifecycle,
                            scaling=planner is not None)
    cluster.faults.start()
    if planner is not None:               # workers it adds fail at random too
        for pool in planner.pools.values():
            pool.on_added.append(cluster.faults.adopt)


def _forget(router):
    """An aggregated cluster's ``forget``: the router drops the lost requests."""
    def forget(w, lost: list) -> list:
        router.worker_failed(w.idx, lost)
        return lost
    return forget


def _link_windows(env, handoff, faults) -> None:
    """Link faults: the handoff's transfers (and FIFO links) integrate over the windows;
    processor-shared links are re-rated at each window's start and end."""
    windows = sorted((f.at_ms, f.at_ms + f.duration_ms, f.bandwidth_factor)
                     for f in faults if f.kind == "link")
    if not windows:
        return
    handoff.link_windows = windows
    net = handoff.network
    if net is None:
        return
    if hasattr(net, "set_factor"):
        for a, b, factor in windows:
            for at, value in ((a, factor), (b, 1.0)):
                ev = event_at_time(env, at, Phase.FAULT)
                ev.callbacks.append(lambda _e, v=value: net.set_factor(v))
    else:
        net.windows = windows
