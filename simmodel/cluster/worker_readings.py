"""What observers read of a worker (the router, the planner, telemetry), current at any
instant: a coalesced decode run in flight first settles the passes that ended by now (and
the worker's subscribers hear of them).  No observer settles anything.

``WorkerReadings`` is the part of ``cluster.worker.Worker`` that answers them."""
from __future__ import annotations

from typing import NamedTuple


class WorkerView(NamedTuple):
    """A worker as an observer sees it now (see :meth:`Worker.view`)."""

    idx: int
    pool: str
    state: str                     # starting | active | draining | removed
    idle_since: float | None       # no pass from idle_since to idle_until (None: none yet)
    idle_until: float | None
    fpm_latest_ms: float           # end of the latest pass whose metrics are kept


class WorkerReadings:
    """The readings of a ``Worker`` (mixed into it; uses its scheduler, inbox and run)."""

    def view(self) -> WorkerView:
        """This worker now, for an observer (router, planner): a coalesced decode run in
        flight first settles every pass that ended by now, so the observer has heard of
        their outcomes (completions, KV events) and reads current pass metrics."""
        self._catch_up()
        return WorkerView(self.idx, self.pool, self.state, self.idle_since,
                          self.idle_until, self.fpm_latest_ms)

    def take_fpm(self) -> dict | None:
        """The metrics of the latest pass ended by now, once (None: none since the last
        call); kept only while ``collect_fpm`` is on."""
        self._catch_up()
        latest, self.fpm_latest = self.fpm_latest, None
        return latest

    def gauges(self) -> tuple[int, int, int, int, int]:
        """(KV blocks active, cached, free, running, waiting) now, for telemetry: during a
        pass, KV and running as they were when the pass was formed (before its scheduling)
        and waiting now plus the requests that pass admitted; between passes, the current
        state.  (The reference's gauges are close to this but not identical; see
        docs/model.md.)  In a coalesced decode run, the passes ended by now are settled
        first; its pass in flight has taken its blocks at its start.  Requests still in
        the inbox count as waiting."""
        self._catch_up()
        s = self.sched
        kv = s.kv
        if self._pre is not None:
            active, cached, free, running = self._pre[0]
            return active, cached, free, running, self._waiting() + self._pre[1]
        active, cached, free = kv.active_blocks, kv.inactive_blocks, kv.free
        if self._run is not None:
            bs = s.bs
            extra = sum(1 for r in s.running if r.computed % bs == 0)
            from_free = min(extra, free)
            active += extra
            free -= from_free
            cached -= extra - from_free
        return active, cached, free, len(s.running), self._waiting()

    def _waiting(self) -> int:
        """Requests waiting here: queued in the scheduler or still in the inbox."""
        return len(self.sched.waiting) + self.inbox.requests()

    def _inbound(self):
        return self.inbound().values() if self.inbound is not None else ()

