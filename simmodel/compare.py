"""Comparing runs: summaries side by side, and a simulated run against a measured one.

Pure pandas/numpy, no SimPy, no CLI.

* :func:`compare_summaries` puts the headline summary metrics of several runs side by
  side, with each run's relative difference to the first: ``(x - base) / |base|``, NaN
  when the base is 0, missing or NaN.
* :func:`load_measured` reads the per-request latencies of a real benchmark run (CSV,
  JSONL or a JSON array) into columns named like ``Result.requests``' (milliseconds).
* :func:`compare_measured` compares the completed simulated requests with the measured
  ones: nearest-rank percentiles (the summary's definition, so the simulated p50 equals
  the summary's ``median_*``) with their relative error ``(sim - meas) / |meas|``, and
  the two-sample Kolmogorov–Smirnov distance ``sup_x |F_sim(x) - F_meas(x)|`` of the
  empirical CDFs.
* :func:`format_table` renders either table as fixed-width text.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import pandas as pd

from simmodel.errors import UserError
from simmodel.metrics.summary import percentile_index

#: The headline summary keys compared by default, in table order (``goodput_*`` keys
#: follow when a summary has them).
HEADLINE_KEYS = (
    "completed_requests", "duration_ms", "request_throughput_rps", "output_throughput_tok_s",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2e_latency")
      for stat in ("mean", "median", "p90", "p99")),
    "prefix_cache_reused_ratio", "gpu_hours",
)

#: Measured-file columns: our column -> accepted names in order of preference, each with
#: the factor that converts it to milliseconds.  Only the first name present is used.
MEASURED_COLUMNS = {
    "ttft_ms": (("ttft_ms", 1.0), ("ttft", 1.0), ("ttft_s", 1000.0)),
    "e2e_latency_ms": (("e2e_latency_ms", 1.0), ("e2e_ms", 1.0), ("e2e", 1.0),
                       ("latency_ms", 1.0), ("e2e_s", 1000.0)),
    "itl_ms": (("itl_ms", 1.0), ("itl", 1.0), ("itl_s", 1000.0)),
    "tpot_ms": (("tpot_ms", 1.0), ("tpot", 1.0), ("tpot_s", 1000.0)),
}
#: At least one of these must be in a measured file.
REQUIRED_MEASURED = ("ttft_ms", "e2e_latency_ms")


# --------------------------------------------------------------------------- summaries


def compare_summaries(summaries: dict[str, dict],
                      keys: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """One row per summary key, one column per run (in the order of ``summaries``), then
    ``rel_diff_<label>`` for every run after the first, relative to the first.

    ``keys`` defaults to :data:`HEADLINE_KEYS` plus every ``goodput_*`` key any summary
    has.  A key missing from a summary gives NaN; a non-numeric value is kept as is and
    its relative difference is NaN.  Raises ``ValueError`` if ``summaries`` is empty or a
    requested key is in no summary.
    """
    if not summaries:
        raise ValueError("no run to compare")
    labels = list(summaries)
    if keys is None:
        keys = list(HEADLINE_KEYS)
        for s in summaries.values():
            keys += [k for k in s if k.startswith("goodput_") and k not in keys]
    else:
        keys = list(dict.fromkeys(keys))
        unknown = [k for k in keys if not any(k in s for s in summaries.values())]
        if unknown:
            raise ValueError(f"unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(unknown)} (in no summary)")
    table = pd.DataFrame({label: [_value(summaries[label].get(k)) for k in keys]
                          for label in labels}, index=pd.Index(keys, name="metric"))
    base = _numeric(table[labels[0]])
    for label in labels[1:]:
        table[f"rel_diff_{label}"] = relative_difference(_numeric(table[label]), base)
    return table


def relative_difference(x: Any, base: Any) -> np.ndarray:
    """``(x - base) / |base|`` elementwise; NaN where ``base`` is 0 or NaN."""
    x = np.asarray(x, dtype=float)
    base = np.asarray(base, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (x - base) / np.abs(base)
    return np.where((base == 0) | np.isnan(base), np.nan, out)


def _value(v: Any) -> Any:
    """A summary value as a float (None -> NaN); non-numeric values are kept."""
    if v is None:
        return math.nan
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return v


def _numeric(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


# --------------------------------------------------------------------------- measured file


def load_measured(path: Union[str, os.PathLike]) -> pd.DataFrame:
    """Read a real benchmark's per-request latencies: ``.csv`` (a header row), ``.jsonl``
    (one object per line) or ``.json`` (an array of objects, or JSON lines).

    Columns are found by the names in :data:`MEASURED_COLUMNS` (a ``*_s`` column is in
    seconds and converted); at least a TTFT or an E2E column is required.  The result has
    ``ttft_ms``, ``e2e_latency_ms``, ``itl_ms``, ``tpot_ms`` (those present) as float ms,
    an empty cell or null as NaN.  Any problem raises a one-line ``UserError`` naming the
    file (and the line, for a bad value or a bad JSON line).
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".jsonl", ".json"):
        raise UserError(f"{path}: unknown measured-file format {ext or '(no extension)'!r}; "
                        f"expected .csv, .jsonl or .json")
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read measured file: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: cannot read measured file: not UTF-8 text") from None
    if ext == ".csv":
        rows = _csv_rows(path, text)
    elif ext == ".json" and text.lstrip().startswith("["):
        rows = _json_array_rows(path, text)
    else:
        rows = _jsonl_rows(path, text)
    if not rows:
        raise UserError(f"{path}: empty file (no requests)")
    return _measured_frame(path, rows)


