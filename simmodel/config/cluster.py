"""``cluster``: the workers, their router, and (disaggregated) the two pools and the KV
transfer between them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from simmodel.config.checks import (MAX_WORKERS, ConfigError, at_most, boolean, choice,
                                    non_negative_number, positive_int, positive_number)
from simmodel.config.engine import EngineConfig

ROUTER_MODES = ("round_robin", "kv")
QUEUE_POLICIES = ("fcfs", "lcfs", "wspt")
TRANSFER_TIMINGS = ("full_prompt", "destination_missing")


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
        choice("mode", self.mode, ROUTER_MODES)
        for key in ("overlap_score_credit", "overlap_score_credit_decay", "prefill_load_scale",
                    "decode_active_request_weight", "router_temperature"):
            non_negative_number(key, getattr(self, key))
        for key in ("router_track_active_blocks", "router_track_prefill_tokens",
                    "router_assume_kv_reuse"):
            boolean(key, getattr(self, key))
        non_negative_number("router_queue_threshold", self.router_queue_threshold, allow_none=True)
        choice("router_queue_policy", self.router_queue_policy, QUEUE_POLICIES)
        non_negative_number("kv_event_lag_ms", self.kv_event_lag_ms, allow_none=True)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """``cluster.prefill`` / ``cluster.decode``: one pool of a disaggregated cluster."""

    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self):
        _check_workers(self.workers, self.engine)


def _check_workers(workers, engine) -> None:
    """A pool of ``workers`` (positive), at most ``MAX_WORKERS`` scheduler ranks."""
    positive_int("workers", workers)
    ranks = workers * engine.dp_size if isinstance(engine, EngineConfig) else workers
    at_most("workers", ranks, MAX_WORKERS,
            "scheduler ranks per pool (workers x engine.dp_size)")


@dataclass(frozen=True, slots=True)
class KvTransferConfig:
    """``cluster.kv_transfer``: how long moving a prompt's KV from a prefill worker to a
    decode worker takes: ``tokens x bytes_per_token / (bandwidth_gb_s x 1e9)`` seconds,
    0 when either size is unset (the reference's default).  ``timing``: ``full_prompt``
    charges the whole prompt, ``destination_missing`` only the blocks the decode worker
    does not already hold."""

    bandwidth_gb_s: Optional[float] = None
    bytes_per_token: Optional[Union[int, str]] = None   # or "auto": from the aic model
    timing: str = "full_prompt"
    contention: bool = False           # beyond the reference: shared links (cluster.kv_link)
    policy: str = "fair"               # contention: fair sharing or fifo per link
    decode_links: bool = False         # contention: decode workers' NICs are links too

    def __post_init__(self):
        positive_number("bandwidth_gb_s", self.bandwidth_gb_s, allow_none=True)
        if self.bytes_per_token != "auto":
            positive_int("bytes_per_token", self.bytes_per_token, allow_none=True)
        choice("timing", self.timing, TRANSFER_TIMINGS)
        boolean("contention", self.contention)
        choice("policy", self.policy, ("fair", "fifo"))
        boolean("decode_links", self.decode_links)
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
        if self.kv_transfer.bytes_per_token == "auto" and not any(
                p is not None and p.engine.aic for p in (self.prefill, self.decode)):
            raise ConfigError("kv_transfer.bytes_per_token", "auto needs a disaggregated "
                              "cluster with a timing_model of type aic (its model config)")

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None
