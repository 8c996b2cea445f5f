"""The two worker roles of a disaggregated cluster (reference §6), as ``Worker`` classes.

Each differs from an aggregated worker only in its place among one instant's pass ends
(``pool``, see ``phases.worker_rank``), when it forms a batch after a wake-up, and, for
the decode role, the handoff's entry point ``activate``.  Their engines differ through
``engine.role.Role`` (prefill-only or decode-only pass cost, held sources).
"""
from __future__ import annotations

from simmodel.cluster.phases import Phase
from simmodel.cluster.worker import Worker
from simmodel.engine.request import EngineRequest


class PrefillWorker(Worker):
    """A disaggregated prefill worker: its passes prefill prompts (one hidden token each)
    and hold their KV until the transfer ends.  Woken from idle it forms its batch after
    the instant's requests are routed (``Phase.AFTER_ROUTING``, measured)."""

    pool = "prefill"
    wake_phase = Phase.AFTER_ROUTING


class DecodeWorker(Worker):
    """A disaggregated decode worker: it receives transferred prompts (``activate``) and
    decodes them; ``inbound`` lists the handoffs bound to it and not yet activated."""

    pool = "decode"

    def activate(self, req: EngineRequest) -> int:
        """Decode side of a handoff: the prompt's KV has arrived (reserved earlier).
        Returns the KV slots this freed (SGLang: pages the prompt shares with the tree)."""
        req.worker_idx = self.idx
        self.live[id(req)] = req
        freed = self.sched.activate(req)
        self._wake()
        return freed
