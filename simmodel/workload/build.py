"""The one entry point from a ``WorkloadConfig`` to a ``Workload``.

A scenario names either a trace file (``trace`` + ``format``) or a ``synthetic``
generator; this module dispatches to the generator or to the format's reader in
``READERS``.  The workload is built once, before the simulation starts (house rule 5).
"""
from __future__ import annotations

import dataclasses

from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.workload.model import Workload
from simmodel.workload.readers import READERS
from simmodel.workload.synthetic import generate_synthetic


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

    Traces are read by ``READERS[cfg.format]`` (each reader's ``from_config`` says which
    settings it uses: ``trace_block_size``, ``arrival_speedup_ratio``,
    ``think_time_cap_ms``, or ``engine_block_size`` for Azure's fresh prompt blocks).
    Synthetic workloads use ``engine_block_size`` for their prompt blocks and ignore
    ``arrival_speedup_ratio`` (see ``simmodel.workload.synthetic``).
    """
    if cfg.synthetic is not None:
        return generate_synthetic(cfg.synthetic, engine_block_size=engine_block_size,
                                  streams=streams)
    reader = READERS.get(cfg.format)
    if reader is None:
        raise UserError(f"workload.format: unsupported trace format {cfg.format!r}")
    return reader(cfg, engine_block_size=engine_block_size)
