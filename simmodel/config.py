"""Frozen, validated configuration for one simulation scenario.

Every section of the scenario YAML maps to one dataclass here.  Defaults live in one
place (the field defaults), units are in the field names, and ``__post_init__`` checks
values so that a config that exists is a config that can run.  Nothing here does I/O:
``simmodel.scenario`` turns YAML into these objects and reports *where* a bad value
came from (a ``ConfigError`` raised here carries the key path relative to its section).

Engine defaults are those of the reference (``ai-dynamo-runtime==1.6.1``), see
``docs/scenario.md`` for the glossary of every key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

BACKENDS = ("vllm", "sglang", "trtllm")
DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}
PREEMPTION_MODES = ("lifo", "fifo")
TIMING_TYPES = ("polynomial", "fixed", "table")
SCHEDULE_POLICIES = ("fifo", "lpm")
ROUTER_MODES = ("round_robin", "kv")
QUEUE_POLICIES = ("fcfs", "lcfs", "wspt")
TRANSFER_TIMINGS = ("full_prompt", "destination_missing")
TRACE_FORMATS = ("mooncake", "mooncake-delta", "agentic", "azure", "weka")
PLANNER_KINDS = ("schedule", "load", "python")
# Size limits, checked before anything is built (docs/model.md, "Size limits"): far
# beyond any real deployment, small enough that a run of that size can be held.
MAX_WORKERS = 100_000            # scheduler ranks per pool (workers x dp_size)
MAX_DP_SIZE = 1_024
MAX_GPU_BLOCKS = 1_000_000_000   # KV blocks per rank
MAX_REQUEST_TOKENS = 10_000_000  # prompt or output tokens of one request
MAX_SYNTHETIC_REQUESTS = 10_000_000


class ConfigError(ValueError):
    """A user mistake in a scenario: ``key`` is the dotted path of the offending value."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

    def under(self, prefix: str) -> "ConfigError":
        """The same error with its key path prefixed by the enclosing section."""
        return ConfigError(f"{prefix}.{self.key}" if self.key else prefix, self.message)


def _positive_int(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, f"must be a positive integer, got {value!r}")


def _non_negative_int(key: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, f"must be a non-negative integer, got {value!r}")