Row = tuple[str, dict]          # (where, for messages: "line 3" / "element 2"; record)


def _csv_rows(path: str, text: str) -> list[Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return []
        header = [h.strip() for h in header]
        rows = []
        for fields in reader:
            if not fields or all(not f.strip() for f in fields):
                continue                                  # blank line
            if len(fields) != len(header):
                raise UserError(f"{path}: line {reader.line_num}: expected {len(header)} "
                                f"fields (as in the header), got {len(fields)}")
            rows.append((f"line {reader.line_num}", dict(zip(header, fields))))
    except csv.Error as e:
        raise UserError(f"{path}: line {reader.line_num}: invalid CSV: {e}") from None
    return rows


def _jsonl_rows(path: str, text: str) -> list[Row]:
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: line {number}: invalid JSON: {e.msg}") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}: line {number}: expected a JSON object, "
                            f"got {_json_type(record)}")
        rows.append((f"line {number}", record))
    return rows


def _json_array_rows(path: str, text: str) -> list[Row]:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {e.lineno}: invalid JSON: {e.msg}") from None
    if not isinstance(records, list):   # starts with '[' and parsed, so this cannot happen
        raise UserError(f"{path}: expected a JSON array of objects")
    rows = []
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise UserError(f"{path}: element {i}: expected a JSON object, "
                            f"got {_json_type(record)}")
        rows.append((f"element {i}", record))
    return rows


