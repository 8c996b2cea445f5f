"""Workloads: trace readers and synthetic generators produce a ``Workload`` (pure data)."""
from simmodel.workload.model import Prompt, Session, Turn, Workload

__all__ = ["Prompt", "Session", "Turn", "Workload"]
