"""Verdicts and statistics over replications (pure pandas / numpy / scipy).

* :func:`sla_target` (from ``simmodel.sla``) turns an SLA into summary-key bounds:
  ``ttft_ms`` bounds ``pNN_ttft_ms``, ``itl_ms`` bounds ``pNN_tpot_ms`` and ``e2e_ms``
  bounds ``pNN_e2e_latency_ms``, ``NN`` being the sweep's ``sla_percentile`` (default 99).
* :func:`met` judges one row (a run, or a point's means) against such bounds.
* :func:`summarize_points` gives one row per point: ``n`` (runs with status ok) and, for
  every numeric summary key K, ``K_mean``, ``K_std`` (sample standard deviation, n-1),
  ``K_ci95_low`` / ``K_ci95_high`` = mean -/+ t(0.975, n-1) · std / sqrt(n) (Student t;
  NaN when n < 2).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from simmodel.sla import PERCENTILE_PREFIX, sla_bounds, sla_target  # noqa: F401

#: Row columns that are not summary statistics.
NON_STAT_COLUMNS = ("point", "label", "replication", "seed", "wall_s", "status", "error",
                    "sla_met", "key", "order", "value")


def point_target(scenario, percentile: float) -> dict:
    """The bounds a sweep judges one point's runs by: its own SLA (a grid may vary it)."""
    return sla_bounds(scenario.sla, percentile)


def met(row: dict, target: dict, suffix: str = "") -> Optional[bool]:
    """Whether every bound of ``target`` holds for ``row[key + suffix]``; None without a
    target; False when a value is missing or NaN."""
    if not target:
        return None
    for key, bound in target.items():
        value = row.get(key + suffix)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if "max" in bound and not value <= bound["max"]:
            return False
        if "min" in bound and not value >= bound["min"]:
            return False
    return True


def t_quantile(n: int) -> float:
    """t(0.975) with ``n - 1`` degrees of freedom (NaN for n < 2)."""
    if n < 2:
        return math.nan
    from scipy.special import stdtrit     # t.ppf's kernel, without scipy.stats' import
    return float(stdtrit(n - 1, 0.975))


def mean_ci(values) -> tuple[float, float, float, float]:
    """(mean, sample std, ci95 low, ci95 high) of ``values`` (NaNs dropped)."""
    x = np.asarray([v for v in values if v is not None and not _isnan(v)], dtype=float)
    n = x.size
    if n == 0:
        return (math.nan,) * 4
    mean = float(x.mean())
    if n < 2:
        return mean, math.nan, math.nan, math.nan
    std = float(x.std(ddof=1))
    half = t_quantile(n) * std / math.sqrt(n)
    return mean, std, mean - half, mean + half


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def stat_columns(points: pd.DataFrame, key_columns) -> list[str]:
    """The numeric summary columns of the points table (not keys, not bookkeeping,
    not booleans; a column that is null in every run is left out)."""
    skip = set(NON_STAT_COLUMNS) | set(key_columns)
    return [c for c in points.columns
            if c not in skip and pd.api.types.is_numeric_dtype(points[c])
            and not pd.api.types.is_bool_dtype(points[c])]


def point_status(statuses) -> str:
    s = set(statuses)
    if len(s) == 1:
        return s.pop()
    return "partial"


def summarize_points(points: pd.DataFrame, key_columns, targets: dict,
                     expected: dict) -> pd.DataFrame:
    """One row per point of ``points`` (one row per run).  ``key_columns``: the point's
    identifying columns (label, varied keys, gpus); ``targets``: point -> the bounds its
    means are judged by; ``expected``: point -> the number of runs it should have (a
    point with fewer finished is ``partial``)."""
    stats = stat_columns(points, key_columns)
    rows = []
    for pid, runs in points.groupby("point", sort=True):
        ok = runs[runs["status"] == "ok"]
        row = {"point": int(pid)}
        for c in key_columns:
            row[c] = runs[c].iloc[0]
        row["n"] = int(len(ok))
        status = point_status(runs["status"])
        if len(runs) < expected.get(pid, len(runs)):
            status = "partial"
        row["status"] = status
        for c in stats:
            m, s, lo, hi = mean_ci(pd.to_numeric(ok[c], errors="coerce").tolist())
            row.update({f"{c}_mean": m, f"{c}_std": s, f"{c}_ci95_low": lo,
                        f"{c}_ci95_high": hi})
        target = targets.get(pid, {})
        row["sla_met"] = met(row, target, "_mean") if len(ok) else (False if target else None)
        rows.append(row)
    return pd.DataFrame(rows)
