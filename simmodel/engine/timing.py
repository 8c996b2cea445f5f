"""Forward-pass cost models: batch shape in, milliseconds out.  Pure, no SimPy.

A pass of a vLLM-style worker costs ``prefill_ms + decode_ms`` (reference §2):

* **prefill** over the requests that get prompt tokens in the pass, aggregated with
  integer means: ``t = n * (Σisl // n − Σprefix // n)`` new tokens, ``P(t)``;
* **decode** over the requests that already finished their prefill, as a function of the
  fraction of the worker's KV token capacity their sequences fill.

Workers never hold coefficients; they call a ``TimingModel``.  Other models (measured
tables, external providers) implement the same two methods.  A model that costs a pass
from its composition (``aic``, ``simmodel.engine.aic_timing``) sets ``composed = True``
and offers ``pass_ms(chunks, n_decode, decode_tokens)``: the schedulers then hand it the
pass's prefill entries as (new tokens, tokens computed before) instead of their sums.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.clock import (  # noqa: F401 (re-exported: the models' shared helpers)
    batch_new_tokens, div_ns, div_ns_array, duration_ns, duration_ns_array, speedup_divisor)

# Reference §2.1 / §2.2 coefficients (ms).
P2, P1, P0 = 4.209989e-07, 1.518344e-02, 16.50142
D2, D1, D0 = -25.74, 54.01, 5.74


def prefill_poly_ms(t: int) -> float:
    """P(t): time to prefill ``t`` new tokens in one pass; P(0) = 0."""
    if t <= 0:
        return 0.0
    return P2 * t * t + P1 * t + P0


def decode_poly_ms(active_tokens: int, capacity_tokens: int) -> float:
    """D(x) with x = min(1, active_tokens / capacity), floored at 1 ms."""
    x = min(1.0, active_tokens / capacity_tokens)
    return max(1.0, D2 * x * x + D1 * x + D0)


class TimingModel(Protocol):
    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float: ...
    def decode_ms(self, n: int, active_tokens: int) -> float: ...
    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray: ...


class PolynomialTiming:
    """The reference's default polynomial model (§2.1, §2.2), on the reference's
    nanosecond clock: P or D is made a Duration, then divided by the speed-up ratio(s)."""

    def __init__(self, engine: EngineConfig):
        self.capacity = engine.kv_capacity_tokens
        self.prefill_scale = speedup_divisor(engine.speedup_ratio)
        # decode: divided by the product of the ratios; a product of 0 leaves it unscaled
        # (measured: speed-ups (2, 0) and (0, 3) both leave decode as it is)
        self.decode_scale = speedup_divisor(engine.speedup_ratio * engine.decode_speedup_ratio)

    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        t = batch_new_tokens(n, sum_isl, sum_prefix)
        if t <= 0:
            return 0.0
        return div_ns(duration_ns(prefill_poly_ms(t)), self.prefill_scale) / 1e6

    def decode_ms(self, n: int, active_tokens: int) -> float:
        if n == 0:
            return 0.0
        d = duration_ns(decode_poly_ms(active_tokens, self.capacity))
        return div_ns(d, self.decode_scale) / 1e6

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        x = np.minimum(1.0, active_tokens / self.capacity)
        d = np.maximum(1.0, D2 * x * x + D1 * x + D0)
        return div_ns_array(duration_ns_array(d), self.decode_scale) / 1e6


class FixedTiming:
    """Constant costs: ``prefill_ms`` for a pass with prompt work, plus ``decode_ms`` when
    any request decodes (for tests and what-if studies).  Scaled first, then made a
    Duration (as the reference does for this model)."""

    def __init__(self, engine: EngineConfig):
        tm = engine.timing_model
        self.p = duration_ns(tm.prefill_ms / speedup_divisor(engine.speedup_ratio)) / 1e6
        self.d = duration_ns(tm.decode_ms / speedup_divisor(engine.speedup_ratio
                                                            * engine.decode_speedup_ratio)) / 1e6

    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        return self.p if n > 0 else 0.0

    def decode_ms(self, n: int, active_tokens: int) -> float:
        return self.d if n > 0 else 0.0

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(active_tokens), self.d if n > 0 else 0.0)


def make_timing(engine: EngineConfig) -> TimingModel:
    kind = engine.timing_model.type
    if kind == "polynomial":
        return PolynomialTiming(engine)
    if kind == "fixed":
        return FixedTiming(engine)
    if kind == "table":
        from simmodel.engine.timing_table import TableTiming   # (its csv and zip reading)
        return TableTiming(engine)
    if kind == "aic":
        from simmodel.engine.aic_timing import AicTiming   # the library: only when asked
        return AicTiming(engine)
    raise ValueError(f"unknown timing model {kind!r}")
