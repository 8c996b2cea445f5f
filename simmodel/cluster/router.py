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
        worker = self._next()
        if worker is None:
            self.waiting.append(req)
        else:
            worker.submit(req)

    def _next(self):
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
            worker = self._next()
            if worker is None:
                return
            worker.submit(self.waiting.pop(0))
