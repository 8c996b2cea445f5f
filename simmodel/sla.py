"""SLA bounds on summary keys (pure Python: the summary table's verdict needs no pandas).

:func:`sla_target` turns an SLA into summary-key bounds: ``ttft_ms`` bounds
``pNN_ttft_ms``, ``itl_ms`` bounds ``pNN_tpot_ms`` (a request's mean inter-token gap, the
same per-request ITL the goodput test uses) and ``e2e_ms`` bounds ``pNN_e2e_latency_ms``,
``NN`` being the percentile (a sweep's ``sla_percentile``, default 99).  Used by
``simmodel.report`` (the verdict line) and ``simmodel.capacity.stats``.
"""
from __future__ import annotations

from typing import Optional

#: ``sla_percentile`` -> the summary-key prefix of that statistic.
PERCENTILE_PREFIX = {50.0: "median", 75.0: "p75", 90.0: "p90", 95.0: "p95", 99.0: "p99",
                     100.0: "max"}
_SLA_METRICS = (("ttft_ms", "ttft"), ("itl_ms", "tpot"), ("e2e_ms", "e2e_latency"))


def sla_target(sla: Optional[dict], percentile: float) -> dict:
    """Summary-key bounds equivalent to ``sla`` at ``percentile`` ({} without an SLA)."""
    if not sla:
        return {}
    prefix = PERCENTILE_PREFIX[float(percentile)]
    return {f"{prefix}_{stem}_ms": {"max": float(sla[key])}
            for key, stem in _SLA_METRICS if sla.get(key) is not None}


def sla_bounds(sla, percentile: float) -> dict:
    """``sla_target`` of an ``SlaConfig`` ({} when no threshold is set)."""
    if not sla.is_set:
        return {}
    return sla_target({k: getattr(sla, k) for k in ("ttft_ms", "itl_ms", "e2e_ms")},
                      percentile)
