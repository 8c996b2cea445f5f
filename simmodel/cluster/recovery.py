"""What becomes of requests that faults lose, and of requests whose client gives up
(docs/faults.md).

* **Lost to a failure** (``worker_failed``): the router forgets the request; after the
  backoff of its k-th retry (``retry.backoff_ms x backoff_factor^(k-1)``) it is routed
  again as a new attempt, from scratch (``EngineRequest.restart``: its prompt is
  recomputed wherever it lands); once it has had ``retry.max_attempts`` attempts it ends
  as ``failed``.
* **Client timeout** (``workload.client_timeout_ms``, per attempt from its release): the
  client cancels, as ``Driver.cancel`` does: on its worker the request leaves at the end
  of the pass in flight (now if none), ``timed_out``, unless that pass completes it; in a
  router's queue, or waiting out a backoff, it leaves at once.  With
  ``workload.client_retries`` left, the client sends it again at once (a new attempt of
  the same turn: the session waits, a closed loop's slot stays held).

Every request ends in exactly one terminal status through ``Driver.on_done``.

Event budget: one event per armed client timeout and per scheduled retry.
"""
from __future__ import annotations

from simmodel.cluster.phases import Phase, event_at


class Recovery:
    """Retries and client timeouts of one run."""

    def __init__(self, env, driver, router, retry, *, forget, timeout_ms: float | None,
                 client_retries: int):
        self.env = env
        self.driver = driver
        self.router = router
        self.forget = forget      # callable(worker, lost) -> the requests lost, each undone
        self.retry = retry
        self.timeout_ms = timeout_ms
        self.client_retries = client_retries
        self._backoff: dict[int, int] = {}       # uid -> attempt lost, while backing off
        self._timeouts: dict[int, int] = {}      # uid -> client timeouts so far

    # -- failures ----------------------------------------------------------------------------
    def worker_failed(self, worker, lost: list) -> None:
        """``worker`` failed with the requests ``lost``: retry or fail each, in order."""
        for req in self.forget(worker, lost):
            req.worker_idx = -1
            if req.attempts >= self.retry.max_attempts:
                self._end(req, "failed")
                continue
            attempt = req.attempts
            self._backoff[req.uid] = attempt
            ev = event_at(self.env, self.retry.backoff(attempt), Phase.DISPATCH)
            ev.callbacks.append(lambda _e, r=req, a=attempt: self._resend_lost(r, a))

    def _resend_lost(self, req, attempt: int) -> None:
        if self._backoff.get(req.uid) != attempt:
            return                               # its client gave up meanwhile
        del self._backoff[req.uid]
        self._resend(req)

    def _resend(self, req) -> None:
        req.restart(self.env.now)
        self.router.route(req)
        self.sent(req)

    def _end(self, req, status: str) -> None:
        req.status = status
        req.terminal_ms = self.env.now
        self.driver.on_done(req)

    def strand(self, requests: list) -> None:
        """The run ran out of events with ``requests`` still unfinished: no worker was
        left to serve them (every worker of their pool down for good).  They end as
        ``failed`` at the run's last instant."""
        for req in requests:
            if req.status == "incomplete":
                self.router.withdraw(req)        # (a handoff gives back what it holds)
                self._end(req, "failed")

    # -- client timeouts -----------------------------------------------------------------------
    def sent(self, req) -> None:
        """An attempt of ``req`` was released now: arm its client timeout."""
        if self.timeout_ms is None:
            return
        ev = event_at(self.env, self.timeout_ms, Phase.FAULT)
        ev.callbacks.append(lambda _e, a=req.attempts: self._timed_out(req, a))

    def _timed_out(self, req, attempt: int) -> None:
        if req.attempts != attempt or req.status != "incomplete":
            return                               # ended, or a later attempt runs
        if self._backoff.pop(req.uid, None) is not None:
            self._end(req, "timed_out")          # waiting out a backoff: nowhere
        else:
            self.driver.cancel(req, "timed_out")

    def takes(self, req) -> bool:
        """``Driver.on_done``: ``req`` timed out and its client sends it again now (True),
        or it ends here (False)."""
        if req.status != "timed_out":
            return False
        n = self._timeouts.get(req.uid, 0)
        if n >= self.client_retries:
            return False
        self._timeouts[req.uid] = n + 1
        self._resend(req)
        return True
