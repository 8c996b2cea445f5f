"""Workloads: trace readers and synthetic generators produce a ``Workload`` (pure data).

``READERS`` maps each trace format to its reader (``simmodel.workload.readers``);
``build_workload`` turns a scenario's ``WorkloadConfig`` into a ``Workload``.  The
``read_*`` functions are imported on first use (start-up: a run loads only its reader).
"""
from importlib import import_module

from simmodel.workload.build import build_workload
from simmodel.workload.model import Prompt, Session, Turn, Workload
from simmodel.workload.readers import READERS
from simmodel.workload.synthetic import generate_synthetic

_LAZY = {"read_agentic": "agentic", "read_azure": "azure", "read_mooncake": "mooncake",
         "read_weka": "weka"}

__all__ = ["READERS", "Prompt", "Session", "Turn", "Workload",
           "build_workload", "generate_synthetic", "read_agentic", "read_azure", "read_mooncake",
           "read_weka"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"simmodel.workload.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'simmodel.workload' has no attribute {name!r}")
