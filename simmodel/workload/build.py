"""The one entry point from a ``WorkloadConfig`` to a ``Workload``.

A scenario names either a trace file (``trace`` + ``format``) or a ``synthetic``
generator; this module dispatches to the matching reader/generator.  The workload is
built once, before the simulation starts (house rule 5).
"""
from __future__ import annotations

from simmodel.config import WorkloadConfig
from simmodel.errors import UserError
from simmodel.rng import Streams
from simmodel.workload.model import Workload
from simmodel.workload.mooncake import read_mooncake
from simmodel.workload.synthetic import generate_synthetic


def build_workload(cfg: WorkloadConfig, *, engine_block_size: int, streams: Streams) -> Workload:
    """Load or generate the workload of ``cfg``.

    Traces use ``cfg.trace_block_size`` and ``cfg.arrival_speedup_ratio``; synthetic
    workloads use ``engine_block_size`` for their prompt blocks and ignore
    ``arrival_speedup_ratio`` (see ``simmodel.workload.synthetic``).
    """
    if cfg.synthetic is not None:
        return generate_synthetic(cfg.synthetic, engine_block_size=engine_block_size,
                                  streams=streams)
    if cfg.format == "mooncake":
        return read_mooncake(cfg.trace, trace_block_size=cfg.trace_block_size,
                             arrival_speedup_ratio=cfg.arrival_speedup_ratio)
    raise UserError(f"workload.format: unsupported trace format {cfg.format!r}")
