"""Plain records the metrics are computed from, taken once when a run ends.

``simmodel.result.RequestRecord`` is one row of ``Result.requests`` (its fields, in
order, are the columns); ``request_record`` fills one from a released request (an
``EngineRequest`` and, disaggregated, its handoff record), ``unreleased_record`` from a
workload turn that never reached the cluster (the record's defaults).

``WorkerRecord`` is what the metrics need of one worker (its pass log as numpy columns,
its provisioned interval, its scheduler's counters), so no metric reads a live worker.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from simmodel.result import RequestRecord

NAN = math.nan


def request_record(r, dp_size: int = 1, prefill_dp: int = 1) -> RequestRecord:
    """The row of a released request ``r`` (an ``EngineRequest``; disaggregated, the
    decode side, whose ``handoff`` holds the prefill side and the transfer times).  With
    attention DP the worker index is reported as ``worker × dp_size + rank`` (a prefill
    worker's as ``worker × prefill_dp + rank``)."""
    turn, h = r.meta, r.handoff
    src = r if h is None else h.prefill     # disaggregated: admission and reuse at prefill
    arrival_time_ms, first_token_ms = r.arrival_ms, r.first_token_ms
    second_token_ms, last_token_ms = r.second_token_ms, r.last_token_ms
    input_length, output_length, reused = r.prompt_len, r.generated, src.reused
    # the largest hit may reach into generated tokens (a re-admission after preemption)
    reused_input_tokens = reused if reused < input_length else input_length
    admission_count = r.admissions
    readmission_count = admission_count - 1 if admission_count > 0 else 0
    if h is not None:                       # disaggregated: both pools' admissions
        pre = h.prefill.admissions
        admission_count += pre
        readmission_count += pre - 1 if pre > 0 else 0
    # positional, in field order (35 keyword arguments would cost ~5 µs a request, as
    # much as building the DataFrame); the locals carry the field names
    rec = RequestRecord(
        r.session_id, r.turn_index, r.uid, turn.request_id, turn.play_id,
        arrival_time_ms, src.first_admit_ms,
        first_token_ms, second_token_ms, last_token_ms, r.terminal_ms,
        first_token_ms - arrival_time_ms,                           # ttft_ms
        second_token_ms - first_token_ms,                           # ttst_ms
        last_token_ms - arrival_time_ms,                            # e2e_latency_ms
        (last_token_ms - first_token_ms) / (output_length - 1)      # tpot_ms
        if output_length >= 2 else NAN,
        input_length, r.requested_output, output_length,
        reused_input_tokens, src.first_reused, reused - reused_input_tokens,
        r.worker_idx * dp_size + r.dp_rank if r.worker_idx >= 0 else -1,   # decode_worker_idx
        admission_count, readmission_count,
        r.status, r.attempts, r.retried_ms)
    if h is not None:
        _lifecycle(rec, r, h, prefill_dp)
    return rec


def _lifecycle(rec: RequestRecord, r, h, dp: int) -> None:
    """The disaggregated lifecycle from the handoff record ``h`` of decode request ``r``
    (``dp``: the prefill pool's ranks per worker)."""
    p = h.prefill_worker_idx
    rec.prefill_worker_idx = p * dp + h.prefill.dp_rank if p >= 0 else p
    rec.prefill_admit_ms = h.prefill.first_admit_ms
    rec.source_held_ms = h.source_held_ms
    rec.destination_reserved_ms = h.destination_reserved_ms
    rec.destination_activated_ms = h.destination_activated_ms
    rec.decode_admit_ms = r.first_admit_ms
    rec.source_released_ms = h.source_released_ms
    rec.transfer_ms = h.transfer_ms
    rec.transfer_queue_ms = h.transfer_queue_ms
    rec.transfer_gb_s = h.transfer_gb_s
    rec.decode_reused_input_tokens = r.reused    # set by re-admissions only


def unreleased_record(turn, status: str) -> RequestRecord:
    """The row of a workload turn that never reached the cluster (``status``: cut short,
    ``incomplete``; left behind by a cancelled turn, ``cancelled``): the defaults."""
    return RequestRecord(session_id=turn.session_id, turn_index=turn.turn_index,
                         request_id=turn.request_id, play_id=turn.play_id,
                         input_length=turn.input_length,
                         requested_output_length=turn.output_length, terminal_status=status)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """What the metrics need of one worker, taken when the run ends."""

    pool: str                        # agg | prefill | decode
    idx: int                         # index within its pool
    passes: dict[str, np.ndarray]    # its pass log by column (``PassLog.arrays()``)
    last_end_ms: Optional[float] = None  # end of its last pass as the clock read (int or
                                         # float), None if it ran none
    created_ms: float = 0.0          # provisioned from (0 unless the planner added it)
    removed_ms: Optional[float] = None   # ... until (None: still provisioned at the end)
    committed_prefill_tokens: int = 0
    mtp_emissions: int = 0           # speculative decoding: emitting request-passes
    mtp_tokens: int = 0              # ... and the tokens they emitted
    kv_events: list = field(default_factory=list)   # (time_ms, kind, block_hash), if recorded

    @property
    def num_passes(self) -> int:
        return len(self.passes["end_ms"])

    @property
    def durations_ms(self) -> np.ndarray:
        """The duration of each of its passes, in pass order."""
        return self.passes["end_ms"] - self.passes["start_ms"]
