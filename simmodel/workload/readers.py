"""The trace readers, by workload format: ``READERS[cfg.format](cfg, engine_block_size=bs)``.

Each entry is a reader module's ``from_config`` adapter: it takes the scenario's
``WorkloadConfig`` and the engine's KV block size and returns the ``Workload`` (each
adapter's docstring says which settings its format uses).  Adding a format is one module
(its reader and adapter) and one line here; ``simmodel.config.TRACE_FORMATS`` lists the
names a scenario may give, and ``tests/test_workload_readers.py`` checks the two agree.
Synthetic workloads are not a trace format (``workload.synthetic``; see ``build``).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig
    from simmodel.workload.model import Workload


class TraceReader(Protocol):
    """Reads the trace a ``WorkloadConfig`` names; ``UserError`` on a bad file."""

    def __call__(self, cfg: WorkloadConfig, *, engine_block_size: int) -> Workload: ...


def _adapter(module: str, name: str = "from_config") -> TraceReader:
    """``simmodel.workload.<module>.<name>``, imported on the first read: a run loads the
    one reader its format needs (a few ms of start-up each)."""
    def read(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
        target = getattr(import_module(f"simmodel.workload.{module}"), name)
        return target(cfg, engine_block_size=engine_block_size)
    read.__qualname__ = read.__name__ = f"{module}.{name}"
    return read


READERS: dict[str, TraceReader] = {
    "mooncake": _adapter("mooncake"),
    "mooncake-delta": _adapter("mooncake", "delta_from_config"),
    "agentic": _adapter("agentic"),
    "azure": _adapter("azure"),
    "weka": _adapter("weka"),
}
