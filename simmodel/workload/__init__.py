"""Workloads: trace readers and synthetic generators produce a ``Workload`` (pure data).

``READERS`` maps each trace format to its reader (``simmodel.workload.readers``);
``build_workload`` turns a scenario's ``WorkloadConfig`` into a ``Workload``.
"""
from simmodel.workload.agentic import read_agentic
from simmodel.workload.azure import read_azure
from simmodel.workload.build import build_workload
from simmodel.workload.model import Prompt, Session, Turn, Workload
from simmodel.workload.mooncake import read_mooncake
from simmodel.workload.readers import READERS
from simmodel.workload.synthetic import generate_synthetic
from simmodel.workload.weka import read_weka

__all__ = ["READERS", "Prompt", "Session", "Turn", "Workload",
           "build_workload", "generate_synthetic", "read_agentic", "read_azure", "read_mooncake",
           "read_weka"]
