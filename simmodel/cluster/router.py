"""Routers place each released request on a worker.

``RoundRobin`` (reference §5.1): one counter over the workers, advanced once per request
in release order; no queueing, the request goes straight to the worker's waiting queue.
"""
from __future__ import annotations

from simmodel.engine.request import EngineRequest


class RoundRobin:
    def __init__(self, workers: list):
        self.workers = workers
        self.next = 0

    def route(self, req: EngineRequest) -> None:
        worker = self.workers[self.next]
        self.next = (self.next + 1) % len(self.workers)
        worker.submit(req)
