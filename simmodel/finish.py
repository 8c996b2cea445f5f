"""Turn a finished (or stopped) cluster into a ``Result``: a snapshot once, then tidy
tables and the summary from it.

``snapshot`` is the one place that reads the cluster after the run: the request records,
the turns never released, and per worker a ``WorkerRecord`` (its pass log as numpy
columns, its provisioned interval, its scheduler's counters).  ``result`` computes
everything from that snapshot (``simmodel.metrics.collect`` builds the tables, as numpy
columns that become DataFrames when read, and the ITL samples; ``simmodel.metrics.summary``
the summary), so no metric reads a live worker.
``stats_from_ms`` opens the statistics window later than 0 (a sweep's ``warmup_ms``):
requests that arrived before it stay in ``Result.requests`` but are left out of every
latency statistic, count and throughput, and throughputs are divided by the time from
the window's start to the last completion.  Cost (worker-seconds, ``gpu_hours``) always
covers the whole run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from simmodel.cluster.planner import LIFECYCLE_COLUMNS
from simmodel.config import Scenario
from simmodel.engine.kv_cache import STORED
from simmodel.metrics.collect import itl_samples, pass_durations, requests_table
from simmodel.metrics.records import WorkerRecord
from simmodel.metrics.summary import summarize
from simmodel.metrics.tables import PassesTable
from simmodel.result import Result

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """What the metrics need of a cluster after its run, as plain data."""

    requests: list                   # EngineRequests in release order
    cancelled: list                  # (turn, "cancelled") of turns a cancellation dropped
    undispatched: int                # turns still waiting to be released at the cut-off
    prefill_workers: list            # WorkerRecords of the prefill pool (disaggregated)
    workers: list                    # ... of the aggregated workers, or the decode pool
    trajectories: bool               # agentic workload: report trajectories
    lifecycle: Optional[list] = None     # the planner's worker transitions (scaling runs)
    telemetry: Optional[pd.DataFrame] = None
    failures: int = 0                    # worker failures (faults)

    @property
    def all_workers(self) -> list:
        return self.prefill_workers + self.workers


def snapshot(cluster) -> RunSnapshot:
    """Take what the metrics need of ``cluster`` (built by ``simmodel.sim.build`` and
    run, or stopped), once."""
    cancelled, undispatched = _unreleased(cluster)
    planner, telemetry = cluster.planner, cluster.telemetry
    return RunSnapshot(
        requests=list(cluster.driver.requests), cancelled=cancelled,
        undispatched=undispatched,
        prefill_workers=[worker_record(w) for w in cluster.prefill_workers],
        workers=[worker_record(w) for w in cluster.workers],
        trajectories=cluster.workload.kind == "agentic",
        lifecycle=(list(planner.lifecycle) if planner is not None
                   else list(cluster.lifecycle) if cluster.faults is not None else None),
        telemetry=None if telemetry is None else telemetry.frame(),
        failures=0 if cluster.faults is None else cluster.faults.failures)


def worker_record(w) -> WorkerRecord:
    """The ``WorkerRecord`` of worker ``w`` as it is now."""
    sched = w.sched
    return WorkerRecord(
        pool=w.pool, idx=w.idx, passes=w.passes.arrays(),
        last_end_ms=w.passes.end[-1] if len(w.passes) else None,
        created_ms=w.created_ms, removed_ms=w.removed_ms,
        committed_prefill_tokens=sched.committed_prefill_tokens,
        mtp_emissions=sched.mtp_emissions,
        mtp_tokens=sched.mtp_tokens,
        kv_events=list(w.kv_events))


def sim_end_ms(scenario: Scenario, workers, requests, undispatched: int = 0) -> float:
    """When the simulated service ends (summary key ``service_end_ms``): the cut-off if
    ``max_sim_time_ms`` left work unfinished (a request incomplete, or ``undispatched``
    turns never released), else the last thing that happened (pass end of one of the
    ``workers``' WorkerRecords, arrival or rejection).  Provisioned workers are paid for
    until then.  ``requests``: a DataFrame or a ``RequestsTable``."""
    cut = scenario.run.max_sim_time_ms
    if cut is not None and (undispatched or np.any(np.asarray(
            requests["terminal_status"] == "incomplete", dtype=bool))):
        return float(cut)
    last = 0.0
    for w in workers:
        if w.last_end_ms is not None:
            last = max(last, w.last_end_ms)
    for col in ("arrival_time_ms", "terminal_time_ms"):
        times = np.asarray(requests[col], dtype=float)
        times = times[~np.isnan(times)]
        if times.size:
            last = max(last, float(times.max()))
    return last


def provisioned_s(w, end_s: float) -> float:
    """Seconds a worker (its ``WorkerRecord``) was provisioned (starting, active or
    draining) before the end."""
    stop = end_s if w.removed_ms is None else min(end_s, w.removed_ms / 1000.0)
    return max(0.0, stop - w.created_ms / 1000.0)


def _unreleased(cluster) -> tuple[list, int]:
    """Turns the cluster never saw: ``(turn, "cancelled")`` rows for those a cancellation
    dropped (they end there: one row each in the requests table), and the count of the
    others, still waiting to be released when the run was cut (no row; summary key
    ``undispatched_requests``)."""
    dropped = cluster.driver.unreleased_cancelled
    if not dropped and len(cluster.driver.requests) == cluster.workload.num_requests:
        return [], 0                    # every turn was released (the usual case)
    released = {(r.session_id, r.turn_index) for r in cluster.driver.requests}
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
    return result(scenario, snapshot(cluster), wall_ms, stats_from_ms)


def result(scenario: Scenario, snap: RunSnapshot, wall_ms: float,
           stats_from_ms: float = 0.0, consume: bool = False) -> Result:
    """The ``Result`` of a run from its snapshot.  ``consume``: the snapshot's request
    list is emptied as the requests table is built, after the ITL samples (a long run's
    request objects are freed before the summary is computed and the files written)."""
    cl = scenario.cluster
    dp, prefill_dp = ((cl.decode.engine.dp_size, cl.prefill.engine.dp_size) if cl.disaggregated
                      else (cl.engine.dp_size, 1))
    in_window = snap.requests
    if stats_from_ms > 0:
        in_window = [r for r in snap.requests if r.arrival_ms >= stats_from_ms]
    gaps, weights = itl_samples(in_window, pass_durations(snap.workers))
    num_requests = len(in_window)
    in_window = None
    requests = requests_table(snap.requests, snap.cancelled, dp, prefill_dp, consume)
    measured = requests
    if stats_from_ms > 0:
        measured = requests.where(requests["arrival_time_ms"] >= stats_from_ms)
    end_ms = sim_end_ms(scenario, snap.all_workers, requests, snap.undispatched)
    workers = snap.all_workers
    summary = summarize(
        measured, gaps, weights,
        num_requests=num_requests,
        committed_prefill_tokens=sum(w.committed_prefill_tokens for w in workers),
        **cost(scenario, snap, end_ms / 1000.0),
        wall_time_ms=wall_ms,
        sla=scenario.sla,
        trajectories=snap.trajectories,
        window_start_ms=stats_from_ms,
    )
    summary["service_end_ms"] = end_ms
    summary["undispatched_requests"] = snap.undispatched
    if scenario.faults or scenario.workload.client_timeout_ms is not None:
        summary.update(fault_counts(requests, snap.failures))
    emissions = sum(w.mtp_emissions for w in workers)
    if emissions:
        # speculative decoding: tokens per emitting request-pass (1 + accepted drafts)
        summary["mean_accept_length"] = sum(w.mtp_tokens for w in workers) / emissions
    return Result(summary=summary, requests=requests, passes=PassesTable(workers),
                  kv_events=kv_events_frame(workers) if scenario.run.record_kv_events else None,
                  scenario=scenario, lifecycle=_lifecycle_frame(snap.lifecycle),
                  telemetry=snap.telemetry)


#: Terminal statuses, counted in the summary of a run with faults or client timeouts.
STATUSES = ("completed", "rejected", "cancelled", "timed_out", "failed", "incomplete")


def fault_counts(requests, failures: int) -> dict:
    """``<status>_requests`` for every terminal status (they add up to the requests
    table's rows), the retries sent, and the worker failures (docs/faults.md)."""
    status = np.asarray(requests["terminal_status"])
    attempts = np.asarray(requests["attempts"])
    out = {f"{s}_requests": int((status == s).sum()) for s in STATUSES}
    out["retried_requests"] = int((attempts > 1).sum())
    out["retries"] = int(np.maximum(attempts - 1, 0).sum())
    out["worker_failures"] = int(failures)
    return out


def _lifecycle_frame(lifecycle: Optional[list]) -> Optional[pd.DataFrame]:
    if lifecycle is None:
        return None
    import pandas as pd
    return pd.DataFrame(lifecycle, columns=list(LIFECYCLE_COLUMNS))


def cost(scenario: Scenario, snap: RunSnapshot, end_s: float) -> dict:
    """The summary's cost arguments: worker-seconds provisioned until ``end_s`` and GPUs
    per worker, per pool (prefill: 0 and 0 in aggregated runs)."""
    cl = scenario.cluster
    decode_ws = sum(provisioned_s(w, end_s) for w in snap.workers)
    if cl.disaggregated:
        return dict(prefill_worker_seconds=sum(provisioned_s(w, end_s)
                                               for w in snap.prefill_workers),
                    prefill_gpus_per_worker=cl.prefill.engine.gpus_per_worker,
                    decode_worker_seconds=decode_ws,
                    decode_gpus_per_worker=cl.decode.engine.gpus_per_worker)
    return dict(prefill_worker_seconds=0.0, prefill_gpus_per_worker=0,
                decode_worker_seconds=decode_ws,
                decode_gpus_per_worker=cl.engine.gpus_per_worker)


def kv_events_frame(workers) -> pd.DataFrame:
    """The recorded KV events of all ``workers`` (WorkerRecords), by time then worker."""
    import pandas as pd
    rows = [(t, w.pool, w.idx, "stored" if k == STORED else "removed", h)
            for w in workers for (t, k, h, *_) in w.kv_events]
    kv_events = pd.DataFrame(rows, columns=["time_ms", "pool", "worker", "kind", "block_hash"])
    return kv_events.sort_values(["time_ms", "worker"], kind="stable", ignore_index=True)
