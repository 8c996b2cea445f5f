"""Pure data helpers behind the plots: pandas/numpy in, arrays and DataFrames out.

Nothing here imports matplotlib, so every number a plot draws can be computed (and
tested) on its own.  Inputs are the tables of :class:`simmodel.result.Result`; see
``simmodel/result.py`` for their columns and ``docs/metrics.md`` for their meaning.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from simmodel.metrics import percentile_index
from simmodel.result import TELEMETRY_POOL_METRICS, TELEMETRY_WORKER_METRICS, Result

#: Per-request latency columns a CDF can show, with their axis labels.  ``tpot_ms`` is the
#: request's mean gap between tokens (the summary's ``tpot`` sample set, not its pooled ``itl``).
LATENCY_METRICS = {
    "ttft_ms": "TTFT (ms)",
    "tpot_ms": "TPOT: per-request mean inter-token latency (ms)",
    "e2e_latency_ms": "end-to-end latency (ms)",
    "ttst_ms": "TTST: time to second token (ms)",
}

#: The TTFT of a disaggregated request split at its lifecycle stamps, in order.  Each
#: component is ``end - start``; consecutive components share a stamp, so they telescope to
#: ``first_token_ms - arrival_time_ms`` = ``ttft_ms``.
TTFT_COMPONENTS = (
    ("prefill_queue", "arrival_time_ms", "prefill_admit_ms"),
    ("prefill", "prefill_admit_ms", "source_held_ms"),
    # waiting for a destination reservation, then the transfer itself
    ("kv_transfer", "source_held_ms", "destination_activated_ms"),
    ("decode_wait", "destination_activated_ms", "decode_admit_ms"),
    ("first_decode_pass", "decode_admit_ms", "first_token_ms"),
)

# When a worker index exists in several pools (prefill worker 0 and decode worker 0 of a
# disaggregated run) and no pool is named, show this one: the decode pool is where KV
# occupancy and batch size grow with the output, so it is the informative default.
_POOL_PREFERENCE = ("agg", "decode", "prefill")


def cdf_points(values) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF of ``values``: sorted x and y = i/n for i = 1..n (NaNs dropped).

    Empty input (or all NaN) gives two empty arrays.
    """
    x = np.asarray(values, dtype=float).ravel()
    x = np.sort(x[~np.isnan(x)])
    y = np.arange(1, x.size + 1, dtype=float) / x.size if x.size else np.empty(0)
    return x, y


def percentile_values(values, percentiles: Iterable[float]) -> np.ndarray:
    """Percentiles of ``values`` (NaNs dropped) by the summary's nearest-rank rule.

    The sorted sample at ``percentile_index(n, p)`` (docs/metrics.md), so a CDF's p99
    marker sits exactly at the run's ``p99_*_ms`` summary value.  Empty input gives NaNs.
    """
    x, _ = cdf_points(values)
    ps = list(percentiles)
    if x.size == 0:
        return np.full(len(ps), np.nan)
    return np.array([x[percentile_index(x.size, p)] for p in ps])


