"""The trace readers, by workload format: ``READERS[cfg.format](cfg, engine_block_size=bs)``.

Each entry is a reader module's ``from_config`` adapter: it takes the scenario's
``WorkloadConfig`` and the engine's KV block size and returns the ``Workload`` (each
adapter's docstring says which settings its format uses).  Adding a format is one module
(its reader and adapter) and one line here; ``simmodel.config.TRACE_FORMATS`` lists the
names a scenario may give, and ``tests/test_workload_readers.py`` checks the two agree.
Synthetic workloads are not a trace format (``workload.synthetic``; see ``build``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from simmodel.workload import agentic, azure, mooncake, weka
from simmodel.workload.model import Workload

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig


class TraceReader(Protocol):
    """Reads the trace a ``WorkloadConfig`` names; ``UserError`` on a bad file."""

    def __call__(self, cfg: WorkloadConfig, *, engine_block_size: int) -> Workload: ...


READERS: dict[str, TraceReader] = {
    "mooncake": mooncake.from_config,
    "mooncake-delta": mooncake.delta_from_config,
    "agentic": agentic.from_config,
    "azure": azure.from_config,
    "weka": weka.from_config,
}
