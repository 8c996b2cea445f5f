"""Whole figures by name, for the CLI's ``plot`` command and quick looks in a notebook.

``figure_for(kind, runs)`` builds one Figure from a dict label → Result:

* ``cdf``: CDF of a per-request latency (``metric``, default ``ttft_ms``), one curve per run;
* ``timeline``: passes, KV cache and queues of one worker of the first run;
* ``breakdown``: mean TTFT components per run (disaggregated runs only);
* ``throughput``: ``output_throughput_tok_s`` against a summary key (``metric``, default
  ``p99_ttft_ms``), one point per run in order.
"""
from __future__ import annotations

from typing import Mapping, Optional

from simmodel.plots.latency import cdf, throughput_latency, ttft_breakdown
from simmodel.plots.timeline import timeline_figure

FIGURE_KINDS = ("cdf", "timeline", "breakdown", "throughput")


def figure_for(kind: str, runs: Mapping, *, metric: Optional[str] = None, worker: int = 0,
               pool: Optional[str] = None, log_x: bool = False,
               sla_ms: Optional[float] = None):
    """The Figure of ``kind`` (one of ``FIGURE_KINDS``) for ``runs`` (dict label → Result).

    ``metric``: the request column of a ``cdf`` or the y summary key of ``throughput``
    (ignored otherwise); ``worker`` / ``pool``: the worker of a ``timeline``; ``log_x`` /
    ``sla_ms``: for ``cdf``.  Raises ``ValueError`` (one line) for an unknown kind or runs
    that cannot give that figure (e.g. ``breakdown`` of an aggregated run).
    """
    if kind not in FIGURE_KINDS:
        raise ValueError(f"unknown figure kind {kind!r}; choose one of {', '.join(FIGURE_KINDS)}")
    if not runs:
        raise ValueError(f"no runs to plot for the {kind} figure")
    if kind == "timeline":
        label, first = next(iter(runs.items()))
        fig = timeline_figure(first, worker=worker, pool=pool)
        fig.suptitle(str(label))
        return fig

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
    try:
        if kind == "cdf":
            cdf(runs, metric or "ttft_ms", ax=ax, log_x=log_x, sla_ms=sla_ms)
        elif kind == "breakdown":
            ttft_breakdown(runs, ax=ax, kind="bar")
        else:
            throughput_latency(runs, y=metric or "p99_ttft_ms", ax=ax)
    except Exception:
        plt.close(fig)
        raise
    return fig