def completed(requests: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``requests`` with ``terminal_status == "completed"`` (all rows if the column
    is missing, e.g. a hand-made frame)."""
    if "terminal_status" not in requests.columns:
        return requests
    return requests[requests["terminal_status"] == "completed"]


def ttft_components(requests: pd.DataFrame) -> pd.DataFrame:
    """Split each disaggregated request's TTFT into the stages of its handoff.

    Columns (ms): ``prefill_queue`` (prefill_admit − arrival), ``prefill`` (source_held −
    prefill_admit), ``kv_transfer`` (destination_activated − source_held: waiting for a
    destination reservation plus the transfer), ``decode_wait`` (decode_admit −
    destination_activated), ``first_decode_pass`` (first_token − decode_admit), and
    ``ttft_ms``.  Rows: completed requests with a first token and every lifecycle stamp,
    index kept from ``requests``.  The components sum to ``ttft_ms`` (up to rounding).

    Raises ``ValueError`` for an aggregated run (no prefill admissions).
    """
    if "prefill_admit_ms" not in requests.columns or requests["prefill_admit_ms"].isna().all():
        raise ValueError("TTFT breakdown needs a disaggregated run "
                         "(prefill_admit_ms is empty: this run has no prefill pool)")
    stamps = [start for _, start, _ in TTFT_COMPONENTS] + ["first_token_ms"]
    done = completed(requests).dropna(subset=stamps)
    out = pd.DataFrame(
        {name: done[end].astype(float) - done[start].astype(float)
         for name, start, end in TTFT_COMPONENTS},
        index=done.index)
    out["ttft_ms"] = done["ttft_ms"].astype(float)
    return out


def resolve_pool(frame: pd.DataFrame, worker: int, pool: Optional[str]) -> str:
    """The pool to show for ``worker`` in a passes or telemetry frame.

    A named pool is checked; ``None`` picks the worker's only pool, or in a disaggregated
    run the decode pool.  Raises ``ValueError`` naming the workers that exist.
    """
    rows = frame[frame["worker"] == worker]
    pools = [p for p in pd.unique(rows["pool"])]
    if pool is not None:
        if pool not in pools:
            raise ValueError(f"no data for {pool} worker {worker}; "
                             f"{_workers_text(frame)}")
        return pool
    if not pools:
        raise ValueError(f"no data for worker {worker}; {_workers_text(frame)}")
    for preferred in _POOL_PREFERENCE:
        if preferred in pools:
            return preferred
    return str(sorted(pools)[0])


def _workers_text(frame: pd.DataFrame) -> str:
    rows = frame[frame["worker"] >= 0]
    if rows.empty:
        return "the table has no worker rows"
    parts = [f"{p}: {', '.join(str(w) for w in sorted(pd.unique(g['worker'])))}"
             for p, g in rows.groupby("pool", sort=True)]
    return "workers by pool: " + "; ".join(parts)


def worker_passes(passes: pd.DataFrame, worker: int = 0,
                  pool: Optional[str] = None) -> pd.DataFrame:
    """Passes of one worker (pool resolved as in :func:`resolve_pool`), by start time."""
    pool = resolve_pool(passes, worker, pool)
    rows = passes[(passes["worker"] == worker) & (passes["pool"] == pool)]
    return rows.sort_values("start_ms", kind="stable")


def pass_shares(passes: pd.DataFrame, worker: int, pool: Optional[str] = None) -> pd.DataFrame:
    """Prefill vs decode share of each forward pass of one worker.

    ``prefill_share = prefill_tokens / (prefill_tokens + num_decode)`` (each decoder adds
    one token), 0 for a pass with neither; ``decode_share = 1 − prefill_share``.  Columns
    ``start_ms, end_ms, prefill_share, decode_share``, one row per pass in time order.
    """
    rows = worker_passes(passes, worker, pool)
    prefill = rows["prefill_tokens"].to_numpy(dtype=float)
    total = prefill + rows["num_decode"].to_numpy(dtype=float)
    share = np.divide(prefill, total, out=np.zeros_like(prefill), where=total > 0)
    return pd.DataFrame({
        "start_ms": rows["start_ms"].to_numpy(dtype=float),
        "end_ms": rows["end_ms"].to_numpy(dtype=float),
        "prefill_share": share,
        "decode_share": 1.0 - share,
    })


def telemetry_series(telemetry: Optional[pd.DataFrame], metric: str, *,
                     pool: Optional[str] = None,
                     worker: Optional[int] = None) -> pd.DataFrame:
    """One telemetry metric as a wide table: index ``time_ms``, one column per worker.

    ``pool`` / ``worker`` filter the rows (pool-level metrics have worker -1).  Raises
    ``ValueError`` for missing telemetry, an unknown metric name, or rows from several
    pools when ``pool`` is not given.  A known metric with no matching rows gives an
    empty frame.
    """
    if telemetry is None or len(telemetry) == 0:
        raise ValueError("this result has no telemetry (enable telemetry sampling in the "
                         "scenario to get worker levels over time)")
    known = TELEMETRY_WORKER_METRICS + TELEMETRY_POOL_METRICS
    if metric not in known:
        raise ValueError(f"unknown telemetry metric {metric!r}; valid: {', '.join(known)}")
    rows = telemetry[telemetry["metric"] == metric]
    if pool is not None:
        rows = rows[rows["pool"] == pool]
    if worker is not None:
        rows = rows[rows["worker"] == worker]
    pools = sorted(pd.unique(rows["pool"]))
    if len(pools) > 1:
        raise ValueError(f"telemetry {metric!r} has pools {', '.join(pools)}; pass pool=")
    wide = rows.pivot(index="time_ms", columns="worker", values="value").sort_index()
    wide.columns.name = "worker"
    return wide


def has_telemetry(result: Result, metric: str, pool: str, worker: int) -> bool:
    """True when ``result.telemetry`` has rows of ``metric`` for this pool and worker."""
    tel = result.telemetry
    if tel is None or len(tel) == 0:
        return False
    return bool(((tel["metric"] == metric) & (tel["pool"] == pool)
                 & (tel["worker"] == worker)).any())


# -- run collections ------------------------------------------------------------------------

def down_spans(lifecycle: Optional[pd.DataFrame], pool: str, worker: int,
               end_ms: float) -> list[tuple[float, float]]:
    """The spans ``(from, to)`` in which worker ``worker`` of ``pool`` was down (failed:
    docs/faults.md), from the lifecycle table; one still down at the end runs to
    ``end_ms``."""
    if lifecycle is None or not len(lifecycle):
        return []
    rows = lifecycle[(lifecycle["pool"] == pool) & (lifecycle["worker"] == worker)]
    spans, down = [], None
    for at, state in zip(rows["at_ms"], rows["state"]):
        if state == "failed" and down is None:
            down = float(at)
        elif state != "failed" and down is not None:
            spans.append((down, float(at)))
            down = None
    if down is not None:
        spans.append((down, max(down, float(end_ms))))
    return spans


def as_requests(run) -> pd.DataFrame:
    """The requests table of a Result, or the DataFrame itself."""
    if isinstance(run, Result):
        return run.requests
    if isinstance(run, pd.DataFrame):
        return run
    raise TypeError(f"expected a Result or a requests DataFrame, got {type(run).__name__}")


def as_summary(run) -> Mapping:
    """The summary dict of a Result, or the mapping itself."""
    if isinstance(run, Result):
        return run.summary
    if isinstance(run, Mapping):
        return run
    raise TypeError(f"expected a Result or a summary dict, got {type(run).__name__}")


def labelled_runs(runs, labels: Optional[Sequence[str]] = None) -> list[tuple[str, object]]:
    """Normalise ``runs`` to ``[(label, run), ...]``.

    ``runs``: one Result / DataFrame / summary dict, a list of them, or a dict label → run.
    List items are labelled by ``labels``, else by their scenario name when those are
    distinct, else ``run 1``, ``run 2`` ...
    """
    if isinstance(runs, (Result, pd.DataFrame)):
        items = [runs]
    elif isinstance(runs, Mapping) and (not runs or not _is_summary(runs)):
        items = list(runs.values())
        labels = [str(k) for k in runs.keys()] if labels is None else labels
    elif isinstance(runs, Mapping):
        items = [runs]
    else:
        items = list(runs)
    if labels is None:
        names = [getattr(getattr(r, "scenario", None), "name", None) for r in items]
        distinct = all(names) and len(set(names)) == len(names)
        labels = names if distinct else [f"run {i + 1}" for i in range(len(items))]
    labels = [str(label) for label in labels]
    if not items:
        raise ValueError("no runs to plot")
    if len(labels) != len(items):
        raise ValueError(f"{len(labels)} labels for {len(items)} runs")
    return list(zip(labels, items))


def _is_summary(mapping: Mapping) -> bool:
    # A summary's values are numbers/strings/None; a dict of runs maps to Results/frames/dicts.
    return not any(isinstance(v, (Result, pd.DataFrame, Mapping)) for v in mapping.values())
