"""What a run returns: summary metrics and tidy tables."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pandas as pd

#: Columns of ``Result.requests`` (one row per request, in arrival order).
REQUEST_COLUMNS = (
    "session_id",            # str
    "turn_index",            # int
    "uid",                   # int, release order (0-based), unique per run
    "request_id",            # the trace's request id (agentic nodes), else None
    "play_id",               # agentic trajectory id, else None
    "arrival_time_ms",       # release time into the cluster (dispatch time)
    "first_admit_ms",        # first admission into a worker's running set (NaN if never)
    "first_token_ms",
    "second_token_ms",
    "last_token_ms",
    "terminal_time_ms",      # completion / rejection time (NaN if incomplete)
    "ttft_ms",               # first_token - arrival
    "ttst_ms",               # second_token - first_token
    "e2e_latency_ms",        # last_token - arrival
    "tpot_ms",               # (last - first) / (output_length - 1), NaN if < 2 tokens:
                             # the request's time per output token (its mean gap)
    "input_length",
    "requested_output_length",
    "output_length",         # tokens actually emitted
    "reused_input_tokens",   # prompt tokens served from the prefix cache (largest hit over
                             # the admissions, its prompt part): 0 <= . <= input_length
    "first_admission_reused_input_tokens",   # the same at the first admission
    "reused_generated_tokens",   # generated tokens a re-admission found cached (the rest
                                 # of that largest hit; the reference counts both as reuse)
    "decode_worker_idx",     # worker index (x dp + rank); -1 if never routed
    "admission_count",
    "readmission_count",
    "terminal_status",       # completed | rejected | cancelled | incomplete
    # disaggregated lifecycle (NaN / -1 in aggregated runs)
    "prefill_worker_idx",
    "prefill_admit_ms",
    "source_held_ms",
    "destination_reserved_ms",
    "destination_activated_ms",
    "decode_admit_ms",
    "source_released_ms",
    "transfer_ms",
    "transfer_queue_ms",     # kv_transfer.contention: time waiting for the link(s)
    "transfer_gb_s",         # kv_transfer.contention: achieved bandwidth
)

#: Columns of ``Result.passes`` (one row per forward pass).
PASS_COLUMNS = (
    "pool",                # agg | prefill | decode
    "worker",
    "start_ms",
    "end_ms",
    "prefill_tokens",      # new prompt tokens charged to the pass (t of §2.1)
    "num_prefill",         # requests with prompt tokens in the pass
    "num_decode",          # requests decoding in the pass
    "decode_tokens",       # Σ sequence lengths of the decoders (active_tokens of §2.2)
    "kv_blocks_active",    # blocks referenced by live requests after scheduling
)

#: Columns of ``Result.telemetry`` (long format: one row per sample of one metric).
#: ``worker`` is -1 for pool-level metrics.  Sampled every ``telemetry.interval_ms`` of
#: simulated time (at 0, interval, 2·interval, ... up to the end of the run).
TELEMETRY_COLUMNS = ("time_ms", "pool", "worker", "metric", "value")
#: Per-worker metrics: levels at the sample time, or counts over the interval ending there.
TELEMETRY_WORKER_METRICS = (
    "kv_blocks_active",      # blocks referenced by running requests
    "kv_blocks_cached",      # inactive blocks kept for prefix reuse (evictable)
    "kv_blocks_free",        # blocks neither active nor cached
    "running",               # requests in the running set
    "waiting",               # requests queued at the worker (incl. preempted)
    "cache_hit_tokens",      # prompt tokens served from the prefix cache in the interval
    "preemptions",           # preemptions in the interval
)
#: Pool-level metrics (``worker`` = -1).
TELEMETRY_POOL_METRICS = (
    "router_queue",          # requests held by the pool's router (no worker yet)
    "workers_starting",
    "workers_active",
    "workers_draining",
)


@dataclass
class Result:
    """The outcome of ``simmodel.run``.

    ``summary`` uses the reference's key names (see docs/metrics.md); ``requests`` and
    ``passes`` are DataFrames with ``REQUEST_COLUMNS`` / ``PASS_COLUMNS``; ``kv_events``
    (time_ms, worker, kind, block_hash) only when ``run.record_kv_events`` is set.
    """

    summary: dict
    requests: pd.DataFrame
    passes: pd.DataFrame
    kv_events: Optional[pd.DataFrame] = None
    scenario: object = None
    lifecycle: Optional[pd.DataFrame] = None   # worker transitions (scaling runs)
    telemetry: Optional[pd.DataFrame] = None   # periodic samples (``telemetry.interval_ms``)
    early_stopped: bool = False                # ``run(stop_when=...)`` ended it early
