"""``cluster.engine`` (and each pool's ``engine``): one worker's engine and its cost model.

Defaults are those of the reference (``ai-dynamo-runtime==1.6.1``); ``docs/scenario.md``
has the glossary of every key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from simmodel.config.aic import check_aic_keys, moe_sizes
from simmodel.config.checks import (MAX_DP_SIZE, MAX_GPU_BLOCKS, ConfigError, at_most, boolean,
                                    choice, non_negative_int, non_negative_number,
                                    positive_int, positive_number)

BACKENDS = ("vllm", "sglang", "trtllm")
DEFAULT_BLOCK_SIZE = {"vllm": 64, "sglang": 1, "trtllm": 32}
PREEMPTION_MODES = ("lifo", "fifo")
TIMING_TYPES = ("polynomial", "fixed", "table", "aic")
AUTO = "auto"                # num_gpu_blocks / kv_transfer.bytes_per_token from the aic model
SCHEDULE_POLICIES = ("fifo", "lpm")


@dataclass(frozen=True, slots=True)
class TimingConfig:
    """``engine.timing_model``: the per-pass cost model (see ``simmodel.engine.timing``).

    ``type: table`` reads a measured profile from ``path`` (CSV or the reference's NPZ
    layout, see ``simmodel.engine.timing_table``); outside the measured range it fails
    unless ``extrapolate: true``.

    ``type: aic`` costs each pass with NVIDIA AIConfigurator's kernel database
    (``simmodel.engine.aic_timing``): ``model`` (a config shipped with the library, or a
    folder with a ``config.json``), ``system`` (GPU), ``backend`` (default: the engine's),
    ``version`` (default: the database's current one), MoE parallelism, quantisation
    modes, ``database_mode`` and ``prefill_overhead_ms`` (``simmodel.config.aic``)."""

    type: str = "polynomial"
    prefill_ms: Optional[float] = None   # fixed model: duration of a pass with prefill work
    decode_ms: Optional[float] = None    # fixed model: duration added when requests decode
    path: Optional[str] = None           # table model: the profile file
    extrapolate: bool = False            # table model: extend linearly past the measurements
    model: Optional[str] = None          # aic model: the keys of simmodel.config.aic
    system: Optional[str] = None
    backend: Optional[str] = None
    version: Optional[str] = None
    moe_tp_size: Optional[int] = None
    moe_ep_size: Optional[int] = None
    gemm_quant_mode: Optional[str] = None
    moe_quant_mode: Optional[str] = None
    kvcache_quant_mode: Optional[str] = None
    fmha_quant_mode: Optional[str] = None
    comm_quant_mode: Optional[str] = None
    database_mode: Optional[str] = None
    prefill_overhead_ms: Optional[float | str] = None   # null / "auto": the library's

    def __post_init__(self):
        choice("type", self.type, TIMING_TYPES)
        if self.type == "fixed":
            for key in ("prefill_ms", "decode_ms"):
                non_negative_number(key, getattr(self, key))
        elif self.prefill_ms is not None or self.decode_ms is not None:
            raise ConfigError("prefill_ms", "only valid with type: fixed")
        if self.type == "table":
            if not isinstance(self.path, str) or not self.path:
                raise ConfigError("path", "a table timing model needs the path of its profile")
        elif self.path is not None:
            raise ConfigError("path", "only valid with type: table")
        boolean("extrapolate", self.extrapolate)
        check_aic_keys(self)


@dataclass(frozen=True, slots=True)
class SglangConfig:
    """``engine.sglang``: the SGLang scheduler's own knobs (reference §1, §3.4)."""

    schedule_policy: str = "fifo"
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0

    def __post_init__(self):
        choice("schedule_policy", self.schedule_policy, SCHEDULE_POLICIES)
        for key in ("max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens"):
            positive_int(key, getattr(self, key))
        positive_number("schedule_conservativeness", self.schedule_conservativeness)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """``cluster.engine``: one worker's engine (the reference's canonical ``engine`` keys,
    plus its top-level ``dp_size``, ``tensor_parallel_size`` and ``startup_time``)."""

    backend: str = "vllm"
    block_size: Optional[int] = None          # None -> the backend's default (vllm 64)
    num_gpu_blocks: Union[int, str] = 16384   # or "auto" (aic timing: the memory model)
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
    gpu_memory_utilization: float = 0.9       # num_gpu_blocks: auto: fraction of GPU memory

    def __post_init__(self):
        choice("backend", self.backend, BACKENDS)
        positive_int("block_size", self.block_size, allow_none=True)
        if not isinstance(self.timing_model, TimingConfig):
            raise ConfigError("timing_model", "must be a mapping")
        self._check_blocks()
        positive_int("max_model_len", self.max_model_len, allow_none=True)
        positive_int("max_num_seqs", self.max_num_seqs)
        positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        boolean("enable_prefix_caching", self.enable_prefix_caching)
        boolean("enable_chunked_prefill", self.enable_chunked_prefill)
        choice("preemption_mode", self.preemption_mode, PREEMPTION_MODES)
        # The reference leaves durations unchanged for a ratio of 0 in offline replay.
        non_negative_number("speedup_ratio", self.speedup_ratio)
        non_negative_number("decode_speedup_ratio", self.decode_speedup_ratio)
        positive_int("dp_size", self.dp_size)
        at_most("dp_size", self.dp_size, MAX_DP_SIZE, "ranks per worker")
        positive_int("tensor_parallel_size", self.tensor_parallel_size)
        non_negative_number("startup_time", self.startup_time, allow_none=True)
        positive_int("prefill_schedule_interval", self.prefill_schedule_interval)
        if self.prefill_schedule_interval != 1 and self.backend != "vllm":
            raise ConfigError("prefill_schedule_interval", "is supported only for backend "
                              "vllm, as in the reference (sglang: prefill_decode_interval)")
        non_negative_int("prefill_decode_interval", self.prefill_decode_interval)
        self._check_speculative()
        if self.aic:
            self._check_aic()
        if not isinstance(self.sglang, SglangConfig):
            raise ConfigError("sglang", "must be a mapping")
        if self.backend == "sglang" and self.sglang.chunked_prefill_size % self.effective_block_size:
            raise ConfigError("sglang.chunked_prefill_size",
                              f"must be a multiple of block_size ({self.effective_block_size}), "
                              "as the reference requires")

    @property
    def aic(self) -> bool:
        """Whether the passes are costed by the aic (AIConfigurator) timing model."""
        return self.timing_model.type == "aic"

    def _check_blocks(self) -> None:
        """``num_gpu_blocks`` (a count or ``auto``) and ``gpu_memory_utilization``."""
        if isinstance(self.num_gpu_blocks, str):
            if self.num_gpu_blocks != AUTO:
                raise ConfigError("num_gpu_blocks", f"must be a positive integer or auto, "
                                  f"got {self.num_gpu_blocks!r}")
            if not self.aic:
                raise ConfigError("num_gpu_blocks", "auto needs timing_model type: aic "
                                  "(the blocks come from its memory model)")
        else:
            positive_int("num_gpu_blocks", self.num_gpu_blocks)
            at_most("num_gpu_blocks", self.num_gpu_blocks, MAX_GPU_BLOCKS, "KV blocks per rank")
        g = self.gpu_memory_utilization
        positive_number("gpu_memory_utilization", g)
        if g > 1:
            raise ConfigError("gpu_memory_utilization", f"must be at most 1, got {g!r}")

    def _check_aic(self) -> None:
        """What an aic timing model needs of the rest of the engine."""
        if self.decode_speedup_ratio != 1.0:
            raise ConfigError("decode_speedup_ratio", "not supported with timing_model "
                              "type: aic (model speculative decoding with aic_nextn)")
        try:
            moe_sizes(self.timing_model, self.gpus_per_worker)
        except ConfigError as e:
            raise e.under("timing_model") from None

    def _check_speculative(self) -> None:
        """``aic_nextn`` (1-5), its acceptance rates (probabilities) and seed."""
        if self.aic_nextn is not None:
            positive_int("aic_nextn", self.aic_nextn)
            if self.aic_nextn > 5:
                raise ConfigError("aic_nextn", f"must be between 1 and 5, got {self.aic_nextn!r}")
        if self.aic_nextn_accept_rates is not None:
            if self.aic_nextn is None:
                raise ConfigError("aic_nextn_accept_rates", "only valid with aic_nextn")
            for r in self.aic_nextn_accept_rates:
                if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1:
                    raise ConfigError("aic_nextn_accept_rates",
                                      f"rates must be probabilities in [0, 1], got {r!r}")
        non_negative_int("aic_mtp_seed", self.aic_mtp_seed)

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
