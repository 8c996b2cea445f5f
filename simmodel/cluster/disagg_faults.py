"""Failures in a disaggregated cluster: what a failed worker takes with it, and how every
other part of the lost requests' handoffs is undone (``Handoff``'s part, docs/faults.md).

A request is lost when its current attempt needs the failed worker:

* **a prefill worker**: the prompts it was prefilling or had queued, and the sources it
  held whose transfer had not delivered yet (a transfer in flight fails with its source);
* **a decode worker**: the requests decoding there, and every handoff bound to it and not
  yet activated (waiting for blocks, deferred to a pass end, reserved with its transfer in
  flight): a transfer in flight fails with its destination.

For each lost request the other side is undone on the surviving workers: at their pass
boundaries like any handoff step, a prompt still being prefilled is cancelled and a held
source is released; a reserved destination is freed at once (its blocks serve no pass,
and a new attempt of the request must start with none), and the reservations waiting for
blocks there are retried at the boundary.  The attempt's handoff record is then stale: every step still
scheduled for it (a routing, a transfer's end, an activation) sees that and does nothing.
The request itself goes to ``Recovery`` (a new attempt after the backoff, or ``failed``).

``HandoffFaults`` is a mixin of ``simmodel.cluster.disagg.Handoff``, whose ``__init__``
creates ``_held`` (per prefill worker: uid -> request whose source it holds, not yet
delivered).
"""
from __future__ import annotations

from simmodel.engine.request import DONE, EngineRequest


class HandoffFaults:
    """Losing a worker of a disaggregated cluster (module docstring)."""

    def current(self, part: EngineRequest) -> bool:
        """Whether ``part`` is the prefill of its request's current attempt."""
        rec = part.meta.handoff
        return rec is not None and rec.prefill is part and not rec.aborted

    def _stale_prefill(self, part: EngineRequest) -> None:
        """A lost attempt's prefill ended on a surviving worker (cancelled, or completed
        by the pass in flight when its cancel came): its router forgets it, and a source
        it holds is released, since nothing will transfer it."""
        self.prefill_router.on_first_token(part)
        self.prefill_router.on_done(part)
        if part.status == "prefilled":
            p = self.prefill_workers[part.worker_idx]
            p.steps.command(lambda: p.sched.release_source(part))

    def failed(self, w, lost: list) -> list:
        """Worker ``w`` failed with ``lost`` on it (prefill parts, or decoding requests):
        the logical requests lost, in order, each undone everywhere else."""
        if w.pool == "prefill":
            self.prefill_router.worker_failed(w.idx, lost)
            reqs = [p.meta for p in lost if self.current(p)]
            reqs += list(self._held.pop(w.idx, {}).values())
        else:
            self.decode_router.worker_failed(w.idx, lost)
            reqs = list(lost) + list(self._inbound.pop(w.idx, {}).values())
            self._forget_slots(w.idx)
        out = []
        for req in reqs:                   # (undoing marks it aborted: once each)
            if req.handoff is not None and not req.handoff.aborted:
                self._undo(req)
                out.append(req)
        return out

    def _forget_slots(self, idx: int) -> None:
        """Decode worker ``idx`` failed: its slots' queues and boundary state go."""
        for rank in range(self.decode_dp):
            key = (idx, rank)
            for table in (self.pending, self.deferred, self._activations):
                table.pop(key, None)
            self._unhooked.discard(key)
        self._due.pop(idx, None)

    def withdraw(self, req: EngineRequest) -> bool:
        """A client gave up on ``req``: unless it is decoding (its decode worker drops it
        at its pass end), its handoff is undone now (True)."""
        rec = req.handoff
        if rec is None or rec.aborted:
            return False
        if rec.destination_activated_ms == rec.destination_activated_ms:   # not NaN
            return False
        self._undo(req)
        return True

    def _undo(self, req: EngineRequest) -> None:
        """Undo ``req``'s current handoff on the workers still up."""
        rec = req.handoff
        rec.aborted = True
        self._undo_prefill(req, rec)
        self._undo_destination(req, rec)

    def _undo_prefill(self, req: EngineRequest, rec) -> None:
        part = rec.prefill
        p = (self.prefill_workers[part.worker_idx] if part.worker_idx >= 0 else None)
        if p is not None and p.state == "failed":
            return                                 # gone with its worker
        if part.state != DONE:
            if p is None:
                self.prefill_router.withdraw(part)     # not placed yet
            else:
                p.cancel(part)                     # its end is stale (on_prefill_done)
            return
        self._held.get(p.idx, {}).pop(req.uid, None)
        activated = rec.destination_activated_ms == rec.destination_activated_ms
        if rec.source_held_ms == rec.source_held_ms and not activated:
            # (held, and no activation will release it)

            def release():
                rec.source_released_ms = self.env.now
                p.sched.release_source(part)
            p.steps.command(release)

    def _undo_destination(self, req: EngineRequest, rec) -> None:
        if req in self._await_decode:
            self._await_decode.remove(req)
            return
        d = self.workers[req.worker_idx] if req.worker_idx >= 0 else None
        if d is None:
            return
        self._inbound[d.idx].pop(req.uid, None)
        self.decode_router.on_done(req)
        if d.state == "failed":
            return
        key = (d.idx, req.dp_rank)
        for queue in (self.pending.get(key), self.deferred.get(key)):
            if queue and req in queue:
                queue.remove(req)
                return                             # nothing reserved yet
        if rec.missing_tokens is not None:        # reserved, not activated (withdraw)
            # Freed now, not at the pass end: the blocks were held for this attempt alone
            # (no pass uses them), and a new attempt of the same request must start with
            # none; reservations waiting there are retried at the boundary, as always.
            rank = req.dp_rank
            d.sched.unreserve(req)
            d.steps.command(lambda: self._retry_pending(d, rank))
