"""Metrics: pure numpy over the collector's tables (see docs/metrics.md).

``passlog`` and ``records`` (numpy only) are used while the simulation runs; ``collect``,
``tables``, ``columns``, ``summary`` (numpy) and ``parquet`` (pyarrow) only once it is
over, and pandas only when a table is read as a DataFrame.  So the names below are
loaded from ``summary`` on first use (PEP 562), and a worker's ``PassLog`` imports
neither pandas nor pyarrow.
"""
__all__ = ["GOODPUT_KEYS", "SUMMARY_KEYS", "percentile_index", "summarize", "weighted_stats"]


def __getattr__(name: str):
    if name in __all__:
        from simmodel.metrics import summary
        return getattr(summary, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
    return sorted(list(globals()) + __all__)
