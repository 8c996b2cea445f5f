"""The scheduler of one worker rank for an engine config (``engine.backend``).  Pure.

* ``vllm``: ``simmodel.engine.scheduler.VllmScheduler`` (reference §3.2);
* ``trtllm``: ``simmodel.engine.trtllm.TrtllmScheduler`` (§3.5: guaranteed no evict);
* ``sglang``: ``simmodel.engine.sglang.SglangScheduler`` (§3.4: prefill first, radix cache).

Every scheduler offers the interface the worker process drives, declared by
``simmodel.engine.api.Scheduler``.
"""
from __future__ import annotations

from simmodel.config import EngineConfig
from simmodel.engine.role import AGGREGATED
from simmodel.engine.timing import TimingModel


def make_scheduler(engine: EngineConfig, timing: TimingModel, *, record_events: bool = False,
                   role: str = AGGREGATED.name, worker: int = 0):
    """Worker ``worker``'s scheduler: ``dp_size`` rank schedulers in lock-step when > 1.
    With speculative decoding each rank samples its drafts from its own generator, seeded
    by ``aic_mtp_seed`` + the worker index (and the rank)."""
    if engine.dp_size > 1:
        from simmodel.engine.dp import DpScheduler
        return DpScheduler([_rank_scheduler(engine, timing, record_events, role, worker, rank)
                            for rank in range(engine.dp_size)],
                           prefill_schedule_interval=engine.prefill_schedule_interval)
    return _rank_scheduler(engine, timing, record_events, role, worker, 0)


def _rank_scheduler(engine: EngineConfig, timing: TimingModel, record_events: bool,
                    role: str, worker: int, rank: int):
    backend = engine.backend
    rng = None
    if engine.aic_nextn is not None:
        import numpy as np
        rng = np.random.default_rng([engine.aic_mtp_seed + worker, rank])
    if backend == "vllm":
        from simmodel.engine.scheduler import VllmScheduler
        return VllmScheduler(engine, timing, record_events=record_events, role=role,
                             mtp_rng=rng)
    if backend == "trtllm":
        from simmodel.engine.trtllm import TrtllmScheduler
        return TrtllmScheduler(engine, timing, record_events=record_events, role=role,
                               mtp_rng=rng)
    if backend == "sglang":
        from simmodel.engine.sglang import SglangScheduler
        return SglangScheduler(engine, timing, record_events=record_events, role=role)
    raise ValueError(f"unknown backend {backend!r}")
