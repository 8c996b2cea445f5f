"""Reservations at a disaggregated decode worker's pass boundaries (``Handoff``'s part).

A reservation that reaches a busy decode worker is deferred to its pass end, and one
that cannot get its blocks waits in a FIFO until blocks are freed; both are kept per
decode *slot*, ``(worker idx, DP rank)`` (measured: each rank of an attention-DP worker
keeps its own queues and budget, and the ranks owed at one boundary are settled in rank
order).  ``BoundaryReservations`` is a mixin of ``simmodel.cluster.disagg.Handoff``,
whose ``__init__`` creates the state used here (``pending``, ``deferred``,
``_activations``, ``_unhooked``, ``_due``, ``decode_dp``).
"""
from __future__ import annotations


class BoundaryReservations:
    """Deferred and waiting reservations of the decode slots (module docstring)."""

    def _boundary(self, d, rank: int, budget: int | None = None) -> None:
        """Reservations that reached a busy decode worker's rank ``rank``, at the
        worker's pass end, each rank with a budget of its own (after the
        activations of that boundary).  Measured on the reference: one is applied, plus
        one more for every destination activated at this boundary and for every applied
        reservation whose transfer takes no time; the rest wait for the next pass end
        (so 1, 2, 3, ... per boundary while each transfer fits in a pass).

        Destination first (SGLang), measured: the reference tries one reservation per
        call into the decode worker (a pass end, an activation, a reservation), so when
        the worker goes idle with reservations still queued they wait for its next
        activation or reservation (``_call``), not for the first idle moment."""
        key = (d.idx, rank)
        queue = self.deferred[key]
        if budget is None:
            t, acts = self._activations.get(key, (None, 0))
            budget = 1 + (acts if t == self.env.now else 0)
        while queue and budget > 0:
            delay = self._reserve_or_wait(d, queue.popleft())
            budget -= 1
            if delay == 0.0:
                budget += 1                   # its activation happens at once
        if queue:
            if self.order == "destination_first" and not d.has_work():
                self._unhooked.add(key)       # no pass to come: wait for a call
            else:
                d.steps.after_next_pass(self._step(d, rank))

    def _step(self, d, rank: int):
        """The boundary step settling ``d``'s rank ``rank`` (``_boundary``).  Attention
        DP, measured: the ranks owed at one boundary are settled in rank order, whatever
        order they were owed in."""
        if self.decode_dp == 1:
            return lambda: self._boundary(d, rank)

        def step():
            if not d.steps.applying:
                self._boundary(d, rank)        # run at once (the worker is idle)
                return
            due = self._due[d.idx]
            due.add(rank)
            if len(due) == 1:                  # after the boundary's other steps
                d.steps.at_this_boundary(lambda: self._settle_due(d))
        return step

    def _settle_due(self, d) -> None:
        for rank in sorted(self._due.pop(d.idx)):
            self._boundary(d, rank)

    def _call(self, d, rank: int) -> None:
        """Destination first: a call into idle decode worker ``d`` (an activation or a
        reservation) tries one reservation queued for rank ``rank``."""
        self._unhooked.discard((d.idx, rank))
        self._boundary(d, rank, 1)


    def _retry_pending(self, d, rank: int) -> None:
        """Blocks were freed on ``d``'s rank ``rank``: reservations waiting there go on,
        in order.

        Measured, both orders: the waiting reservations rejoin the head of the worker's
        deferred queue and are applied at the budget of the boundary being settled
        (``_boundary``: one, plus one per destination activated there and per transfer
        that takes no time), the rest at the following pass ends -- not all at once
        (vLLM: two waiting reservations that both fit when a request ends are reserved
        one pass end apart when their transfers take time; ``long_disagg_pending``)."""
        key = (d.idx, rank)
        if not self.pending.get(key):
            return
        hooked = bool(self.deferred[key]) and key not in self._unhooked
        self._unblock(d, rank)
        if hooked:
            return
        self._unhooked.discard(key)
        d.steps.at_this_boundary(self._step(d, rank))

    def _unblock(self, d, rank: int) -> None:
        """Reservations that waited for blocks on ``d``'s rank ``rank`` rejoin the head
        of its deferred queue (the caller sees that it gets a ``_boundary``)."""
        key = (d.idx, rank)
        queue = self.pending.get(key)
        if queue:
            deferred = self.deferred[key]
            if not deferred:
                self._unhooked.add(key)
            deferred.extendleft(reversed(queue))
            queue.clear()
