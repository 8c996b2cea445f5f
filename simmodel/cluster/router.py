"""Routers place each released request on a worker.

``RoundRobin`` (reference §5.1): one counter over the workers, advanced once per request
in release order; no queueing, the request goes straight to the worker's waiting queue.
"""
from __future__ import annotations

from simmodel.engine.request import EngineRequest


class RoundRobin:
    """Cycles over the *active* workers: the next active id after the last one used
    (so with a fixed pool: 0, 1, 2, 0, 1, ...).  With no active worker (all starting or
    draining) requests wait here, FIFO, until ``topology_changed``."""

    def __init__(self, workers: list):
        self.workers = workers
        self.last = -1
        self.waiting: list[EngineRequest] = []

    def route(self, req: EngineRequest) -> None:
        if self.waiting:
            self.waiting.append(req)
            return
        worker = self.next_active()
        if worker is None:
            self.waiting.append(req)
        else:
            worker.submit(req)

    def next_active(self):
        """The next active worker after the last one used (None if none is active)."""
        n = len(self.workers)
        for k in range(1, n + 1):
            w = self.workers[(self.last + k) % n]
            if w.state == "active":
                self.last = w.idx
                return w
        return None

    def topology_changed(self) -> None:
        """Workers joined: release the requests that were waiting for one."""
        while self.waiting:
            worker = self.next_active()
            if worker is None:
                return
            worker.submit(self.waiting.pop(0))


class PositionalRoundRobin(RoundRobin):
    """The disaggregated pools' round robin (measured on the reference): a counter into
    the list of *active* workers, ``i = counter mod len(active)``, then ``counter = i + 1``.
    With a fixed pool it is the same cycle; when the pool shrinks it can differ from
    ``RoundRobin`` (which resumes after the last worker id used)."""

    def __init__(self, workers: list):
        super().__init__(workers)
        self.counter = 0

    def next_active(self):
        active = [w for w in self.workers if w.state == "active"]
        if not active:
            return None
        i = self.counter % len(active)
        self.counter = i + 1
        return active[i]
