"""``sla``, ``run`` and ``telemetry``: how a run is judged, bounded and observed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from simmodel.config.checks import ConfigError, boolean, positive_number
from simmodel.config.planner import PlannerConfig


@dataclass(frozen=True, slots=True)
class SlaConfig:
    """``sla``: thresholds for goodput (a request is good if it meets every one set).

    ``e2e_ms`` cannot be combined with the other two (as in the reference)."""

    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None
    e2e_ms: Optional[float] = None

    def __post_init__(self):
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            positive_number(key, getattr(self, key), allow_none=True)
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise ConfigError("e2e_ms", "cannot be combined with ttft_ms or itl_ms")

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.itl_ms, self.e2e_ms))


@dataclass(frozen=True, slots=True)
class RunConfig:
    """``run``: how long to simulate and what to record."""

    max_sim_time_ms: Optional[float] = None
    record_kv_events: bool = False     # keep every Stored/Removed KV event (result.kv_events)
    coalesce_decode: bool = True       # cover runs of pure-decode passes with one event
                                       # (same results; off only to cross-check)

    def __post_init__(self):
        positive_number("max_sim_time_ms", self.max_sim_time_ms, allow_none=True)
        boolean("record_kv_events", self.record_kv_events)
        boolean("coalesce_decode", self.coalesce_decode)


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """``telemetry``: sample per-worker and per-pool levels every ``interval_ms`` of
    simulated time (at least ``PlannerConfig.MIN_INTERVAL_MS``) into ``Result.telemetry``
    (``telemetry.parquet``)."""

    interval_ms: float = 1000.0

    def __post_init__(self):
        PlannerConfig.check_interval("interval_ms", self.interval_ms)
