"""Turn a finished (or stopped) cluster into a ``Result``: tidy tables once, then the
summary.

``collect`` reads the request records and pass logs the processes appended to, builds
the DataFrames (``simmodel.metrics.collect``) and the summary (``simmodel.metrics.
summary``).  ``stats_from_ms`` opens the statistics window later than 0 (a sweep's
``warmup_ms``): requests that arrived before it stay in ``Result.requests`` but are left
out of every latency statistic, count and throughput, and throughputs are divided by
the time from the window's start to the last completion.  Cost (worker-seconds,
``gpu_hours``) always covers the whole run.
"""
from __future__ import annotations

import pandas as pd

from simmodel.cluster.planner import LIFECYCLE_COLUMNS
from simmodel.config import Scenario
from simmodel.engine.kv_cache import STORED
from simmodel.metrics.collect import itl_samples, passes_frame, requests_frame
from simmodel.metrics.summary import summarize
from simmodel.result import Result


def sim_end_ms(scenario: Scenario, cluster, requests: pd.DataFrame,
               undispatched: int = 0) -> float:
    """When the simulated service ends (summary key ``service_end_ms``): the cut-off if
    ``max_sim_time_ms`` left work unfinished (a request incomplete, or ``undispatched``
    turns never released), else the last thing that happened (pass end, arrival or
    rejection).  Provisioned workers are paid for until then."""
    cut = scenario.run.max_sim_time_ms
    if cut is not None and (undispatched or (requests.terminal_status == "incomplete").any()):
        return float(cut)
    last = 0.0
    for w in cluster.prefill_workers + cluster.workers:
        if len(w.passes):
            last = max(last, w.passes.end[-1])
    for col in ("arrival_time_ms", "terminal_time_ms"):
        m = requests[col].max()
        if m == m:                       # not NaN
            last = max(last, float(m))
    return last


def provisioned_s(w, end_s: float) -> float:
    """Seconds a worker was provisioned (starting, active or draining) before the end."""
    stop = end_s if w.removed_ms is None else min(end_s, w.removed_ms / 1000.0)
    return max(0.0, stop - w.created_ms / 1000.0)


def _unreleased(cluster) -> tuple[list, int]:
    """Turns the cluster never saw: ``(turn, "cancelled")`` rows for those a cancellation
    dropped (they end there: one row each in the requests table), and the count of the
    others, still waiting to be released when the run was cut (no row; summary key
    ``undispatched_requests``)."""
    released = {(r.session_id, r.turn_index) for r in cluster.driver.requests}
    dropped = cluster.driver.unreleased_cancelled
    cancelled, waiting = [], 0
    for s in cluster.workload.sessions:
        for t in s.turns:
            key = (t.session_id, t.turn_index)
            if key in released:
                continue
            if key in dropped:
                cancelled.append((t, "cancelled"))
            else:
                waiting += 1
    return cancelled, waiting


def collect(scenario: Scenario, cluster, wall_ms: float, stats_from_ms: float = 0.0) -> Result:
    """The ``Result`` of ``cluster`` (built by ``simmodel.sim.build`` and run)."""
    reqs = cluster.driver.requests
    cancelled, undispatched = _unreleased(cluster)
    dp = 1 if scenario.cluster.disaggregated else scenario.cluster.engine.dp_size
    requests = requests_frame(reqs, cancelled, dp)
    all_workers = cluster.prefill_workers + cluster.workers
    passes = passes_frame(all_workers)
    in_window = reqs
    if stats_from_ms > 0:
        in_window = [r for r in reqs if r.arrival_ms >= stats_from_ms]
    gaps, weights = itl_samples(in_window, cluster.workers)
    end_ms = sim_end_ms(scenario, cluster, requests, undispatched)
    end_s = end_ms / 1000.0
    cl = scenario.cluster
    if cl.disaggregated:
        prefill_ws = sum(provisioned_s(w, end_s) for w in cluster.prefill_workers)
        prefill_gpus = cl.prefill.engine.gpus_per_worker
        decode_ws = sum(provisioned_s(w, end_s) for w in cluster.workers)
        decode_gpus = cl.decode.engine.gpus_per_worker
    else:
        prefill_ws, prefill_gpus = 0.0, 0
        decode_ws = sum(provisioned_s(w, end_s) for w in cluster.workers)
        decode_gpus = cl.engine.gpus_per_worker
    measured = requests
    if stats_from_ms > 0:
        measured = requests[requests["arrival_time_ms"] >= stats_from_ms]
    summary = summarize(
        measured, gaps, weights,
        num_requests=len(in_window),
        committed_prefill_tokens=sum(w.sched.committed_prefill_tokens for w in all_workers),
        decode_worker_seconds=decode_ws,
        prefill_worker_seconds=prefill_ws,
        decode_gpus_per_worker=decode_gpus,
        prefill_gpus_per_worker=prefill_gpus,
        wall_time_ms=wall_ms,
        sla=scenario.sla,
        trajectories=cluster.workload.kind == "agentic",
        window_start_ms=stats_from_ms,
    )
    summary["service_end_ms"] = end_ms
    summary["undispatched_requests"] = undispatched
    emissions = sum(getattr(w.sched, "mtp_emissions", 0) for w in all_workers)
    if emissions:
        # speculative decoding: tokens per emitting request-pass (1 + accepted drafts)
        summary["mean_accept_length"] = (sum(w.sched.mtp_tokens for w in all_workers)
                                         / emissions)
    kv_events = None
    if scenario.run.record_kv_events:
        rows = [(t, w.pool, w.idx, "stored" if k == STORED else "removed", h)
                for w in cluster.prefill_workers + cluster.workers for (t, k, h) in w.kv_events]
        kv_events = pd.DataFrame(rows, columns=["time_ms", "pool", "worker", "kind", "block_hash"])
        kv_events = kv_events.sort_values(["time_ms", "worker"], kind="stable", ignore_index=True)
    lifecycle = None
    if cluster.planner is not None:
        lifecycle = pd.DataFrame(cluster.planner.lifecycle, columns=list(LIFECYCLE_COLUMNS))
    telemetry = cluster.telemetry.frame() if cluster.telemetry is not None else None
    return Result(summary=summary, requests=requests, passes=passes, kv_events=kv_events,
                  scenario=scenario, lifecycle=lifecycle, telemetry=telemetry)
