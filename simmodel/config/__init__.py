"""Frozen, validated configuration for one simulation scenario.

Every section of the scenario YAML maps to one dataclass here.  Defaults live in one
place (the field defaults), units are in the field names, and ``__post_init__`` checks
values so that a config that exists is a config that can run: each section its own
values, ``Scenario`` the rules across sections (``check_scenario``).  Nothing here reads
a file: ``simmodel.scenario`` turns YAML into these objects and reports *where* a bad
value came from (a ``ConfigError`` raised here carries the key path relative to its
section).  Nothing here imports the simulator (cluster, engine, workload, metrics).

* ``checks``     — ``ConfigError``, the per-value checks, the size limits;
* ``engine``     — ``EngineConfig`` with its ``TimingConfig`` and ``SglangConfig``;
* ``cluster``    — ``ClusterConfig``, ``PoolConfig``, ``RouterConfig``, ``KvTransferConfig``;
* ``workload``   — ``WorkloadConfig``, ``SyntheticConfig``;
* ``planner``    — ``PlannerConfig``, ``ScheduleStep``;
* ``run``        — ``SlaConfig``, ``RunConfig``, ``TelemetryConfig``;
* ``scenario``   — ``Scenario`` and ``check_scenario``;
* ``policy_ref`` — where a python planner's ``policy`` string points (nothing imported).

Engine defaults are those of the reference (``ai-dynamo-runtime==1.6.1``), see
``docs/scenario.md`` for the glossary of every key.
"""
from simmodel.config.checks import (MAX_DP_SIZE, MAX_GPU_BLOCKS, MAX_REQUEST_TOKENS,
                                    MAX_SYNTHETIC_REQUESTS, MAX_WORKERS, ConfigError)
from simmodel.config.cluster import (QUEUE_POLICIES, ROUTER_MODES, TRANSFER_TIMINGS,
                                     ClusterConfig, KvTransferConfig, PoolConfig, RouterConfig)
from simmodel.config.engine import (BACKENDS, DEFAULT_BLOCK_SIZE, PREEMPTION_MODES,
                                    SCHEDULE_POLICIES, TIMING_TYPES, EngineConfig, SglangConfig,
                                    TimingConfig)
from simmodel.config.planner import PLANNER_KINDS, PlannerConfig, ScheduleStep
from simmodel.config.run import RunConfig, SlaConfig, TelemetryConfig
from simmodel.config.scenario import Scenario, check_scenario
from simmodel.config.workload import (AGENTIC_FORMATS, TRACE_FORMATS, SyntheticConfig,
                                      WorkloadConfig)

__all__ = [
    "AGENTIC_FORMATS", "BACKENDS", "DEFAULT_BLOCK_SIZE", "MAX_DP_SIZE", "MAX_GPU_BLOCKS",
    "MAX_REQUEST_TOKENS", "MAX_SYNTHETIC_REQUESTS", "MAX_WORKERS", "PLANNER_KINDS",
    "PREEMPTION_MODES", "QUEUE_POLICIES", "ROUTER_MODES", "SCHEDULE_POLICIES", "TIMING_TYPES",
    "TRACE_FORMATS", "TRANSFER_TIMINGS",
    "ClusterConfig", "ConfigError", "EngineConfig", "KvTransferConfig", "PlannerConfig",
    "PoolConfig", "RouterConfig", "RunConfig", "Scenario", "ScheduleStep", "SglangConfig",
    "SlaConfig", "SyntheticConfig", "TelemetryConfig", "TimingConfig", "WorkloadConfig",
    "check_scenario",
]
