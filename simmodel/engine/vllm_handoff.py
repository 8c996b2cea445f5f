"""The disaggregated handoff on a vLLM-core scheduler's KV pool.  Pure.

The decode side reserves blocks for a prompt's KV when the request is routed to it
(reusing the leading full blocks already resident), then activates the request when the
KV has arrived: it joins the queue as a decoder whose prompt is computed.  The prefill
side holds a finished prompt's blocks as the transfer's source until the transfer ends.
``held`` counts both kinds of hold.  A mixin of ``VllmScheduler`` (engine/scheduler.py).
"""
from __future__ import annotations

from simmodel.engine.request import EngineRequest


class VllmHandoff:
    """``reserve`` / ``unreserve`` / ``activate`` / ``release_source`` on a ``VllmScheduler``."""

    def release_source(self, req: EngineRequest) -> None:
        """Prefill side: the transfer is over, free the held prompt blocks."""
        self._release(req)
        self.held -= 1

    def reserve(self, req: EngineRequest) -> int | None:
        """Decode side: hold blocks for ``req``'s whole prompt, reusing the leading full
        blocks already resident here.  Returns the number of prompt tokens that must be
        transferred in whole blocks (``destination_missing``), or None if the pool cannot
        supply the blocks yet (nothing is changed then)."""
        kv, bs = self.kv, self.bs
        plen = req.prompt_len
        hashes = req.seq.ensure(plen // bs) if self.caching else []
        full = plen // bs
        resident = kv.lookup(hashes, full) if self.caching else 0
        need = -(-plen // bs) - resident
        keys = kv.hit_keys(hashes[:resident])
        if need > kv.available - kv.count_inactive(keys):
            return None
        for k in keys:
            kv.acquire(k)
        req.cached = keys
        req.n_private = 0
        self._grow(req, plen)
        self.held += 1
        return need * bs

    def unreserve(self, req: EngineRequest) -> None:
        """Decode side: a reservation whose prompt will never come; its blocks are freed."""
        self._release(req)
        self.held -= 1

    def activate(self, req: EngineRequest) -> int:
        """Decode side: the prompt's KV has arrived; the request waits for a pass.
        Returns the slots this freed (none here)."""
        self.held -= 1
        req.transferred = True
        req.computed = req.seq_len - 1
        self.enqueue(req)
        return 0
