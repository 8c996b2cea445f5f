"""``Scenario``: a whole scenario, and the rules that tie its sections together.

Each section checks its own values; ``check_scenario`` then checks what only holds (or
fails) across sections and pools.  Both run whenever a ``Scenario`` is made (loaded from
YAML or built in Python), so a run is never refused for a reason its config alone shows;
what needs the workload itself (requests that can never fit, sizes of trace rows) is
checked once the workload is built (``simmodel.sim``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from simmodel.config.checks import ConfigError
from simmodel.config.cluster import ClusterConfig
from simmodel.config.faults import FaultConfig, RetryConfig, check_faults
from simmodel.config.planner import PlannerConfig
from simmodel.config.run import RunConfig, SlaConfig, TelemetryConfig
from simmodel.config.workload import WorkloadConfig


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole scenario: what to run (workload), on what (cluster), judged how (sla)."""

    workload: WorkloadConfig
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    sla: SlaConfig = field(default_factory=SlaConfig)
    run: RunConfig = field(default_factory=RunConfig)
    planner: Optional[PlannerConfig] = None
    telemetry: Optional[TelemetryConfig] = None
    faults: tuple[FaultConfig, ...] = ()
    retry: RetryConfig = field(default_factory=RetryConfig)
    name: str = "scenario"
    seed: int = 0
    source: Optional[str] = None       # the YAML file this came from, for messages

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", f"must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("name", f"must be a non-empty string, got {self.name!r}")
        if not isinstance(self.workload, WorkloadConfig):
            raise ConfigError("workload", "must be a mapping")
        if not isinstance(self.cluster, ClusterConfig):
            raise ConfigError("cluster", "must be a mapping")
        if not isinstance(self.retry, RetryConfig):
            raise ConfigError("retry", "must be a mapping")
        check_scenario(self.workload, self.cluster)
        cl = self.cluster
        sizes = ({"prefill": cl.prefill.workers, "decode": cl.decode.workers}
                 if cl.disaggregated else {"decode": cl.workers})
        check_faults(tuple(self.faults), cl.disaggregated, sizes)


def uses_aic(scenario: "Scenario") -> bool:
    """Whether a pool of ``scenario`` costs its passes with the aic timing model."""
    cl = scenario.cluster
    engines = (cl.prefill.engine, cl.decode.engine) if cl.disaggregated else (cl.engine,)
    return any(e.aic for e in engines)


def check_scenario(workload: WorkloadConfig, cluster: ClusterConfig) -> None:
    """Raise a ``ConfigError`` (keyed from the scenario's top level) for a combination of
    sections the simulator does not support, first problem first."""
    cl = cluster
    if cl.disaggregated and (cl.prefill.engine.effective_block_size
                             != cl.decode.engine.effective_block_size):
        raise ConfigError("cluster.decode.engine.block_size", "must equal the prefill pool's "
                          "(the KV transfer moves whole blocks)")
    if workload.concurrency is not None and workload.agentic:
        raise ConfigError("workload.concurrency", f"not supported for format "
                          f"{workload.format!r} (agentic workloads)")
