"""What one disaggregated request went through: its lifecycle times (``Result.requests``'
disaggregated columns, docs/metrics.md) and the prefill part it was split into."""
from __future__ import annotations

from dataclasses import dataclass

from simmodel.engine.request import EngineRequest

NAN = float("nan")


@dataclass(slots=True)
class HandoffRecord:
    """Per-request lifecycle times (ms) of a disaggregated request."""

    prefill: EngineRequest
    prefill_worker_idx: int = -1
    source_held_ms: float = NAN
    destination_reserved_ms: float = NAN
    destination_activated_ms: float = NAN
    source_released_ms: float = NAN
    transfer_ms: float = NAN
    missing_tokens: int | None = None  # set when the destination is reserved
    transfer_queue_ms: float = NAN     # contention only: waiting for the link(s)
    transfer_gb_s: float = NAN         # contention only: achieved bandwidth
    arrived: bool = False              # the transfer delivered the prompt
    aborted: bool = False              # a failure lost this attempt (cluster.disagg_faults)