def _positive_number(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(key, f"must be a positive number, got {value!r}")


def _non_negative_number(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigError(key, f"must be a non-negative number, got {value!r}")


def _choice(key: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(key, f"must be one of {', '.join(choices)}; got {value!r}")


def _at_most(key: str, value, limit: int, what: str) -> None:
    if value is not None and value > limit:
        raise ConfigError(key, f"{value!r} is more than the limit of {limit:,} {what}")


def _bool(key: str, value) -> None:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")


@dataclass(frozen=True, slots=True)
class TimingConfig:
    """``engine.timing_model``: the per-pass cost model (see ``simmodel.engine.timing``).

    ``type: table`` reads a measured profile from ``path`` (CSV or the reference's NPZ
    layout, see ``simmodel.engine.timing_table``); outside the measured range it fails
    unless ``extrapolate: true``."""

    type: str = "polynomial"
    prefill_ms: Optional[float] = None   # fixed model: duration of a pass with prefill work
    decode_ms: Optional[float] = None    # fixed model: duration added when requests decode
    path: Optional[str] = None           # table model: the profile file
    extrapolate: bool = False            # table model: extend linearly past the measurements

    def __post_init__(self):
        _choice("type", self.type, TIMING_TYPES)
        if self.type == "fixed":
            for key in ("prefill_ms", "decode_ms"):
                _non_negative_number(key, getattr(self, key))
        elif self.prefill_ms is not None or self.decode_ms is not None:
            raise ConfigError("prefill_ms", "only valid with type: fixed")
        if self.type == "table":
            if not isinstance(self.path, str) or not self.path:
                raise ConfigError("path", "a table timing model needs the path of its profile")
        elif self.path is not None:
            raise ConfigError("path", "only valid with type: table")
        _bool("extrapolate", self.extrapolate)


@dataclass(frozen=True, slots=True)
class SglangConfig:
    """``engine.sglang``: the SGLang scheduler's own knobs (reference §1, §3.4)."""

    schedule_policy: str = "fifo"
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0

    def __post_init__(self):
        _choice("schedule_policy", self.schedule_policy, SCHEDULE_POLICIES)
        for key in ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens"):
            _positive_int(key, getattr(self, key))
        _positive_number("schedule_conservativeness", self.schedule_conservativeness)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """``cluster.engine``: one worker's engine (the reference's canonical ``engine`` keys,
    plus its top-level ``dp_size``, ``tensor_parallel_size`` and ``startup_time``)."""

    backend: str = "vllm"
    block_size: Optional[int] = None          # None -> the backend's default (vllm 64)
    num_gpu_blocks: int = 16384
    max_model_len: Optional[int] = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    preemption_mode: str = "lifo"
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    timing_model: TimingConfig = field(default_factory=TimingConfig)
    dp_size: int = 1
    tensor_parallel_size: int = 1
    startup_time: Optional[float] = None      # seconds (a worker added by scaling)
    prefill_schedule_interval: int = 1        # attention DP: prefill only every k steps
    prefill_decode_interval: int = 0          # SGLang: decode rounds forced after a prefill
    aic_nextn: Optional[int] = None           # speculative decoding: draft length (1-5)
    aic_nextn_accept_rates: Optional[tuple[float, ...]] = None   # default 0.85, 0.30
    aic_mtp_seed: int = 42                    # per-worker seed (+ worker index)
    sglang: SglangConfig = field(default_factory=SglangConfig)

    def __post_init__(self):
        _choice("backend", self.backend, BACKENDS)
        _positive_int("block_size", self.block_size, allow_none=True)
        _positive_int("num_gpu_blocks", self.num_gpu_blocks)
        _at_most("num_gpu_blocks", self.num_gpu_blocks, MAX_GPU_BLOCKS, "KV blocks per rank")
        _positive_int("max_model_len", self.max_model_len, allow_none=True)
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        _bool("enable_prefix_caching", self.enable_prefix_caching)
        _bool("enable_chunked_prefill", self.enable_chunked_prefill)
        _choice("preemption_mode", self.preemption_mode, PREEMPTION_MODES)
        # The reference leaves durations unchanged for a ratio of 0 in offline replay.
        _non_negative_number("speedup_ratio", self.speedup_ratio)
        _non_negative_number("decode_speedup_ratio", self.decode_speedup_ratio)
        if not isinstance(self.timing_model, TimingConfig):
            raise ConfigError("timing_model", "must be a mapping")
        _positive_int("dp_size", self.dp_size)
        _at_most("dp_size", self.dp_size, MAX_DP_SIZE, "ranks per worker")
        _positive_int("tensor_parallel_size", self.tensor_parallel_size)
        _non_negative_number("startup_time", self.startup_time, allow_none=True)
        _positive_int("prefill_schedule_interval", self.prefill_schedule_interval)
        _non_negative_int("prefill_decode_interval", self.prefill_decode_interval)
        if self.aic_nextn is not None:
            _positive_int("aic_nextn", self.aic_nextn)
            if self.aic_nextn > 5:
                raise ConfigError("aic_nextn", f"must be between 1 and 5, got {self.aic_nextn!r}")
        if self.aic_nextn_accept_rates is not None:
            if self.aic_nextn is None:
                raise ConfigError("aic_nextn_accept_rates", "only valid with aic_nextn")
            for r in self.aic_nextn_accept_rates:
                if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1:
                    raise ConfigError("aic_nextn_accept_rates",
                                      f"rates must be probabilities in [0, 1], got {r!r}")
        _non_negative_int("aic_mtp_seed", self.aic_mtp_seed)
        if not isinstance(self.sglang, SglangConfig):
            raise ConfigError("sglang", "must be a mapping")
        if self.backend == "sglang" and self.sglang.chunked_prefill_size % self.effective_block_size:
            raise ConfigError("sglang.chunked_prefill_size",
                              f"must be a multiple of block_size ({self.effective_block_size}), "
                              "as the reference requires")

    @property
    def accept_rates(self) -> tuple[float, ...]:
        """The conditional draft acceptance rates, padded with zeros to ``aic_nextn``."""
        if self.aic_nextn is None:
            return ()
        rates = self.aic_nextn_accept_rates or (0.85, 0.30)
        return tuple(float(r) for r in rates[: self.aic_nextn]) + (0.0,) * max(
            0, self.aic_nextn - len(rates))

    @property
    def effective_block_size(self) -> int:
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE[self.backend]

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_gpu_blocks * self.effective_block_size

    @property
    def gpus_per_worker(self) -> int:
        return self.tensor_parallel_size * self.dp_size


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """``cluster.router``: ``round_robin`` or ``kv`` (KV-cache-aware, reference §5.2).

    The kv keys mirror the reference's ``KvRouterConfig`` names and defaults.
    """

    mode: str = "round_robin"
    overlap_score_credit: float = 1.0
    overlap_score_credit_decay: float = 0.0
    prefill_load_scale: float = 1.0
    decode_active_request_weight: float = 0.0
    router_temperature: float = 0.0
    router_track_active_blocks: bool = True
    router_track_prefill_tokens: bool = True
    router_assume_kv_reuse: bool = True
    router_queue_threshold: Optional[float] = None
    router_queue_policy: str = "fcfs"
    kv_event_lag_ms: Optional[float] = None

    def __post_init__(self):
        _choice("mode", self.mode, ROUTER_MODES)
        for key in ("overlap_score_credit", "overlap_score_credit_decay", "prefill_load_scale",
                    "decode_active_request_weight", "router_temperature"):
            _non_negative_number(key, getattr(self, key))
        for key in ("router_track_active_blocks", "router_track_prefill_tokens",
                    "router_assume_kv_reuse"):
            _bool(key, getattr(self, key))
        _non_negative_number("router_queue_threshold", self.router_queue_threshold, allow_none=True)
        _choice("router_queue_policy", self.router_queue_policy, QUEUE_POLICIES)
        _non_negative_number("kv_event_lag_ms", self.kv_event_lag_ms, allow_none=True)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """``cluster.prefill`` / ``cluster.decode``: one pool of a disaggregated cluster."""

    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self):
        _check_workers(self.workers, self.engine)


def _check_workers(workers, engine) -> None:
    """A pool of ``workers`` (positive), at most ``MAX_WORKERS`` scheduler ranks."""
    _positive_int("workers", workers)
    ranks = workers * engine.dp_size if isinstance(engine, EngineConfig) else workers
    _at_most("workers", ranks, MAX_WORKERS,
             "scheduler ranks per pool (workers x engine.dp_size)")


@dataclass(frozen=True, slots=True)
class KvTransferConfig:
    """``cluster.kv_transfer``: how long moving a prompt's KV from a prefill worker to a
    decode worker takes: ``tokens x bytes_per_token / (bandwidth_gb_s x 1e9)`` seconds,
    0 when either size is unset (the reference's default).  ``timing``: ``full_prompt``
    charges the whole prompt, ``destination_missing`` only the blocks the decode worker
    does not already hold."""

    bandwidth_gb_s: Optional[float] = None
    bytes_per_token: Optional[int] = None
    timing: str = "full_prompt"
    contention: bool = False           # beyond the reference: shared links (cluster.kv_link)
    policy: str = "fair"               # contention: fair sharing or fifo per link
    decode_links: bool = False         # contention: decode workers' NICs are links too

    def __post_init__(self):
        _positive_number("bandwidth_gb_s", self.bandwidth_gb_s, allow_none=True)
        _positive_int("bytes_per_token", self.bytes_per_token, allow_none=True)
        _choice("timing", self.timing, TRANSFER_TIMINGS)
        _bool("contention", self.contention)
        _choice("policy", self.policy, ("fair", "fifo"))
        _bool("decode_links", self.decode_links)
        if self.contention and (self.bandwidth_gb_s is None or self.bytes_per_token is None):
            raise ConfigError("contention", "needs bandwidth_gb_s and bytes_per_token")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """``cluster``: aggregated workers behind one router, or, when ``prefill`` and
    ``decode`` pools are given, a disaggregated cluster (``workers``/``engine`` unused)."""

    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    prefill: Optional[PoolConfig] = None
    decode: Optional[PoolConfig] = None
    kv_transfer: KvTransferConfig = field(default_factory=KvTransferConfig)

    def __post_init__(self):
        _check_workers(self.workers, self.engine)
        if (self.prefill is None) != (self.decode is None):
            raise ConfigError("prefill" if self.prefill is None else "decode",
                              "give both prefill and decode pools (or neither)")
        if self.prefill is not None:
            for key, pool in (("prefill", self.prefill), ("decode", self.decode)):
                if pool.engine.backend == "trtllm":
                    raise ConfigError(f"{key}.engine.backend",
                                      "trtllm is not supported in disaggregated mode (as in "
                                      "the reference); use vllm or sglang pools")
            if self.prefill.engine.backend != self.decode.engine.backend:
                raise ConfigError("decode.engine.backend",
                                  "both pools must use the same backend")

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None


@dataclass(frozen=True, slots=True)
class SyntheticConfig:
    """``workload.synthetic``: fixed-length requests with generated arrivals (§7.5).

    Exactly one of ``request_rate`` (Poisson, seeded by the scenario seed's ``arrivals``
    stream) and ``arrival_interval_ms`` (constant gaps, first arrival at 0) is required.
    """

    requests: int
    input_tokens: int
    output_tokens: int
    request_rate: Optional[float] = None        # requests per second
    arrival_interval_ms: Optional[float] = None
    shared_prefix_ratio: float = 0.0
    num_prefix_groups: int = 0

    def __post_init__(self):
        _positive_int("requests", self.requests)
        _at_most("requests", self.requests, MAX_SYNTHETIC_REQUESTS, "requests")
        for key in ("input_tokens", "output_tokens"):
            _positive_int(key, getattr(self, key))
            _at_most(key, getattr(self, key), MAX_REQUEST_TOKENS, "tokens per request")
        if (self.request_rate is None) == (self.arrival_interval_ms is None):
            raise ConfigError("request_rate",
                              "give exactly one of request_rate and arrival_interval_ms")
        _positive_number("request_rate", self.request_rate, allow_none=True)
        _non_negative_number("arrival_interval_ms", self.arrival_interval_ms, allow_none=True)
        _non_negative_number("shared_prefix_ratio", self.shared_prefix_ratio)
        if self.shared_prefix_ratio > 1:
            raise ConfigError("shared_prefix_ratio", f"must be in [0, 1], got {self.shared_prefix_ratio!r}")
        _non_negative_int("num_prefix_groups", self.num_prefix_groups)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """``workload``: a trace file (``trace`` + ``format``) or a ``synthetic`` generator."""

    trace: Optional[str] = None                 # absolute path once loaded from YAML
    format: str = "mooncake"
    trace_block_size: int = 512
    arrival_speedup_ratio: float = 1.0
    synthetic: Optional[SyntheticConfig] = None
    concurrency: Optional[int] = None           # closed loop: at most this many sessions
    think_time_cap_ms: Optional[float] = None   # weka: cap on a request's think time
    max_arrival_ms: Optional[float] = None      # replay only sessions starting by then

    def __post_init__(self):
        if (self.trace is None) == (self.synthetic is None):
            raise ConfigError("trace", "give exactly one of trace and synthetic")
        _choice("format", self.format, TRACE_FORMATS)
        _positive_int("trace_block_size", self.trace_block_size)
        _positive_number("arrival_speedup_ratio", self.arrival_speedup_ratio)
        _positive_int("concurrency", self.concurrency, allow_none=True)
        _non_negative_number("think_time_cap_ms", self.think_time_cap_ms, allow_none=True)
        _non_negative_number("max_arrival_ms", self.max_arrival_ms, allow_none=True)
        if self.max_arrival_ms is not None:
            if self.format in ("agentic", "weka") and self.trace is not None:
                raise ConfigError("max_arrival_ms", "not supported for agentic workloads "
                                  "(dropping nodes would break their dependencies)")
            if self.concurrency is not None:
                raise ConfigError("max_arrival_ms", "not with concurrency (a closed loop "
                                  "ignores arrival times)")


@dataclass(frozen=True, slots=True)
class SlaConfig:
    """``sla``: thresholds for goodput (a request is good if it meets every one set).

    ``e2e_ms`` cannot be combined with the other two (as in the reference)."""

    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None
    e2e_ms: Optional[float] = None

    def __post_init__(self):
        for key in ("ttft_ms", "itl_ms", "e2e_ms"):
            _positive_number(key, getattr(self, key), allow_none=True)
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise ConfigError("e2e_ms", "cannot be combined with ttft_ms or itl_ms")

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.itl_ms, self.e2e_ms))


