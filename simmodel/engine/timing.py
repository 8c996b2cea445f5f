"""Forward-pass cost models: batch shape in, milliseconds out.  Pure, no SimPy.

A pass of a vLLM-style worker costs ``prefill_ms + decode_ms`` (reference §2):

* **prefill** over the requests that get prompt tokens in the pass, aggregated with
  integer means: ``t = n * (Σisl // n − Σprefix // n)`` new tokens, ``P(t)``;
* **decode** over the requests that already finished their prefill, as a function of the
  fraction of the worker's KV token capacity their sequences fill.

Workers never hold coefficients; they call a ``TimingModel``.  Other models (measured
tables, external providers) implement the same two methods.
"""
from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from simmodel.config import EngineConfig

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


def batch_new_tokens(n: int, sum_isl: int, sum_prefix: int) -> int:
    """The batch's new prompt tokens with the reference's integer-mean aggregation."""
    if n == 0:
        return 0
    return n * (sum_isl // n - sum_prefix // n)


def to_ns_grid(ms: float) -> float:
    """Round a duration to the nearest nanosecond, as the reference's virtual clock does
    (it keeps durations as whole nanoseconds; prefill and decode parts separately)."""
    return math.floor(ms * 1e6 + 0.5) / 1e6


def to_ns_grid_array(ms: np.ndarray) -> np.ndarray:
    return np.floor(ms * 1e6 + 0.5) / 1e6


class TimingModel(Protocol):
    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float: ...
    def decode_ms(self, n: int, active_tokens: int) -> float: ...
    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray: ...


def _ratio(r: float) -> float:
    # Offline replay leaves durations unchanged for a ratio of 0 (reference §1).
    return r if r > 0 else 1.0


class PolynomialTiming:
    """The reference's default polynomial model (§2.1, §2.2)."""

    def __init__(self, engine: EngineConfig):
        self.capacity = engine.kv_capacity_tokens
        self.prefill_scale = _ratio(engine.speedup_ratio)
        self.decode_scale = _ratio(engine.speedup_ratio) * _ratio(engine.decode_speedup_ratio)

    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        t = batch_new_tokens(n, sum_isl, sum_prefix)
        return prefill_poly_ms(t) / self.prefill_scale if t > 0 else 0.0

    def decode_ms(self, n: int, active_tokens: int) -> float:
        if n == 0:
            return 0.0
        return decode_poly_ms(active_tokens, self.capacity) / self.decode_scale

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        x = np.minimum(1.0, active_tokens / self.capacity)
        d = np.maximum(1.0, D2 * x * x + D1 * x + D0)
        return d / self.decode_scale


class FixedTiming:
    """Constant costs: ``prefill_ms`` for a pass with prompt work, plus ``decode_ms`` when
    any request decodes (for tests and what-if studies)."""

    def __init__(self, engine: EngineConfig):
        tm = engine.timing_model
        self.p = tm.prefill_ms / _ratio(engine.speedup_ratio)
        self.d = tm.decode_ms / (_ratio(engine.speedup_ratio) * _ratio(engine.decode_speedup_ratio))

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
    raise ValueError(f"unknown timing model {kind!r}")