def _json_type(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _measured_frame(path: str, rows: list[Row]) -> pd.DataFrame:
    names = set().union(*(record.keys() for _, record in rows))
    found = {}
    for ours, accepted in MEASURED_COLUMNS.items():
        for name, scale in accepted:
            if name in names:
                found[ours] = (name, scale)
                break
    if not any(k in found for k in REQUIRED_MEASURED):
        accepted = "; ".join(", ".join(name for name, _ in MEASURED_COLUMNS[k])
                             for k in REQUIRED_MEASURED)
        raise UserError(f"{path}: no TTFT or E2E latency column (accepted names: {accepted})")
    columns = {}
    for ours, (name, scale) in found.items():
        values = np.empty(len(rows))
        for i, (where, record) in enumerate(rows):
            values[i] = _number(path, where, name, record.get(name)) * scale
        columns[ours] = values
    return pd.DataFrame(columns)


def _number(path: str, where: str, name: str, value: Any) -> float:
    """A cell as a non-negative finite float; empty / null -> NaN."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return math.nan
    x = math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value)
        except ValueError:
            pass
    if not (math.isfinite(x) and x >= 0):
        raise UserError(f"{path}: {where}: {name}: must be a non-negative number, "
                        f"got {value!r}")
    return x


# --------------------------------------------------------------------------- simulated vs measured


def compare_measured(requests: pd.DataFrame, measured: pd.DataFrame,
                     metrics: Iterable[str] = ("ttft_ms", "e2e_latency_ms"),
                     percentiles: Iterable[float] = (50, 90, 95, 99)) -> pd.DataFrame:
    """Completed simulated requests against measured ones, per metric.

    Indexed by ``(metric, statistic)``.  For each percentile ``p`` a row ``"p<p>"`` with
    the ``simulated`` and ``measured`` nearest-rank percentiles (ms) and ``rel_error``
    ``(sim - meas) / |meas|``; then a row ``"ks"`` whose ``ks_distance`` is the two-sample
    Kolmogorov–Smirnov distance and whose ``simulated`` / ``measured`` are the sample
    counts.  NaN samples are left out; an empty side gives NaN statistics.

    A metric absent from ``measured`` is skipped (a file may have only TTFT or only E2E);
    a measured ``itl_ms`` (a per-request column, so a request's mean gap) is compared
    with the simulated ``tpot_ms`` column (``(last_token - first_token) /
    (output_length - 1)`` per request) when ``requests`` has no ``itl_ms``.  Raises ``ValueError`` if no metric can be compared.
    """
    if "terminal_status" in requests.columns:
        requests = requests[requests["terminal_status"] == "completed"]
    percentiles = list(percentiles)
    metrics = list(metrics)
    rows, index = [], []
    for metric in metrics:
        # a measured per-request ``itl_ms`` is a request's mean gap: our ``tpot_ms``
        sim_column = metric if metric in requests.columns else (
            "tpot_ms" if metric == "itl_ms" and "tpot_ms" in requests.columns else None)
        if sim_column is None:
            raise ValueError(f"{metric}: not a column of the simulated requests")
        if metric not in measured.columns:
            continue
        sim = _samples(requests[sim_column])
        meas = _samples(measured[metric])
        for p in percentiles:
            s, m = nearest_rank(sim, p), nearest_rank(meas, p)
            rows.append((s, m, float(relative_difference(s, m)), math.nan))
            index.append((metric, f"p{p:g}"))
        rows.append((float(len(sim)), float(len(meas)), math.nan, ks_distance(sim, meas)))
        index.append((metric, "ks"))
    if not rows:
        raise ValueError(f"none of the metrics {', '.join(metrics)} is in the measured data")
    return pd.DataFrame(rows, columns=["simulated", "measured", "rel_error", "ks_distance"],
                        index=pd.MultiIndex.from_tuples(index, names=["metric", "statistic"]))


def nearest_rank(samples: np.ndarray, p: float) -> float:
    """The ``p``-th nearest-rank percentile (the run summary's definition); NaN if empty."""
    if len(samples) == 0:
        return math.nan
    return float(np.sort(samples)[percentile_index(len(samples), p)])


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov distance ``sup_x |F_a(x) - F_b(x)|`` of the empirical
    CDFs; NaN if either sample is empty.

    Both step functions only change at sample values, and are right-continuous, so the
    supremum is attained at one of the pooled values, where each CDF is the fraction of
    its samples ``<= x`` (``searchsorted(..., side="right")``)."""
    a = np.sort(np.asarray(a, dtype=float))
    b = np.sort(np.asarray(b, dtype=float))
    if len(a) == 0 or len(b) == 0:
        return math.nan
    pooled = np.concatenate([a, b])
    fa = np.searchsorted(a, pooled, side="right") / len(a)
    fb = np.searchsorted(b, pooled, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def _samples(column: pd.Series) -> np.ndarray:
    x = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return x[~np.isnan(x)]


# --------------------------------------------------------------------------- text


def format_table(table: pd.DataFrame) -> str:
    """Fixed-width text: the index left-aligned, values right-aligned; ``rel_*`` columns
    as signed percentages, counts as integers, other numbers to 6 significant digits,
    missing values as ``-``."""
    index_names = [n or "" for n in table.index.names]
    index_rows = [list(ix) if isinstance(ix, tuple) else [ix] for ix in table.index]
    cells = [[_cell(v, str(col)) for v in table[col]] for col in table.columns]
    header = index_names + [str(c) for c in table.columns]
    body = [[str(x) for x in ix] + [col[i] for col in cells]
            for i, ix in enumerate(index_rows)]
    widths = [max(len(r[j]) for r in [header] + body) for j in range(len(header))]
    n_index = len(index_names)

    def line(row: list[str]) -> str:
        parts = [c.ljust(w) if j < n_index else c.rjust(w)
                 for j, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(parts).rstrip()

    return "\n".join(line(r) for r in [header] + body)


def _cell(value: Any, column: str) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if column.startswith("rel_"):
        return f"{value * 100:+.2f}%"
    if column == "ks_distance":
        return f"{value:.4f}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value)}"
    return f"{value:.6g}"