@dataclass(frozen=True, slots=True)
class RunConfig:
    """``run``: how long to simulate and what to record."""

    max_sim_time_ms: Optional[float] = None
    record_kv_events: bool = False     # keep every Stored/Removed KV event (result.kv_events)
    coalesce_decode: bool = True       # cover runs of pure-decode passes with one event
                                       # (same results; off only to cross-check)

    def __post_init__(self):
        _positive_number("max_sim_time_ms", self.max_sim_time_ms, allow_none=True)
        _bool("record_kv_events", self.record_kv_events)
        _bool("coalesce_decode", self.coalesce_decode)


@dataclass(frozen=True, slots=True)
class ScheduleStep:
    """One step of a ``schedule`` planner: from ``at_ms`` on, these worker counts
    (``decode`` is the worker count of an aggregated cluster; unset: unchanged)."""

    at_ms: float
    decode: Optional[int] = None
    prefill: Optional[int] = None

    def __post_init__(self):
        _non_negative_number("at_ms", self.at_ms)
        for key in ("decode", "prefill"):
            value = getattr(self, key)
            if value is not None:
                _non_negative_int(key, value)
        if self.decode is None and self.prefill is None:
            raise ConfigError("decode", "a step needs decode and/or prefill")


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """``planner``: scale workers in simulated time (see ``simmodel.cluster.policies``).

    * ``kind: schedule`` — ``steps``: target counts from given times on;
    * ``kind: load`` — every ``interval_ms``, scale the decode pool (the only pool of an
      aggregated cluster) up when its KV usage exceeds ``kv_usage_high`` or the window's
      mean ITL exceeds ``itl_ms``, down when usage is below ``kv_usage_low`` and ITL well
      under target; scale prefill (aggregated: the same pool) up when queued prompt tokens
      per worker exceed ``queued_prefill_tokens`` or mean TTFT exceeds ``ttft_ms``; counts
      within ``min_*``/``max_*``, by ``step`` workers, at most one change per pool every
      ``cooldown_ms``.  ``ttft_ms``/``itl_ms`` default to the scenario's ``sla``;
    * ``kind: python`` — ``policy: "file.py:attribute"`` or ``"module:attribute"``, a
      policy object or a zero-argument factory of one, with ``initial_tick_ms()`` and
      ``on_tick(snapshot)``, from a ``.py`` file in the scenario's folder or below it
      (an installed module only on opt-in); checked and run by
      ``simmodel.cluster.policies`` when the run starts, never here.

    Ticks (``interval_ms``, schedule steps) are at least ``MIN_INTERVAL_MS`` apart.
    """

    MIN_INTERVAL_MS = 1.0       # not a field: the smallest tick / sample interval

    kind: str
    steps: tuple[ScheduleStep, ...] = ()
    policy: Optional[str] = None
    interval_ms: float = 1000.0
    min_decode: int = 1
    max_decode: int = 8
    min_prefill: int = 1
    max_prefill: int = 8
    step: int = 1
    cooldown_ms: float = 0.0
    kv_usage_high: float = 0.8
    kv_usage_low: float = 0.3
    queued_prefill_tokens: Optional[float] = None
    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None
    base_dir: Optional[str] = None       # the scenario's folder (set by the loader)

    def __post_init__(self):
        _choice("kind", self.kind, PLANNER_KINDS)
        if self.kind == "schedule":
            if not self.steps:
                raise ConfigError("steps", "a schedule planner needs at least one step")
            times = [s.at_ms for s in self.steps]
            if times != sorted(times) or len(set(times)) != len(times):
                raise ConfigError("steps", "at_ms must be strictly increasing")
            if any(b - a < self.MIN_INTERVAL_MS for a, b in zip(times, times[1:])):
                raise ConfigError("steps", f"at_ms must be at least "
                                           f"{self.MIN_INTERVAL_MS:g} ms apart")
        elif self.steps:
            raise ConfigError("steps", "only valid with kind: schedule")
        if self.kind == "python":
            if not isinstance(self.policy, str) or self.policy.count(":") != 1 \
                    or not all(self.policy.split(":")):
                raise ConfigError("policy", "must be 'file.py:attribute' or "
                                            f"'module:attribute', got {self.policy!r}")
        elif self.policy is not None:
            raise ConfigError("policy", "only valid with kind: python")
        self.check_interval("interval_ms", self.interval_ms)
        for key in ("min_decode", "min_prefill"):
            _non_negative_int(key, getattr(self, key))
        for key in ("max_decode", "max_prefill", "step"):
            _positive_int(key, getattr(self, key))
        if self.min_decode > self.max_decode:
            raise ConfigError("min_decode", "must not exceed max_decode")
        if self.min_prefill > self.max_prefill:
            raise ConfigError("min_prefill", "must not exceed max_prefill")
        _non_negative_number("cooldown_ms", self.cooldown_ms)
        for key in ("kv_usage_high", "kv_usage_low"):
            v = getattr(self, key)
            _non_negative_number(key, v)
            if v > 1:
                raise ConfigError(key, f"must be a fraction in [0, 1], got {v!r}")
        if self.kv_usage_low >= self.kv_usage_high:
            raise ConfigError("kv_usage_low", "must be below kv_usage_high")
        for key in ("queued_prefill_tokens", "ttft_ms", "itl_ms"):
            _positive_number(key, getattr(self, key), allow_none=True)

    @staticmethod
    def check_interval(key: str, value) -> None:
        """A tick or sample interval: positive and at least ``MIN_INTERVAL_MS`` (a
        smaller one would take practically forever to simulate)."""
        _positive_number(key, value)
        if value < PlannerConfig.MIN_INTERVAL_MS:
            raise ConfigError(key, f"must be at least {PlannerConfig.MIN_INTERVAL_MS:g} ms "
                                   f"(the minimum interval), got {value!r}")


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    """``telemetry``: sample per-worker and per-pool levels every ``interval_ms`` of
    simulated time (at least ``PlannerConfig.MIN_INTERVAL_MS``) into ``Result.telemetry``
    (``telemetry.parquet``)."""

    interval_ms: float = 1000.0

    def __post_init__(self):
        PlannerConfig.check_interval("interval_ms", self.interval_ms)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole scenario: what to run (workload), on what (cluster), judged how (sla)."""

    workload: WorkloadConfig
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    sla: SlaConfig = field(default_factory=SlaConfig)
    run: RunConfig = field(default_factory=RunConfig)
    planner: Optional[PlannerConfig] = None
    telemetry: Optional[TelemetryConfig] = None
    name: str = "scenario"
    seed: int = 0
    source: Optional[str] = None       # the YAML file this came from, for messages

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", f"must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("name", f"must be a non-empty string, got {self.name!r}")
