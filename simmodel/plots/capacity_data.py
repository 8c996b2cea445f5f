"""Pure data helpers behind the capacity plots: a sweep folder's tables in, series out.

A sweep folder (``simmodel sweep ... --out DIR``, or ``simmodel search``) holds
``summary.parquet`` (one row per configuration point: its varied scenario keys by dotted
path, ``gpus``, ``n``, ``status``, ``sla_met`` and ``K_mean`` / ``K_std`` / ``K_ci95_low`` /
``K_ci95_high`` for every numeric summary key ``K``), ``points.parquet`` (one row per run),
``sweep.json`` (name, kind, spec incl. the SLA) and, for a search, ``search.json`` (each
search's probes in probing order and its answer).  Nothing here imports matplotlib.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

from simmodel.errors import UserError

SWEEP_FILE = "sweep.json"
SEARCH_FILE = "search.json"
SUMMARY_TABLE = "summary.parquet"
POINTS_TABLE = "points.parquet"

#: Suffixes of the per-key statistics columns of ``summary.parquet``.
STAT_SUFFIXES = ("_mean", "_std", "_ci95_low", "_ci95_high")
#: Columns of ``summary.parquet`` that are neither varied keys nor statistics.
POINT_COLUMNS = ("point", "label", "gpus", "n", "status", "sla_met")

#: Which SLA bound of the sweep spec goes with a y key: the first whose word it contains.
_SLA_FOR_KEY = (("ttft", "ttft_ms"), ("itl", "itl_ms"), ("tpot", "itl_ms"), ("e2e", "e2e_ms"))


def read_sweep_dir(path: Union[str, os.PathLike]) -> dict:
    """Load a sweep folder: ``{"summary", "points", "sweep", "search"}``.

    ``summary`` / ``points`` are DataFrames (``points`` is None when ``points.parquet`` is
    absent: no plot needs it), ``sweep`` the dict of ``sweep.json``, ``search`` the dict of
    ``search.json`` or None.  Raises ``UserError`` (one line, naming the folder) when it is
    not a sweep folder (no ``sweep.json`` or ``summary.parquet``) or a file is unreadable.
    """
    folder = os.fspath(path)
    if not os.path.isdir(folder):
        raise UserError(f"{folder}: not a sweep folder (it does not exist)")
    for name in (SWEEP_FILE, SUMMARY_TABLE):
        if not os.path.isfile(os.path.join(folder, name)):
            raise UserError(f"{folder}: not a sweep folder ({name} is missing)")
    try:
        sweep = _read_json(os.path.join(folder, SWEEP_FILE))
        search_path = os.path.join(folder, SEARCH_FILE)
        search = _read_json(search_path) if os.path.isfile(search_path) else None
        summary = pd.read_parquet(os.path.join(folder, SUMMARY_TABLE))
        points_path = os.path.join(folder, POINTS_TABLE)
        points = pd.read_parquet(points_path) if os.path.isfile(points_path) else None
    except (OSError, ValueError) as e:       # JSONDecodeError and ArrowInvalid are ValueErrors
        raise UserError(f"{folder}: cannot read the sweep: {_first_line(e)}") from None
    if not isinstance(sweep, dict):
        raise UserError(f"{folder}: cannot read the sweep: {SWEEP_FILE} is not an object")
    if search is not None and not (isinstance(search, dict)
                                   and isinstance(search.get("results"), list)):
        raise UserError(f"{folder}: cannot read the sweep: {SEARCH_FILE} has no results list")
    return {"summary": summary, "points": points, "sweep": sweep, "search": search}


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# -- columns ---------------------------------------------------------------------------------

def summary_keys(summary: pd.DataFrame) -> list[str]:
    """The summary keys ``K`` that have a ``K_mean`` column, in column order."""
    return [c[: -len("_mean")] for c in summary.columns if str(c).endswith("_mean")]


def varied_keys(summary: pd.DataFrame) -> list[str]:
    """The varied scenario keys: columns that are neither point columns nor statistics."""
    return [c for c in summary.columns
            if c not in POINT_COLUMNS and not str(c).endswith(STAT_SUFFIXES)]


def require_column(summary: pd.DataFrame, key: str) -> None:
    """Raise ``ValueError`` (one line, listing the varied keys) if ``key`` is no column."""
    if key not in summary.columns:
        raise ValueError(f"no column {key!r} in the sweep summary; varied keys: "
                         f"{', '.join(varied_keys(summary)) or 'none'}")


def metric_column(summary: pd.DataFrame, key: str) -> str:
    """The column holding summary key ``key``: ``{key}_mean``, else a plain column such as
    ``gpus``.  Raises ``ValueError`` (one line, listing the summary keys) otherwise."""
    if f"{key}_mean" in summary.columns:
        return f"{key}_mean"
    if key in summary.columns and not key.endswith(STAT_SUFFIXES):
        return key
    raise ValueError(f"no summary key {key!r} in the sweep summary (no column "
                     f"{key + '_mean'!r}); summary keys: "
                     f"{', '.join(summary_keys(summary)) or 'none'}")


def column_numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    """``frame[column]`` as floats (nulls and non-numbers NaN); all NaN if no such column."""
    if column not in frame.columns:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _axis_values(column: pd.Series) -> np.ndarray:
    """Numbers as floats (nullable ints too), anything else as strings (categories)."""
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return column.to_numpy(dtype=float, na_value=np.nan)
    return column.astype(str).to_numpy()


def hue_groups(summary: pd.DataFrame,
               hue: Optional[str]) -> list[tuple[Any, pd.DataFrame]]:
    """``(hue value, rows)`` in sorted value order, rows with a null hue last (value None);
    one group ``(None, summary)`` without a hue."""
    if hue is None:
        return [(None, summary)]
    column = summary[hue]
    values = [v for v in pd.unique(column[column.notna()])]
    try:
        values = sorted(values)
    except TypeError:                      # mixed types: order by their text
        values = sorted(values, key=str)
    groups = [(v, summary[column == v]) for v in values]
    if column.isna().any():
        groups.append((None, summary[column.isna()]))
    return groups


def format_value(value: Any) -> str:
    """A key value for a label: ``4.0`` → ``4`` (an int read back as a float), a null
    (None, NaN, pd.NA) → ``n/a``."""
    missing = pd.isna(value)
    if isinstance(missing, (bool, np.bool_)) and missing:
        return "n/a"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's shortest dotted suffix that no other key shares:
    ``cluster.workers, cluster.decode.workers`` → ``cluster.workers, decode.workers``."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != key and (o == tail or o.endswith("." + tail)) for o in keys):
                break
        out[key] = tail
    return out


# -- sweep lines -----------------------------------------------------------------------------

def sweep_series(summary: pd.DataFrame, x: str, y: str,
                 hue: Optional[str] = None) -> list[tuple[Any, pd.DataFrame]]:
    """The lines of a sweep plot: ``[(hue value or None, frame)]``.

    Each frame has columns ``x`` (floats, or strings for a categorical key), ``mean``
    (``{y}_mean``), ``low`` / ``high`` (``{y}_ci95_low`` / ``_high``, NaN if absent) and
    ``point``, sorted by x (stable: points sharing an x keep their table order).  Rows
    with a null x are skipped; a group left empty is dropped.  Raises ``ValueError``
    naming a missing x, y or hue column.
    """
    require_column(summary, x)
    ycol = metric_column(summary, y)
    if hue is not None:
        require_column(summary, hue)
    stem = ycol[: -len("_mean")] if ycol.endswith("_mean") else None
    series = []
    for value, rows in hue_groups(summary, hue):
        rows = rows[rows[x].notna()]
        if rows.empty:
            continue
        frame = pd.DataFrame({
            "x": _axis_values(rows[x]),
            "mean": column_numbers(rows, ycol),
            "low": column_numbers(rows, f"{stem}_ci95_low") if stem else np.nan,
            "high": column_numbers(rows, f"{stem}_ci95_high") if stem else np.nan,
            "point": (rows["point"].to_numpy() if "point" in rows.columns
                      else np.arange(len(rows))),
        })
        series.append((value, frame.sort_values("x", kind="stable").reset_index(drop=True)))
    return series


def default_sla(sweep: Optional[Mapping], y: str) -> Optional[float]:
    """The sweep spec's SLA bound matching summary key ``y``: ``ttft_ms`` for a key with
    ``ttft``, ``itl_ms`` for ``itl`` / ``tpot``, ``e2e_ms`` for ``e2e``; None when the spec
    has no SLA, no such bound, or ``y`` is none of these."""
    sla = ((sweep or {}).get("spec") or {}).get("sla") or {}
    for word, bound in _SLA_FOR_KEY:
        if word in y:
            value = sla.get(bound)
            return None if value is None else float(value)
    return None


# -- Pareto front ----------------------------------------------------------------------------

def pareto_front(summary: pd.DataFrame, cost: str, value: str) -> pd.DataFrame:
    """The rows of ``summary`` no other row dominates, sorted by cost (then value, highest
    first).  Row j dominates row i when ``cost_j <= cost_i`` and ``value_j >= value_i``
    with one of them strict, so rows with equal cost and value are all kept.

    ``cost`` / ``value`` are summary keys (their ``_mean`` columns) or plain columns such
    as ``gpus``.  Rows with a NaN cost or value are left out.  The index is kept.
    """
    ccol, vcol = metric_column(summary, cost), metric_column(summary, value)
    c, v = column_numbers(summary, ccol), column_numbers(summary, vcol)
    ok = np.isfinite(c) & np.isfinite(v)
    c, v = c[ok], v[ok]
    # dominated[i]: some j is no worse on both and strictly better on one
    no_worse = (c[None, :] <= c[:, None]) & (v[None, :] >= v[:, None])
    better = (c[None, :] < c[:, None]) | (v[None, :] > v[:, None])
    dominated = (no_worse & better).any(axis=1)
    front = summary[ok][~dominated]
    order = np.lexsort((-column_numbers(front, vcol), column_numbers(front, ccol)))
    return front.iloc[order]


def point_text(row: Mapping, keys: Sequence[str]) -> str:
    """An annotation for one configuration point: its label, then its non-null varied
    values by their short key names (one line each)."""
    names = short_keys(list(keys))
    values = [f"{names[k]}={format_value(row[k])}" for k in keys
              if format_value(row.get(k)) != "n/a"]
    label = row.get("label")
    head = [] if label is None or format_value(label) == "n/a" else [str(label)]
    return "\n".join(head + values)


# -- search probes ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class ProbeSeries:
    """One search of ``search.json``: its probes in probing order and its answer.

    ``probes`` columns: ``order`` (1, 2, ...), ``value`` (the varied key's value),
    ``y`` (the metric, NaN if the probe has none), ``met`` (bool), ``status``.
    ``bounds``: ``(op, bound)`` pairs of the target on the metric (op ``max`` / ``min``).
    """
    label: str
    vary: str
    goal: Optional[str]
    best: Optional[float]
    bounds: tuple
    probes: pd.DataFrame


def search_series(results: Sequence[Mapping],
                  metric: Optional[str] = None) -> tuple[str, list[ProbeSeries]]:
    """``(metric, [ProbeSeries per result])`` for the ``results`` list of ``search.json``.

    ``metric`` defaults to the first target key of the first result.  A series is labelled
    by its grid (``k=v, ...``; ``all`` for an empty grid).  Raises ``ValueError`` for no
    results, no metric, or a malformed result.
    """
    if not results:
        raise ValueError("no search results to plot")
    for i, result in enumerate(results, 1):
        if not isinstance(result, Mapping) or not isinstance(result.get("probes"), list):
            raise ValueError(f"search result {i} has no probes list")
    if metric is None:
        target = results[0].get("target") or {}
        if not target:
            raise ValueError("the first search result has no target; name the metric")
        metric = str(next(iter(target)))
    series = []
    for i, result in enumerate(results, 1):
        rows = [_probe_row(f"search result {i}, probe {order}", order, probe, metric)
                for order, probe in enumerate(result["probes"], 1)]
        grid = result.get("grid") or {}
        on_metric = (result.get("target") or {}).get(metric) or {}
        bounds = tuple((op, float(b)) for op, b in on_metric.items() if b is not None)
        best = result.get("best")
        shown = ", ".join(f"{k}={format_value(v)}" for k, v in grid.items())
        name = str(result.get("label") or "")
        series.append(ProbeSeries(
            label=" ".join(t for t in (name, shown) if t) or "all",
            vary=str(result.get("vary") or "value"), goal=result.get("goal"),
            best=None if best is None else float(best), bounds=bounds,
            probes=pd.DataFrame(rows, columns=["order", "value", "y", "met", "status"])))
    return metric, series


def _probe_row(where: str, order: int, probe: Any, metric: str) -> tuple:
    if not isinstance(probe, Mapping) or probe.get("value") is None:
        raise ValueError(f"{where} has no value")
    y = (probe.get("metrics") or {}).get(metric)
    try:
        value, y = float(probe["value"]), math.nan if y is None else float(y)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: value {probe['value']!r} or {metric} {y!r} "
                         f"is not a number") from None
    return order, value, y, bool(probe.get("met")), str(probe.get("status") or "ok")
