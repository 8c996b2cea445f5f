"""The one entry point from a ``WorkloadConfig`` to a ``Workload``.

A scenario names either a trace file (``trace`` + ``format``) or a ``synthetic``
generator; this module dispatches to the matching reader/generator.  The workload is
built once, before the simulation starts (house rule 5).
"""
from __future__ import annotations

import dataclasses

from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.workload.agentic import read_agentic
from simmodel.workload.model import Workload
from simmodel.workload.azure import read_azure
from simmodel.workload.mooncake import read_mooncake
from simmodel.workload.synthetic import generate_synthetic
from simmodel.workload.weka import read_weka


def build_workload(cfg: WorkloadConfig, *, engine_block_size: int, streams: Streams) -> Workload:
    """``_load`` the workload, then keep only the sessions whose first turn arrives by
    ``cfg.max_arrival_ms`` (after the speed-up), when set."""
    workload = _load(cfg, engine_block_size=engine_block_size, streams=streams)
    if cfg.max_arrival_ms is None:
        return workload
    kept = tuple(s for s in workload.sessions
                 if s.turns and (s.turns[0].arrival_ms or 0.0) <= cfg.max_arrival_ms)
    return dataclasses.replace(workload, sessions=kept)


def _load(cfg: WorkloadConfig, *, engine_block_size: int, streams: Streams) -> Workload:
    """Load or generate the workload of ``cfg``.

    Traces use ``cfg.trace_block_size`` (a v2 agentic trace's header ``block_size`` wins)
    and ``cfg.arrival_speedup_ratio``; ``mooncake-delta`` reads Mooncake rows as prompt
    deltas (``Workload.prompt_mode == "delta"``).  Azure traces use ``engine_block_size``
    for their fresh prompt blocks; Weka traces their own ``block_size`` and
    ``cfg.think_time_cap_ms``.  Synthetic workloads use
    ``engine_block_size`` for their prompt blocks and ignore ``arrival_speedup_ratio``
    (see ``simmodel.workload.synthetic``).
    """
    if cfg.synthetic is not None:
        return generate_synthetic(cfg.synthetic, engine_block_size=engine_block_size,
                                  streams=streams)
    if cfg.format in ("mooncake", "mooncake-delta"):
        return read_mooncake(cfg.trace, trace_block_size=cfg.trace_block_size,
                             arrival_speedup_ratio=cfg.arrival_speedup_ratio,
                             prompt_mode="delta" if cfg.format == "mooncake-delta" else "full")
    if cfg.format == "azure":
        return read_azure(cfg.trace, arrival_speedup_ratio=cfg.arrival_speedup_ratio,
                          engine_block_size=engine_block_size)
    if cfg.format == "weka":
        return read_weka(cfg.trace, arrival_speedup_ratio=cfg.arrival_speedup_ratio,
                         think_time_cap_ms=cfg.think_time_cap_ms)
    if cfg.format == "agentic":
        # a v2 trace's header block_size overrides trace_block_size
        return read_agentic(cfg.trace, trace_block_size=cfg.trace_block_size,
                            arrival_speedup_ratio=cfg.arrival_speedup_ratio)
    raise UserError(f"workload.format: unsupported trace format {cfg.format!r}")
