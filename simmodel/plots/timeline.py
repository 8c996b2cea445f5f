"""What one worker did over simulated time: its passes, its KV cache, its queues.

The axis-level functions draw one worker of one pool (``pool=None``: the worker's only
pool, or the decode pool of a disaggregated run); :func:`timeline_figure` stacks the three
on a shared time axis.  Telemetry levels (``Result.telemetry``) are used when the run has
them; otherwise the per-pass table stands in (KV blocks active and requests in the pass).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from simmodel.plots._axes import TIME_LABEL, color, new_axis
from simmodel.plots.data import (
    down_spans,
    has_telemetry,
    pass_shares,
    resolve_pool,
    telemetry_series,
    worker_passes,
)
from simmodel.result import Result

#: Stacked KV layers, bottom to top.
KV_LAYERS = (("kv_blocks_active", "active"), ("kv_blocks_cached", "cached (evictable)"),
             ("kv_blocks_free", "free"))


def pass_timeline(passes, *, worker: int = 0, pool: Optional[str] = None, ax=None):
    """Forward passes of one worker: a bar from each pass's start to its end, split
    vertically into its prefill share (bottom, gid ``prefill``) and decode share (top, gid
    ``decode``) as in :func:`pass_shares`.  Gaps between bars are idle time.

    ``passes``: a passes frame or a Result.
    """
    from matplotlib.collections import PolyCollection

    passes = passes.passes if isinstance(passes, Result) else passes
    pool = resolve_pool(passes, worker, pool)
    shares = pass_shares(passes, worker, pool)
    start = shares["start_ms"].to_numpy()
    end = shares["end_ms"].to_numpy()
    split = shares["prefill_share"].to_numpy()

    ax = new_axis(ax)
    # One collection per share keeps a long run (10^5 passes) to two artists.
    for name, low, high, i in (("prefill", np.zeros_like(split), split, 0),
                               ("decode", split, np.ones_like(split), 1)):
        ax.add_collection(PolyCollection(_rectangles(start, end, low, high),
                                         facecolors=color(i), edgecolors="none",
                                         label=f"{name} share", gid=name), autolim=True)
    ax.autoscale_view()
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("share of pass tokens")
    ax.set_xlabel(TIME_LABEL)
    ax.set_title(f"{pool} worker {worker}: forward passes")
    ax.legend(loc="upper right")
    return ax


def kv_occupancy(result_or_passes, *, worker: int = 0, pool: Optional[str] = None, ax=None):
    """KV blocks of one worker over time.

    With telemetry (a Result whose telemetry has the three ``kv_blocks_*`` metrics for this
    worker): active / cached / free stacked (the top is the worker's pool of blocks).
    Otherwise ``passes.kv_blocks_active`` as a step line (gid ``kv_blocks_active``).
    """
    result = result_or_passes if isinstance(result_or_passes, Result) else None
    passes = result.passes if result is not None else result_or_passes
    telemetry = result.telemetry if result is not None else None
    pool = _pool_for(passes, telemetry, worker, pool)

    if result is not None and all(has_telemetry(result, m, pool, worker) for m, _ in KV_LAYERS):
        levels = pd.concat({m: telemetry_series(telemetry, m, pool=pool, worker=worker)[worker]
                            for m, _ in KV_LAYERS}, axis=1).dropna()
        ax = new_axis(ax)
        layers = ax.stackplot(levels.index.to_numpy(dtype=float),
                              *[levels[m].to_numpy(dtype=float) for m, _ in KV_LAYERS],
                              labels=[label for _, label in KV_LAYERS],
                              colors=[color(3), color(1), "0.85"])
        for layer, (metric, _) in zip(layers, KV_LAYERS):
            layer.set_gid(metric)
        ax.legend(loc="upper right")
        ax.set_ylabel("KV blocks")
    else:
        rows = worker_passes(passes, worker, pool)
        ax = new_axis(ax)
        ax.step(*_held_steps(rows, rows["kv_blocks_active"]), where="post", color=color(3),
                gid="kv_blocks_active")
        ax.set_ylabel("KV blocks active")
    ax.set_xlabel(TIME_LABEL)
    ax.set_title(f"{pool} worker {worker}: KV cache")
    return ax


def queue_depth(telemetry, *, worker: int = 0, pool: Optional[str] = None, ax=None):
    """Requests running and waiting at one worker over time (step lines, gids ``running``
    and ``waiting``), plus the pool router's queue (gid ``router_queue``) when sampled.

    ``telemetry``: a telemetry frame or a Result; raises ``ValueError`` without telemetry.
    """
    telemetry = telemetry.telemetry if isinstance(telemetry, Result) else telemetry
    if telemetry is None or len(telemetry) == 0:
        telemetry_series(telemetry, "running")       # raises the "no telemetry" error
    pool = resolve_pool(telemetry, worker, pool)
    lines = []
    for metric, who, label in (("running", worker, "running"), ("waiting", worker, "waiting"),
                               ("router_queue", -1, f"{pool} router queue")):
        series = telemetry_series(telemetry, metric, pool=pool, worker=who)
        if not series.empty:
            lines.append((metric, label, series[who]))
    if not lines:
        raise ValueError(f"telemetry has no running/waiting samples for {pool} worker {worker}")

    ax = new_axis(ax)
    for i, (metric, label, series) in enumerate(lines):
        ax.step(series.index.to_numpy(dtype=float), series.to_numpy(dtype=float), where="post",
                color=color(i), label=label, gid=metric)
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("requests")
    ax.set_title(f"{pool} worker {worker}: queues")
    if len(lines) > 1:
        ax.legend(loc="upper right")
    return ax


def running_from_passes(passes, *, worker: int = 0, pool: Optional[str] = None, ax=None):
    """Requests in each pass of one worker (``num_prefill + num_decode``), a step line
    (gid ``running``): the stand-in for :func:`queue_depth` when there is no telemetry."""
    passes = passes.passes if isinstance(passes, Result) else passes
    pool = resolve_pool(passes, worker, pool)
    rows = worker_passes(passes, worker, pool)
    ax = new_axis(ax)
    ax.step(*_held_steps(rows, rows["num_prefill"] + rows["num_decode"]), where="post",
            color=color(0), label="running (requests in the pass)", gid="running")
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("requests in the pass")
    ax.set_title(f"{pool} worker {worker}: batch size (no telemetry)")
    return ax


def timeline_figure(result: Result, *, worker: int = 0, pool: Optional[str] = None):
    """Three stacked axes sharing the time axis for one worker: :func:`pass_timeline`,
    :func:`kv_occupancy`, and :func:`queue_depth` (or, without telemetry,
    :func:`running_from_passes`); the spans in which the worker was down are shaded
    (gid ``down``).  Returns the Figure."""
    import matplotlib.pyplot as plt

    pool = _pool_for(result.passes, result.telemetry, worker, pool)
    worker_passes(result.passes, worker, pool)        # raises before any figure exists
    queues = has_telemetry(result, "running", pool, worker)
    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(10, 8), constrained_layout=True)
    try:
        pass_timeline(result.passes, worker=worker, pool=pool, ax=axes[0])
        kv_occupancy(result, worker=worker, pool=pool, ax=axes[1])
        if queues:
            queue_depth(result.telemetry, worker=worker, pool=pool, ax=axes[2])
        else:
            running_from_passes(result.passes, worker=worker, pool=pool, ax=axes[2])
    except Exception:
        plt.close(fig)
        raise
    end = float(result.passes["end_ms"].max()) if len(result.passes) else 0.0
    spans = down_spans(result.lifecycle, pool, worker, end)
    for k, (a, b) in enumerate(spans):
        for ax in axes:       # failed: docs/faults.md
            ax.axvspan(a, b, color="0.85", zorder=0, gid="down",
                       label="down (failed)" if k == 0 and ax is axes[0] else None)
            _break_lines(ax, a)
    if result.lifecycle is not None and len(result.lifecycle):
        axes[0].legend(loc="upper right")
    for ax in axes[:-1]:
        ax.set_xlabel("")
    return fig


def _pool_for(passes: pd.DataFrame, telemetry: Optional[pd.DataFrame], worker: int,
              pool: Optional[str]) -> str:
    frames = [passes[["pool", "worker"]]]
    if telemetry is not None and len(telemetry):
        frames.append(telemetry[["pool", "worker"]])
    return resolve_pool(pd.concat(frames, ignore_index=True), worker, pool)


def _break_lines(ax, at: float) -> None:
    """End every line of ``ax`` at ``at`` (a worker going down): a held level does not run
    on through the time the worker was down."""
    for line in ax.get_lines():
        x = np.asarray(line.get_xdata(), dtype=float)
        y = np.asarray(line.get_ydata(), dtype=float)
        i = int(np.searchsorted(x, at, side="right"))
        if 0 < i < len(x):
            line.set_data(np.insert(x, i, at), np.insert(y, i, np.nan))


def _held_steps(rows: pd.DataFrame, values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Step points for a per-pass value held from each pass start, the last one held to the
    end of the last pass."""
    x = rows["start_ms"].to_numpy(dtype=float)
    y = values.to_numpy(dtype=float)
    if x.size:
        x = np.append(x, rows["end_ms"].to_numpy(dtype=float)[-1])
        y = np.append(y, y[-1])
    return x, y


def _rectangles(start, end, low, high) -> np.ndarray:
    """Vertices (n, 4, 2) of the rectangles [start, end] × [low, high]."""
    return np.stack([np.column_stack([start, low]), np.column_stack([end, low]),
                     np.column_stack([end, high]), np.column_stack([start, high])], axis=1)
