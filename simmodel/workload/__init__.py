"""Workloads: trace readers and synthetic generators produce a ``Workload`` (pure data)."""
from simmodel.workload.agentic import read_agentic
from simmodel.workload.build import build_workload
from simmodel.workload.model import Prompt, Session, Turn, Workload
from simmodel.workload.mooncake import read_mooncake
from simmodel.workload.synthetic import generate_synthetic

__all__ = ["Prompt", "Session", "Turn", "Workload",
           "build_workload", "generate_synthetic", "read_agentic", "read_mooncake"]
