"""The keys of ``timing_model: {type: aic}`` (NVIDIA AIConfigurator's measured kernel
database, ``simmodel.engine.aic_timing``), checked without the library: its names
(models, systems, versions, quantisation modes) are checked when the model is built.
"""
from __future__ import annotations

from simmodel.config.checks import ConfigError, choice, non_negative_number, positive_int

#: ``database_mode``: how the library fills a shape it has not measured (its own names).
DATABASE_MODES = ("SILICON", "HYBRID", "EMPIRICAL", "SOL")

#: The string keys of an aic timing model, and the quantisation keys among them.
QUANT_KEYS = ("gemm_quant_mode", "moe_quant_mode", "kvcache_quant_mode", "fmha_quant_mode",
              "comm_quant_mode")
STRING_KEYS = ("model", "system", "backend", "version", "database_mode") + QUANT_KEYS
AIC_KEYS = STRING_KEYS + ("moe_tp_size", "moe_ep_size", "prefill_overhead_ms")

#: The engine backends the library models (its names are the simulator's).
AIC_BACKENDS = ("vllm", "sglang", "trtllm")


def check_aic_keys(tm) -> None:
    """``tm`` (a ``TimingConfig``): the aic keys are set only with ``type: aic``, where
    ``model`` and ``system`` are required."""
    if tm.type != "aic":
        for key in AIC_KEYS:
            if getattr(tm, key) is not None:
                raise ConfigError(key, "only valid with type: aic")
        return
    for key in ("model", "system"):
        if getattr(tm, key) is None:
            raise ConfigError(key, "an aic timing model needs a model and a system "
                                   "(`simmodel models`, `simmodel systems` list them)")
    for key in STRING_KEYS:
        value = getattr(tm, key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(key, f"must be a non-empty string, got {value!r}")
    if tm.backend is not None:
        choice("backend", tm.backend, AIC_BACKENDS)
    if tm.database_mode is not None:
        choice("database_mode", tm.database_mode, DATABASE_MODES)
    positive_int("moe_tp_size", tm.moe_tp_size, allow_none=True)
    positive_int("moe_ep_size", tm.moe_ep_size, allow_none=True)
    if tm.prefill_overhead_ms != "auto":
        non_negative_number("prefill_overhead_ms", tm.prefill_overhead_ms, allow_none=True)


def moe_sizes(tm, gpus: int) -> tuple[int, int]:
    """(moe_tp_size, moe_ep_size) over the ``gpus`` (TP x attention DP) of a worker.

    Neither given: vLLM's default, experts sharded by tensor parallelism across all the
    worker's GPUs (moe_tp = TP x DP, moe_ep = 1).  One given: the other fills the GPUs."""
    tp, ep = tm.moe_tp_size, tm.moe_ep_size
    if tp is None and ep is None:
        return gpus, 1
    if tp is None:
        tp = gpus // ep if gpus % ep == 0 else 0
    elif ep is None:
        ep = gpus // tp if gpus % tp == 0 else 0
    if tp * ep != gpus:
        raise ConfigError("moe_tp_size", f"moe_tp_size x moe_ep_size must equal the worker's "
                          f"GPUs (tensor_parallel_size x dp_size = {gpus}), got "
                          f"{tm.moe_tp_size} x {tm.moe_ep_size}")
    return tp, ep
