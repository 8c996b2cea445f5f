"""Shared links for KV transfers (beyond the reference, which has no contention).

With ``kv_transfer.contention: true`` every prefill worker's NIC is a link of
``bandwidth_gb_s`` (and, with ``decode_links: true``, every decode worker's NIC too).  A
transfer moves ``tokens x bytes_per_token`` bytes over its links:

* ``policy: fair`` — processor sharing: a link's bandwidth is split equally among the
  transfers on it; a transfer crossing two links gets the smaller of its two shares.
  Rates are recomputed whenever a transfer starts or ends, so two simultaneous equal
  transfers on one link take twice as long as one alone;
* ``policy: fifo`` — a link serves one transfer at a time at full bandwidth, in request
  order; the others queue (a transfer needing two links waits for both).  Each link is a
  ``simpy.Resource`` of capacity 1 and each transfer a process holding its links.

A transfer alone on its links takes exactly the reference's uncontended time.  Each
transfer reports its queueing time (fifo: waiting for the link) and achieved bandwidth.

Event budget: fair — one pending timer for the whole network (the next completion),
re-armed on every start and end, plus one completion event per transfer; fifo — per
transfer one request event per link, one timeout, and its process's end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from simmodel.cluster.phases import Phase, event_at
from simmodel.engine.timing import duration_ns


@dataclass(eq=False, slots=True)
class Transfer:
    nbytes: float
    links: tuple
    done: simpy.Event | None
    requested_ms: float
    started_ms: float = float("nan")
    left: float = 0.0          # bytes still to move
    rate: float = 0.0          # bytes per ms


@dataclass(slots=True)
class _Link:
    bw: float                  # bytes per ms
    active: list = field(default_factory=list)


def degraded_ms(start: float, work_ms: float, windows) -> float:
    """How long a transfer needing ``work_ms`` at full bandwidth takes from ``start`` if
    the links carry only ``f`` of their bandwidth in each window ``(a, b, f)`` of
    ``windows`` (sorted, disjoint: link faults); exactly ``work_ms`` if no window meets
    it."""
    t, left = start, work_ms
    for a, b, f in windows:
        if b <= t:
            continue
        if a >= t + left:
            break                               # it ends before this window opens
        if a > t:                               # full speed until the window
            left -= a - t
            t = a
        if t + left / f <= b:                   # ends inside the window
            return t + left / f - start
        left -= (b - t) * f
        t = b
    return t + left - start if t > start else work_ms


def link_network(env: simpy.Environment, bandwidth_gb_s: float, policy: str = "fair"):
    """The links of ``kv_transfer.contention`` under ``policy`` (fair | fifo): an object
    whose ``start(nbytes, links)`` returns a :class:`Transfer` to wait on (``.done``)."""
    cls = FifoLinks if policy == "fifo" else FairShareLinks
    return cls(env, bandwidth_gb_s)


class FifoLinks:
    """``policy: fifo``: each link a ``simpy.Resource`` of capacity 1, served in request
    order; a transfer is a process that holds all its links for ``bytes / bandwidth``."""

    def __init__(self, env: simpy.Environment, bandwidth_gb_s: float):
        self.env = env
        self.bw = bandwidth_gb_s * 1e9 / 1000.0          # bytes per ms
        self.links: dict = {}                            # name -> simpy.Resource
        self.windows: list = []                          # link faults (finish_ms)

    def start(self, nbytes: float, links: tuple) -> Transfer:
        """Ask for a transfer over ``links`` (hashable names); wait on ``.done``."""
        t = Transfer(nbytes, links, None, self.env.now, left=float(nbytes))
        t.done = self.env.process(self._transfer(t))
        return t

    def _transfer(self, t: Transfer):
        held = []
        for name in t.links:        # all requested now, so the queues keep request order
            link = self.links.get(name)
            if link is None:
                link = self.links[name] = simpy.Resource(self.env, capacity=1)
            held.append((link, link.request()))
        for _link, req in held:
            yield req
        t.started_ms = self.env.now
        t.rate = self.bw
        hold = duration_ns(t.nbytes / self.bw) / 1e6
        if self.windows:
            hold = degraded_ms(self.env.now, hold, self.windows)
        yield event_at(self.env, hold, Phase.TRANSFER_DONE)
        t.left = 0.0
        for link, req in held:
            link.release(req)
        return t


class FairShareLinks:
    """``policy: fair``: processor sharing, rates recomputed at every start and end."""

    def __init__(self, env: simpy.Environment, bandwidth_gb_s: float):
        self.env = env
        self.bw = bandwidth_gb_s * 1e9 / 1000.0          # bytes per ms
        self.links: dict = {}
        self.active: list[Transfer] = []
        self._last = 0.0
        self._timer_gen = 0
        self.factor = 1.0                                # link faults (set_factor)

    def start(self, nbytes: float, links: tuple) -> Transfer:
        """Ask for a transfer over ``links`` (hashable names); wait on ``.done``."""
        t = Transfer(nbytes, links, self.env.event(), self.env.now, left=float(nbytes))
        self._advance()
        for name in links:
            self.links.setdefault(name, _Link(self.bw * self.factor))
        self._activate(t)
        self._reschedule()
        return t

    def set_factor(self, factor: float) -> None:
        """A link fault starts (``factor`` < 1) or ends (1): every link carries ``factor``
        of its bandwidth from now; the transfers in flight are re-rated."""
        self._advance()
        for link in self.links.values():
            link.bw = self.bw * factor
        self.factor = factor
        self._reschedule()

    # -- internals ----------------------------------------------------------------------
    def _activate(self, t: Transfer) -> None:
        t.started_ms = self.env.now
        self.active.append(t)
        for name in t.links:
            self.links[name].active.append(t)

    def _advance(self) -> None:
        """Move every active transfer forward to now at its current rate."""
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for t in self.active:
                t.left -= t.rate * dt
        self._last = now

    def _rates(self) -> None:
        for t in self.active:
            t.rate = min(self.links[n].bw / len(self.links[n].active) for n in t.links)

    def _reschedule(self) -> None:
        self._rates()
        if not self.active:
            return
        nxt = min(self.active, key=lambda t: t.left / t.rate)
        delay = max(0.0, nxt.left / nxt.rate)
        if len(self.active) == 1 and nxt.left == nxt.nbytes:
            # Alone from the start: exactly the uncontended (reference) duration.
            delay = duration_ns(delay) / 1e6
        self._timer_gen += 1
        gen = self._timer_gen
        ev = event_at(self.env, delay, Phase.TRANSFER_DONE)
        ev.callbacks.append(lambda _e, g=gen, t=nxt: self._fire(g, t))

    def _fire(self, gen: int, t: Transfer) -> None:
        if gen != self._timer_gen:
            return                                   # superseded by a later change
        self._advance()
        t.left = 0.0
        finished = [x for x in self.active if x.left <= 1e-6 * max(1.0, x.nbytes)]
        for x in finished:
            self.active.remove(x)
            for n in x.links:
                self.links[n].active.remove(x)
            x.done.succeed(x)
        self._reschedule()
