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

    needs_kv_events = False              # placement ignores the caches

    def __init__(self, workers: list, dp: int = 1):
        self.workers = workers
        self.last = -1
        self.waiting: list[EngineRequest] = []
        # attention DP: slots (worker, rank), worker by worker within a rank (measured)
        self.dp = dp
        self.slot = -1
        self.rank = 0

    # -- what a round robin does not need to hear (see routing.Router) ----------------
    def attach(self) -> None:
        pass

    def on_first_token(self, req: EngineRequest) -> None:
        pass

    def on_done(self, req: EngineRequest) -> None:
        pass

    def on_kv_events(self, worker: int, events) -> None:
        pass

    def observe_traffic(self, traffic) -> None:
        pass

    def worker_failed(self, idx: int, lost: list) -> None:
        pass                                 # (the cycle skips workers that are not active)

    def withdraw(self, req: EngineRequest) -> bool:
        """Take ``req`` back if it waits here (its client gave up)."""
        if req in self.waiting:
            self.waiting.remove(req)
            return True
        return False

    def route(self, req: EngineRequest) -> None:
        if self.waiting:
            self.waiting.append(req)
            return
        worker = self.next_active()
        if worker is None:
            self.waiting.append(req)
        else:
            req.dp_rank = self.rank
            worker.submit(req)

    def pick(self, req: EngineRequest) -> int | None:
        """The worker ``req`` would be placed on, chosen now (the cycle advances), or
        None if no worker is active; nothing is submitted."""
        w = self.next_active()
        if w is None:
            return None
        req.dp_rank = self.rank
        return w.idx

    def next_active(self):
        """The next active worker after the last one used (None if none is active); with
        attention DP the next active (worker, rank) slot, the rank left in ``self.rank``."""
        if self.dp > 1:
            return self._next_slot()
        n = len(self.workers)
        for k in range(1, n + 1):
            w = self.workers[(self.last + k) % n]
            if w.state == "active":
                self.last = w.idx
                return w
        return None

    def queued(self) -> int:
        """Requests held here (no active worker yet)."""
        return len(self.waiting)

    def _next_slot(self):
        n = len(self.workers)
        total = n * self.dp
        for k in range(1, total + 1):
            s = (self.slot + k) % total
            w = self.workers[s % n]
            if w.state == "active":
                self.slot, self.rank = s, s // n
                return w
        return None

    def topology_changed(self) -> None:
        """Workers joined: release the requests that were waiting for one."""
        while self.waiting:
            worker = self.next_active()
            if worker is None:
                return
            req = self.waiting.pop(0)
            req.dp_rank = self.rank
            worker.submit(req)


class PositionalRoundRobin(RoundRobin):
    """The disaggregated pools' round robin (measured on the reference): a counter into
    the list of *active* workers, ``i = counter mod len(active)``, then ``counter = i + 1``.
    With a fixed pool it is the same cycle; when the pool shrinks it can differ from
    ``RoundRobin`` (which resumes after the last worker id used).  With attention DP the
    list is of the active workers' (worker, rank) slots, rank by rank within a worker
    (measured: unlike ``RoundRobin``'s order); the rank is left in ``self.rank``."""

    def __init__(self, workers: list, dp: int = 1):
        super().__init__(workers, dp)
        self.counter = 0

    def next_active(self):
        active = [w for w in self.workers if w.state == "active"]
        if not active:
            return None
        i = self.counter % (len(active) * self.dp)
        self.counter = i + 1
        w, self.rank = divmod(i, self.dp)
        return active[w]
