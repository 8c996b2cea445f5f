"""The engine interface a worker process drives: the ``Scheduler`` Protocol and its data.  Pure.

A worker (``simmodel.cluster.worker``) and the disaggregated handoff
(``simmodel.cluster.disagg``) see a backend only through ``Scheduler``: they enqueue
requests, ask for a pass (``schedule`` -> ``PassPlan``), settle it at its end (``settle``
-> ``PassOutcome``),
coalesce pure-decode runs (``decode_run`` / ``commit_decode_run`` -> ``RunOutcome``), and
move prompts between workers (``reserve`` ... ``release_source``).  The engine answers; the
worker writes its pass log, publishes KV events and notifies the cluster.

Backends: ``VllmScheduler`` (engine/scheduler.py), ``TrtllmScheduler`` (engine/trtllm.py),
``SglangScheduler`` (engine/sglang.py); ``DpScheduler`` (engine/dp.py) composes ranks.
``tests/test_engine_api.py`` checks that each offers every member below.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from simmodel.engine.request import EngineRequest


@dataclass(slots=True)
class PassPlan:
    """A formed batch: ``entries`` are (request, tokens computed before, tokens granted).

    Filled by ``schedule``; the worker reads the counts for its pass log and the
    duration for the pass end, and hands the plan back to ``settle`` at that end."""

    entries: list = field(default_factory=list)
    rejected: list = field(default_factory=list)
    duration_ms: float = 0.0
    prefill_tokens: int = 0
    num_prefill: int = 0
    num_decode: int = 0
    decode_tokens: int = 0
    kv_blocks_active: int = 0
    committed_tokens: int = 0
    preempted: bool = False
    admitted: int = 0                  # requests admitted from waiting in this pass
    parts: list | None = None          # attention DP: the ranks' own plans


@dataclass(frozen=True, slots=True)
class PassOutcome:
    """What a settled pass did, at its end: the requests that ended here (completed, or
    prefilled on a prefill worker), those that emitted their first token, those refused
    at its formation, whether it preempted (retracted) a request, and, when asked for,
    the KV events ``(kind, hash)`` of the pass in order.  The tokens each request emitted
    are its entry in the plan (``PassPlan.entries``) and are recorded on the request."""

    ended: tuple
    first_tokens: tuple
    rejected: tuple
    preempted: bool
    kv_events: list | None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What ``m`` committed passes of a coalesced decode run did: the requests that
    completed, the pass-log rows of the passes (``starts``/``stops`` ms, ``num_decode``
    decoders, ``decode_tokens`` and ``kv_active`` per pass) and, when asked for, the KV
    events ``(time_ms, kind, hash)`` in order."""

    done: list
    starts: np.ndarray
    stops: np.ndarray
    num_decode: int
    decode_tokens: np.ndarray
    kv_active: np.ndarray
    kv_events: list | None


_NO_PASSES = np.empty(0)

NO_RUN = RunOutcome([], _NO_PASSES, _NO_PASSES, 0, _NO_PASSES.astype(np.int64),
                    _NO_PASSES.astype(np.int64), None)
"""The outcome of committing no pass."""


class KvGauges(Protocol):
    """The view of a rank's KV pool the worker reads (gauges and KV events)."""

    @property
    def active_blocks(self) -> int: ...
    @property
    def inactive_blocks(self) -> int: ...
    @property
    def free(self) -> int: ...
    def drain_events(self) -> list:
        """The KV events ``(kind, hash)`` since the last call, oldest first."""


class Scheduler(Protocol):
    """The batch scheduler of one worker, as its worker process and the handoff drive it.

    Attributes read from outside (counters are cumulative over the run)."""

    waiting: Sequence[EngineRequest]       # queued, in queue order
    running: Sequence[EngineRequest]       # in the running batch, in admission order
    kv: KvGauges                           # the KV pool (gauges, events)
    bs: int                                # KV block size, tokens
    num_blocks: int                        # KV blocks in the pool
    held: int                              # held sources + reserved destinations
    committed_prefill_tokens: int          # prompt tokens computed by settled passes
    preemptions: int                       # preemptions / retractions
    cache_hit_tokens: int                  # prompt tokens served by the prefix cache
    mtp_emissions: int                     # speculative decoding: emitting request-passes
    mtp_tokens: int                        # ... and the tokens they emitted

    # -- queue -------------------------------------------------------------------------
    def enqueue(self, req: EngineRequest) -> None:
        """Queue ``req`` for admission (it waits for a pass)."""

    def has_work(self) -> bool:
        """Something waits or runs (a pass can be formed)."""

    def cancel(self, req: EngineRequest) -> bool:
        """Drop a waiting or running request now, releasing its KV; called only between
        passes.  False if it is no longer here."""

    # -- one pass ----------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan:
        """Form the next pass at time ``now`` (mutates queues and KV): its entries, its
        rejections and its duration."""

    def settle(self, plan: PassPlan, end_ms: float, pass_idx: int,
               record_events: bool) -> PassOutcome:
        """Settle ``plan`` at its end ``end_ms`` (pass ``pass_idx`` of the worker): emit
        tokens, complete requests.  Returns what the pass did, with its KV events if
        ``record_events``."""

    # -- coalesced decode runs ---------------------------------------------------------
    def decode_run(self, max_passes: int = 4096) -> tuple[np.ndarray, int] | None:
        """If the batch cannot change until a request completes: (the durations of that
        run of pure-decode passes, length >= 2; the decoders' total length).  Else None.
        Mutates nothing."""

    def queue_shut(self) -> bool:
        """No waiting request can join the batch before a running one completes (so a
        decode run in flight stands when more requests arrive)."""

    def commit_decode_run(self, durations: np.ndarray, total: int, m: int, start: float,
                          pass_idx0: int, record_events: bool) -> RunOutcome:
        """Apply the first ``m`` passes of a run from ``decode_run`` (started at ``start``,
        the first being pass ``pass_idx0``; ``total`` the decoders' length at its first
        pass): KV growth, tokens, completions.  Returns what happened, with KV events if
        ``record_events``."""

    # -- disaggregated handoff ---------------------------------------------------------
    def reserve(self, req: EngineRequest) -> int | None:
        """Decode side: hold KV for ``req``'s whole prompt, reusing what is resident.
        Returns the prompt tokens to transfer, or None (nothing changed) if the pool
        cannot hold it yet."""

    def unreserve(self, req: EngineRequest) -> None:
        """Decode side: give back a reservation whose prompt will never come."""

    def activate(self, req: EngineRequest) -> int:
        """Decode side: the prompt's KV has arrived; ``req`` waits for a pass.  Returns
        the KV slots this freed (SGLang: pages the arrived prompt shares with its tree)."""

    def release_source(self, req: EngineRequest) -> None:
        """Prefill side: the transfer is over; free the held prompt KV."""

    def waiting_on_holds(self) -> bool:
        """KV is held outside the running batch (sources, reservations): an empty pass is
        not a dead end, a handoff step will change it."""
