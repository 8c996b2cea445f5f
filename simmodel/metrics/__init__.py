"""Metrics: pure pandas/numpy over the collector's tables (see docs/metrics.md)."""
from simmodel.metrics.summary import (
    GOODPUT_KEYS,
    SUMMARY_KEYS,
    percentile_index,
    summarize,
    weighted_stats,
)

__all__ = ["GOODPUT_KEYS", "SUMMARY_KEYS", "percentile_index", "summarize", "weighted_stats"]
