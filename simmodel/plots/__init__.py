"""Plots of a run's tables: each takes data (never runs the simulator), draws on ``ax`` or
a new axis, and returns that axis; nothing calls ``plt.show()``.  pyplot is imported only
when a plot is drawn, so importing this package sets no backend.

Latency (``latency.py``), over one or several runs:

* :func:`cdf`: the empirical CDF of TTFT, TPOT (``tpot_ms``), TTST or end-to-end latency of
  the completed requests, one step curve per run, with markers at p50/p90/p99 (the
  summary's nearest-rank values) and an optional SLA line.
* :func:`ttft_breakdown`: where TTFT goes in a disaggregated run: prefill queue, prefill,
  KV transfer (incl. waiting for a destination), decode wait, first decode pass; stacked
  mean bars per run or boxes of the distribution.
* :func:`throughput_latency`: one summary key against another (default p99 TTFT against
  output throughput), a point per run joined in order, e.g. a load sweep.

One worker over time (``timeline.py``):

* :func:`pass_timeline`: each forward pass as a bar from its start to its end, split into
  its prefill and decode token shares; gaps are idle time.
* :func:`kv_occupancy`: KV blocks active / cached / free stacked (telemetry), or blocks
  active after each pass's scheduling (passes table).
* :func:`queue_depth`: requests running and waiting at the worker and in the pool's router
  queue (telemetry).
* :func:`timeline_figure`: the three above stacked on one time axis.

:func:`figure_for` builds a whole figure by kind name (``cdf``, ``timeline``, ``breakdown``,
``throughput``) for the CLI.  The numbers behind the plots come from the pure helpers in
``data.py`` (:func:`cdf_points`, :func:`ttft_components`, :func:`pass_shares`,
:func:`telemetry_series`), which need no matplotlib.

Capacity, over one sweep folder (``simmodel sweep`` / ``simmodel search --out``;
``capacity.py``):

* :func:`sweep_lines`: a summary key's mean against a varied scenario key, one line per
  value of a second key, with its 95% confidence band and an optional SLA line.
* :func:`pareto`: cost against value (e.g. GPU-hours against goodput) for every
  configuration point, SLA met filled / missed hollow, and the Pareto front.
* :func:`search_probes`: a capacity search's probes in order, met or not, with the target
  bound and the answer.

:func:`read_sweep_dir` loads a sweep folder and :func:`capacity_figure` builds a whole
figure by kind name (``sweep``, ``pareto``, ``probes``; ``CAPACITY_KINDS``) for the CLI.
Their numbers come from the pure helpers in ``capacity_data.py`` (:func:`sweep_series`,
:func:`pareto_front`, :func:`search_series`, :func:`default_sla`).
"""
from simmodel.plots.capacity import (
    CAPACITY_KINDS,
    capacity_figure,
    pareto,
    search_probes,
    sweep_lines,
)
from simmodel.plots.capacity_data import (
    ProbeSeries,
    default_sla,
    pareto_front,
    read_sweep_dir,
    search_series,
    sweep_series,
)
from simmodel.plots.data import (
    LATENCY_METRICS,
    TTFT_COMPONENTS,
    cdf_points,
    pass_shares,
    percentile_values,
    telemetry_series,
    ttft_components,
)
from simmodel.plots.figures import FIGURE_KINDS, figure_for
from simmodel.plots.latency import cdf, throughput_latency, ttft_breakdown
from simmodel.plots.timeline import (
    kv_occupancy,
    pass_timeline,
    queue_depth,
    running_from_passes,
    timeline_figure,
)

__all__ = [
    "CAPACITY_KINDS", "FIGURE_KINDS", "LATENCY_METRICS", "TTFT_COMPONENTS", "ProbeSeries",
    "capacity_figure", "cdf", "cdf_points", "default_sla", "figure_for", "kv_occupancy",
    "pareto", "pareto_front", "pass_shares", "pass_timeline", "percentile_values",
    "queue_depth", "read_sweep_dir", "running_from_passes", "search_probes",
    "search_series", "sweep_lines", "sweep_series", "telemetry_series",
    "throughput_latency", "timeline_figure", "ttft_breakdown", "ttft_components",
]
