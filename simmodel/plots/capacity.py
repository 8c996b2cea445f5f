"""Capacity plots of a sweep folder: a metric across configurations, cost against value,
and how a capacity search probed its way to an answer.

* :func:`sweep_lines`: a summary key's mean across replications against a varied scenario
  key, one line per value of a second key (``hue``), a shaded 95% confidence band, and an
  optional horizontal SLA line.
* :func:`pareto`: every configuration point at (cost, value), e.g. GPU-hours against
  goodput, points that met the SLA filled and those that missed it hollow, the Pareto
  front as a step line with its points annotated.
* :func:`search_probes`: each search's probes in probing order (the varied key's value
  against the target metric), met / not met / early stopped, the target bound and the
  answer.
* :func:`capacity_figure`: one of the above as a whole figure, by kind name (``sweep``,
  ``pareto``, ``probes``), from the tables :func:`read_sweep_dir` loads (for the CLI).

Each plot takes the data and an optional ``ax`` and returns the axis; the numbers come
from the pure helpers in ``capacity_data.py``.  Data are checked before an axis is
created, so a ``ValueError`` never leaves an empty figure behind.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from simmodel.plots._axes import color, key_label, new_axis
from simmodel.plots.capacity_data import (
    column_numbers,
    default_sla,
    format_value,
    hue_groups,
    metric_column,
    pareto_front,
    point_text,
    read_sweep_dir,
    require_column,
    search_series,
    short_keys,
    summary_keys,
    sweep_series,
    varied_keys,
)

CAPACITY_KINDS = ("sweep", "pareto", "probes")

__all__ = ["CAPACITY_KINDS", "capacity_figure", "pareto", "read_sweep_dir", "search_probes",
           "sweep_lines"]


def sweep_lines(summary: pd.DataFrame, x: str, y: str, *, hue: Optional[str] = None,
                ax=None, sla: Optional[float] = None, log_y: bool = False):
    """``{y}_mean`` against varied key ``x``, one line per value of ``hue`` (or one line).

    ``summary``: a sweep's ``summary.parquet``; ``x`` / ``hue``: column names (dotted
    scenario keys); ``y``: a summary key without suffix (``p99_ttft_ms``).  Points are
    sorted by x; rows with a null x are skipped, rows with a null hue form a line
    ``n/a``.  Where ``{y}_ci95_low`` / ``_high`` are finite a band is shaded between them
    (a lone finite interval gets an error bar instead).  ``sla`` draws a dashed horizontal
    line.  Artists carry gids ``sweep:<line>``, ``band:<line>``, ``ci:<line>``, ``sla``
    (``<line>`` is the hue value, or ``y`` without hue).
    """
    series = sweep_series(summary, x, y, hue)
    if not series:
        raise ValueError(f"no sweep point has a value of {x!r}")

    ax = new_axis(ax)
    for i, (value, frame) in enumerate(series):
        name = y if hue is None else format_value(value)
        xs, mean = frame["x"].to_numpy(), frame["mean"].to_numpy(dtype=float)
        low, high = frame["low"].to_numpy(dtype=float), frame["high"].to_numpy(dtype=float)
        ax.plot(xs, mean, marker="o", color=color(i), label=name, gid=f"sweep:{name}")
        finite = np.isfinite(low) & np.isfinite(high)
        if finite.any():
            ax.fill_between(xs, np.where(finite, low, 0.0), np.where(finite, high, 0.0),
                            where=finite, color=color(i), alpha=0.2, linewidth=0,
                            label="_nolegend_", gid=f"band:{name}")
        # A finite interval between two missing ones is a zero-width band: draw a bar.
        padded = np.concatenate([[False], finite, [False]])
        lone = finite & ~padded[:-2] & ~padded[2:] & np.isfinite(mean)
        if lone.any():
            bars = ax.errorbar(xs[lone], mean[lone], fmt="none", ecolor=color(i), capsize=3,
                               yerr=[np.clip(mean[lone] - low[lone], 0, None),
                                     np.clip(high[lone] - mean[lone], 0, None)])
            for artist in bars.lines[2]:
                artist.set_gid(f"ci:{name}")
    if sla is not None:
        unit = " ms" if y.endswith("_ms") else ""
        ax.axhline(float(sla), linestyle="--", color="red", label=f"SLA {float(sla):g}{unit}",
                   gid="sla")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(f"{key_label(y)}, mean and 95% CI")
    ax.grid(True, alpha=0.3)
    if hue is not None or sla is not None:
        ax.legend(title=hue, fontsize=8)
    return ax


def pareto(summary: pd.DataFrame, cost: str, value: str, *, hue: Optional[str] = None,
           ax=None):
    """Every configuration point at (``cost``, ``value``) and the Pareto front.

    ``cost`` / ``value``: summary keys (their ``_mean`` columns) or plain columns such as
    ``gpus``.  Points are coloured by ``hue``; with a ``sla_met`` column, points that met
    the SLA (or were not judged: null) are filled and those that missed it hollow.  The
    front (:func:`pareto_front`) is a step line annotated with each point's label and
    varied values.  Gids: ``points:<group>``, ``points_unmet:<group>``, ``pareto_front``,
    ``front_label:<point>``.
    """
    ccol, vcol = metric_column(summary, cost), metric_column(summary, value)
    if hue is not None:
        require_column(summary, hue)
    front = pareto_front(summary, cost, value)
    if front.empty:
        raise ValueError(f"no sweep point has both {cost!r} and {value!r}")
    keys = varied_keys(summary)

    ax = new_axis(ax)
    for i, (group, rows) in enumerate(hue_groups(summary, hue)):
        name = "points" if hue is None else format_value(group)
        c, v, filled = column_numbers(rows, ccol), column_numbers(rows, vcol), _filled(rows)
        ax.plot(c[filled], v[filled], linestyle="none", marker="o", color=color(i),
                label=name, gid=f"points:{name}")
        ax.plot(c[~filled], v[~filled], linestyle="none", marker="o", markerfacecolor="none",
                markeredgecolor=color(i), label="_nolegend_", gid=f"points_unmet:{name}")
    fc, fv = column_numbers(front, ccol), column_numbers(front, vcol)
    ax.step(fc, fv, where="post", color="black", linewidth=1.0, alpha=0.7, zorder=1,
            label="Pareto front", gid="pareto_front")
    for (index, row), xv, yv in zip(front.iterrows(), fc, fv):
        note = ax.annotate(point_text(row, keys), (xv, yv), xytext=(6, -6),
                           textcoords="offset points", fontsize=7, va="top")
        note.set_gid(f"front_label:{format_value(row.get('point', index))}")
    if "sla_met" in summary.columns and not _filled(summary).all():
        ax.plot([], [], linestyle="none", marker="o", color="grey", label="SLA met")
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="none",
                markeredgecolor="grey", label="SLA missed")
    ax.set_xlabel(key_label(cost) + (", mean" if ccol.endswith("_mean") else ""))
    ax.set_ylabel(key_label(value) + (", mean" if vcol.endswith("_mean") else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(title=hue, fontsize=8)
    return ax


def _filled(rows: pd.DataFrame) -> np.ndarray:
    """True where a point is drawn filled: SLA met, or not judged (no column, null)."""
    if "sla_met" not in rows.columns:
        return np.ones(len(rows), dtype=bool)
    return np.array([pd.isna(v) or bool(v) for v in rows["sla_met"]], dtype=bool)


def search_probes(results: Sequence[Mapping], *, metric: Optional[str] = None, ax=None):
    """Each search's probes: the varied key's value (x) against ``metric`` (y).

    ``results``: the ``results`` list of ``search.json``; ``metric`` defaults to the first
    target key of the first result.  One colour per search (labelled by its grid); probes
    joined lightly in probing order and numbered 1, 2, ...; met probes filled, unmet
    hollow, early-stopped ones an ``x`` (drawn at least at the ``max`` bound: their
    values are those when the run stopped, and the full run was certain to exceed
    it).  The target bounds are dashed horizontal lines,
    each answer (``best``) a dotted vertical line.  A probe without the metric is not
    drawn.  Gids: ``probe_path:<s>``, ``probes_met:<s>``, ``probes_unmet:<s>``,
    ``probes_stopped:<s>``, ``best:<s>``, ``target:<op>=<bound>``.
    """
    metric, series = search_series(results, metric)
    if not any(len(s.probes) for s in series):
        raise ValueError("the searches have no probes")

    ax = new_axis(ax)
    varies = list(dict.fromkeys(s.vary for s in series))
    names = short_keys(varies)
    for i, s in enumerate(series):
        p, c = s.probes, color(i)
        answer = ("no answer" if s.best is None
                  else f"answer {names[s.vary]}={format_value(s.best)}")
        ax.plot(p["value"], p["y"], color=c, linewidth=0.8, alpha=0.5,
                label=f"{s.label} ({answer})", gid=f"probe_path:{s.label}")
        stopped = (p["status"] == "early_stopped").to_numpy()
        met = p["met"].to_numpy(dtype=bool)
        ceiling = max((b for op, b in s.bounds if op == "max"), default=None)
        if ceiling is not None and stopped.any():
            p = p.assign(y=np.where(stopped, np.fmax(p["y"].to_numpy(float), ceiling), p["y"]))
        for kind, mask, style in (
                ("met", met & ~stopped, {"marker": "o", "color": c}),
                ("unmet", ~met & ~stopped, {"marker": "o", "markerfacecolor": "none",
                                            "markeredgecolor": c}),
                ("stopped", stopped, {"marker": "x", "color": c})):
            ax.plot(p["value"][mask], p["y"][mask], linestyle="none", label="_nolegend_",
                    gid=f"probes_{kind}:{s.label}", **style)
        for order, xv, yv in zip(p["order"], p["value"], p["y"]):
            if np.isfinite(yv):
                ax.annotate(str(order), (xv, yv), xytext=(4, 4), textcoords="offset points",
                            fontsize=7, color=c)
        if s.best is not None:
            ax.axvline(s.best, linestyle=":", color=c, label="_nolegend_",
                       gid=f"best:{s.label}")
    for op, bound in dict.fromkeys(b for s in series for b in s.bounds):
        sign = "≤" if op == "max" else "≥"
        ax.axhline(bound, linestyle="--", color="red", linewidth=1.0,
                   label=f"target {metric} {sign} {bound:g}", gid=f"target:{op}={bound:g}")
    for text, style in (("met", {"color": "grey"}),
                        ("not met", {"markerfacecolor": "none", "markeredgecolor": "grey"}),
                        ("early stopped", {"marker": "x", "color": "grey"})):
        ax.plot([], [], linestyle="none", **{"marker": "o", **style}, label=text)
    ax.set_xlabel(", ".join(varies))
    ax.set_ylabel(key_label(metric))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def capacity_figure(kind: str, folder_data: Mapping, *, x: Optional[str] = None,
                    y: Optional[str] = None, hue: Optional[str] = None,
                    sla: Optional[float] = None, log_y: bool = False,
                    cost: str = "gpu_hours", value: str = "goodput_completed_requests",
                    metric: Optional[str] = None):
    """The Figure of ``kind`` (one of ``CAPACITY_KINDS``) from a loaded sweep folder.

    ``folder_data``: the dict of :func:`read_sweep_dir` (``summary``, ``sweep``,
    ``search``).  ``sweep`` needs ``x`` and ``y`` (``hue``, ``log_y`` optional; ``sla``
    defaults to the spec's SLA matching ``y``, see :func:`default_sla`); ``pareto`` uses
    ``cost``, ``value``, ``hue``; ``probes`` needs ``search`` and uses ``metric``.  The
    title is the sweep's name (``incomplete`` when the sweep did not finish).  Raises
    ``ValueError`` (one line) for an unknown kind or data that cannot give that figure.
    """
    if kind not in CAPACITY_KINDS:
        raise ValueError(f"unknown capacity figure kind {kind!r}; "
                         f"choose one of {', '.join(CAPACITY_KINDS)}")
    summary, sweep = folder_data.get("summary"), folder_data.get("sweep") or {}
    search = folder_data.get("search")
    if kind == "probes" and not search:
        raise ValueError("no search results (search.json): this folder is a sweep, "
                         "not a search")
    if kind != "probes" and summary is None:
        raise ValueError("the folder data has no summary table")
    if kind == "sweep" and (x is None or y is None):
        raise ValueError(f"the sweep plot needs x and y; varied keys: "
                         f"{', '.join(varied_keys(summary)) or 'none'}; summary keys: "
                         f"{', '.join(summary_keys(summary)) or 'none'}")

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5), constrained_layout=True)
    try:
        if kind == "sweep":
            sweep_lines(summary, x, y, hue=hue, ax=ax, log_y=log_y,
                        sla=default_sla(sweep, y) if sla is None else sla)
        elif kind == "pareto":
            pareto(summary, cost, value, hue=hue, ax=ax)
        else:
            search_probes(search["results"], metric=metric, ax=ax)
    except Exception:
        plt.close(fig)
        raise
    name = str(sweep.get("name") or "")
    if sweep.get("complete") is False:
        name = f"{name} (incomplete)".strip()
    if name:
        ax.set_title(name)
    return fig
