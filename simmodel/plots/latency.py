"""Latency plots over one or several runs: CDFs, the TTFT breakdown, throughput vs latency.

Each function takes the data first (Results, requests frames or summary dicts; see
:func:`simmodel.plots.data.labelled_runs` for the accepted collections) and an optional
``ax``, and returns the axis it drew on.  Data are checked before an axis is created, so a
``ValueError`` never leaves an empty figure behind.
"""
from __future__ import annotations

import math
import textwrap
from typing import Optional, Sequence

import numpy as np

from simmodel.plots._axes import color, key_label, new_axis
from simmodel.plots.data import (
    LATENCY_METRICS,
    TTFT_COMPONENTS,
    as_requests,
    as_summary,
    cdf_points,
    completed,
    labelled_runs,
    percentile_values,
    ttft_components,
)

_COMPONENT_NAMES = tuple(name for name, _, _ in TTFT_COMPONENTS)


def cdf(runs, metric: str = "ttft_ms", *, ax=None, log_x: bool = False,
        sla_ms: Optional[float] = None, percentiles: Sequence[float] = (50, 90, 99)):
    """Empirical CDF of a per-request latency, one step curve per run.

    Only completed requests count (as in the summary).  ``metric`` is one of ``ttft_ms``,
    ``tpot_ms`` (the request's mean gap between tokens), ``e2e_latency_ms``, ``ttst_ms``.  Each curve carries
    markers at ``percentiles``, placed at the summary's nearest-rank values (so the p99
    marker is the run's ``p99_ttft_ms``).  ``sla_ms`` draws a dashed vertical line.
    Artists carry gids ``cdf:<label>``, ``percentiles:<label>`` and ``sla``.
    """
    if metric not in LATENCY_METRICS:
        hint = " (the per-request column is now called tpot_ms)" if metric == "itl_ms" else ""
        raise ValueError(f"cannot plot a CDF of {metric!r}{hint}; choose one of "
                         f"{', '.join(LATENCY_METRICS)}")
    percentiles = tuple(percentiles or ())
    curves = []
    for label, run in labelled_runs(runs):
        requests = completed(as_requests(run))
        if metric not in requests.columns:
            raise ValueError(f"run {label!r} has no {metric!r} column")
        values = requests[metric].to_numpy(dtype=float)
        x, y = cdf_points(values)
        curves.append((label, x, y, percentile_values(values, percentiles)))

    ax = new_axis(ax)
    levels = np.asarray(percentiles, dtype=float) / 100.0
    for i, (label, x, y, marks) in enumerate(curves):
        # Start the staircase at 0 on the first sample so the first step is visible.
        xs = np.concatenate([x[:1], x])
        ys = np.concatenate([[0.0], y]) if x.size else y
        ax.step(xs, ys, where="post", color=color(i), label=label, gid=f"cdf:{label}")
        if percentiles and x.size:
            ax.plot(marks, levels, linestyle="none", marker="o", markersize=5,
                    color=color(i), gid=f"percentiles:{label}", label="_nolegend_")
            if len(curves) == 1:
                for p, v, level in zip(percentiles, marks, levels):
                    ax.annotate(f"p{p:g} = {v:.4g}", (v, level), xytext=(6, -10),
                                textcoords="offset points", fontsize=8)
    if sla_ms is not None:
        ax.axvline(float(sla_ms), linestyle="--", color="red", label=f"SLA {sla_ms:g} ms",
                   gid="sla")
    if log_x:
        ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel(LATENCY_METRICS[metric])
    ax.set_ylabel("fraction of completed requests")
    ax.grid(True, alpha=0.3)
    if len(curves) > 1 or sla_ms is not None:
        ax.legend(loc="lower right")
    return ax


def ttft_breakdown(requests, *, ax=None, kind: str = "bar"):
    """Where a disaggregated request's TTFT goes (see :func:`ttft_components`).

    ``requests``: a requests frame, a Result, or a list / dict label → either.
    ``kind="bar"``: one stacked bar per run of the mean of each component (the bar's top is
    the mean TTFT); ``kind="box"``: a box per component (grouped by run when several).
    Raises ``ValueError`` for an aggregated run.
    """
    if kind not in ("bar", "box"):
        raise ValueError(f"unknown breakdown kind {kind!r}; choose 'bar' or 'box'")
    parts = [(label, ttft_components(as_requests(run)))
             for label, run in labelled_runs(requests)]

    ax = new_axis(ax)
    if kind == "bar":
        positions = np.arange(len(parts), dtype=float)
        bottom = np.zeros(len(parts))
        for j, name in enumerate(_COMPONENT_NAMES):
            heights = np.array([frame[name].mean() if len(frame) else np.nan
                                for _, frame in parts])
            ax.bar(positions, heights, bottom=bottom, width=0.6, color=color(j),
                   label=name.replace("_", " "), gid=f"component:{name}")
            bottom = bottom + heights
        ax.set_xticks(positions, [label for label, _ in parts])
        # Bars take the left 70% of the width; the legend sits in the empty right part.
        ax.set_xlim(-0.6, -0.6 + (len(parts) + 0.2) / 0.7)
        ax.set_ylabel("mean TTFT (ms)")
        ax.legend(loc="upper right")
    else:
        groups = len(parts)
        width = 0.8 / groups
        centres = np.arange(len(_COMPONENT_NAMES), dtype=float)
        for r, (label, frame) in enumerate(parts):
            offsets = centres + (r - (groups - 1) / 2.0) * width
            data = [frame[name].dropna().to_numpy() for name in _COMPONENT_NAMES]
            boxes = ax.boxplot(data, positions=offsets, widths=width * 0.85,
                               patch_artist=True, manage_ticks=False)
            for patch in boxes["boxes"]:
                patch.set_facecolor(color(r))
                patch.set_alpha(0.6)
            boxes["boxes"][0].set_label(label)
        ax.set_xticks(centres, [textwrap.fill(n.replace("_", " "), 11)
                                for n in _COMPONENT_NAMES])
        ax.set_ylabel("time (ms)")
        if groups > 1:
            ax.legend()
    ax.set_title("TTFT breakdown")
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def throughput_latency(runs, *, x: str = "output_throughput_tok_s", y: str = "p99_ttft_ms",
                       ax=None, labels: Optional[Sequence[str]] = None):
    """One point per run at (summary[x], summary[y]), joined in the given order.

    ``runs``: a list or dict of Results or summary dicts (e.g. a load sweep); points are
    annotated with ``labels`` (default: the dict keys, scenario names or ``run i``).  A
    ``None`` summary value (no samples) leaves a gap.  The line has gid
    ``throughput_latency``.
    """
    pairs = labelled_runs(runs, labels)
    xs, ys = [], []
    for label, run in pairs:
        summary = as_summary(run)
        for key in (x, y):
            if key not in summary:
                raise ValueError(f"summary of {label!r} has no key {key!r}")
        xs.append(_number(summary[x]))
        ys.append(_number(summary[y]))

    ax = new_axis(ax)
    ax.plot(xs, ys, marker="o", color=color(0), gid="throughput_latency")
    for (label, _), xv, yv in zip(pairs, xs, ys):
        if math.isfinite(xv) and math.isfinite(yv):
            ax.annotate(label, (xv, yv), xytext=(5, 5), textcoords="offset points",
                        fontsize=8)
    ax.set_xlabel(key_label(x))
    ax.set_ylabel(key_label(y))
    ax.grid(True, alpha=0.3)
    return ax


def _number(value) -> float:
    return float("nan") if value is None else float(value)
