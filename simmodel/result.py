"""What a run returns: summary metrics and tidy tables.

Imports no pandas (the DataFrames are only annotations here), so the simulation path can
use the column lists without it.  ``Result.requests`` / ``Result.passes`` may hold a
``LazyTable`` (columns), built into its DataFrame when first read."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import pandas as pd

NAN = math.nan


@dataclass(slots=True)
class RequestRecord:
    """One request (one row of ``Result.requests``, in column order).  The defaults (NaN
    times, -1 indices, 0 counts) are the row of a turn never released; the disaggregated
    lifecycle fields keep them in aggregated runs."""

    session_id: str = ""
    turn_index: int = 0
    uid: int = -1                    # release order (0-based), unique per run; -1 unreleased
    request_id: Optional[str] = None     # the trace's request id (agentic nodes), else None
    play_id: Optional[str] = None        # agentic trajectory id, else None
    arrival_time_ms: float = NAN     # release time into the cluster (dispatch time)
    first_admit_ms: float = NAN      # first admission into a worker's running set (NaN if
                                     # never)
    first_token_ms: float = NAN
    second_token_ms: float = NAN
    last_token_ms: float = NAN
    terminal_time_ms: float = NAN    # completion / rejection time (NaN if incomplete)
    ttft_ms: float = NAN             # first_token - arrival
    ttst_ms: float = NAN             # second_token - first_token
    e2e_latency_ms: float = NAN      # last_token - arrival
    tpot_ms: float = NAN             # (last - first) / (output_length - 1), NaN if < 2 tokens:
                                     # the request's time per output token (its mean gap)
    input_length: int = 0
    requested_output_length: int = 0
    output_length: int = 0           # tokens actually emitted
    reused_input_tokens: int = 0     # prompt tokens served from the prefix cache (largest
                                     # hit over the admissions, its prompt part):
                                     # 0 <= . <= input_length
    first_admission_reused_input_tokens: int = 0     # the same at the first admission
    reused_generated_tokens: int = 0     # generated tokens a re-admission found cached (the
                                         # rest of that largest hit; the reference counts both
                                         # as reuse)
    decode_worker_idx: int = -1      # worker index (x dp + rank); -1 if never routed
    admission_count: int = 0
    readmission_count: int = 0
    terminal_status: str = "incomplete"  # completed | rejected | cancelled | timed_out |
                                         # failed | incomplete (docs/faults.md)
    attempts: int = 0                # times sent (1 + retries; 0 if never released)
    retried_ms: float = 0.0          # arrival to the release of its last attempt
    # disaggregated lifecycle (NaN / -1 in aggregated runs)
    prefill_worker_idx: int = -1
    prefill_admit_ms: float = NAN
    source_held_ms: float = NAN
    destination_reserved_ms: float = NAN
    destination_activated_ms: float = NAN
    decode_admit_ms: float = NAN
    source_released_ms: float = NAN
    transfer_ms: float = NAN
    transfer_queue_ms: float = NAN   # kv_transfer.contention: time waiting for the link(s)
    transfer_gb_s: float = NAN       # kv_transfer.contention: achieved bandwidth
    decode_reused_input_tokens: int = 0  # tokens the decode worker found cached when it
                                         # re-admitted the request after a preemption
                                         # (largest hit; the reservation's reuse is not
                                         # counted, as in the reference)


#: Columns of ``Result.requests`` (one row per request, in arrival order): the fields of
#: ``RequestRecord``, where each column is documented.
REQUEST_COLUMNS = tuple(f.name for f in fields(RequestRecord))

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


class LazyTable:
    """A table kept as columns until someone asks for it (``Result.requests``,
    ``Result.passes``): ``frame()`` builds the DataFrame, once.  Writing a result reads
    the columns directly (``simmodel.metrics.tables``), so ``simmodel run --out`` builds
    no DataFrame (nor imports pandas)."""

    def frame(self) -> pd.DataFrame:
        raise NotImplementedError


class _Table:
    """A ``Result`` field holding a DataFrame or a ``LazyTable``, read as a DataFrame
    (built on first access and kept).  ``Result.table(name)`` gives what is stored."""

    def __init__(self, default=NotImplemented):
        self.default = default

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            if self.default is NotImplemented:
                raise AttributeError(self.slot)      # a required field (dataclasses)
            return self.default
        value = obj.__dict__[self.slot]
        if isinstance(value, LazyTable):
            value = obj.__dict__[self.slot] = value.frame()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class Result:
    """The outcome of ``simmodel.run``.

    ``summary`` uses the reference's key names (see docs/metrics.md); ``requests`` and
    ``passes`` are DataFrames with ``REQUEST_COLUMNS`` / ``PASS_COLUMNS`` (built when
    first read); ``kv_events`` (time_ms, worker, kind, block_hash) only when
    ``run.record_kv_events`` is set.
    """

    summary: dict
    requests: pd.DataFrame = _Table()
    passes: pd.DataFrame = _Table()
    kv_events: Optional[pd.DataFrame] = None
    scenario: object = None
    lifecycle: Optional[pd.DataFrame] = None   # worker transitions (scaling runs)
    telemetry: Optional[pd.DataFrame] = None   # periodic samples (``telemetry.interval_ms``)
    early_stopped: bool = False                # ``run(stop_when=...)`` ended it early

    def table(self, name: str):
        """The table ``name`` as stored: a DataFrame, a ``LazyTable`` not built yet, or
        None."""
        stored = self.__dict__
        return stored["_" + name] if "_" + name in stored else getattr(self, name)
