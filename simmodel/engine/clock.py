"""The reference's clock and the batch aggregation every cost model shares.  Pure.

Shared by the cost models (``simmodel.engine.timing``, ``simmodel.engine.timing_table``)
and by the cluster's transfer delays: the reference's nanosecond ``Duration`` rounding,
the integer-mean prefill aggregation and the speed-up divisor.
"""
from __future__ import annotations

import math

import numpy as np


def batch_new_tokens(n: int, sum_isl: int, sum_prefix: int) -> int:
    """The batch's new prompt tokens with the reference's integer-mean aggregation."""
    if n == 0:
        return 0
    return n * (sum_isl // n - sum_prefix // n)


# -- the reference's clock -------------------------------------------------------------
# The reference keeps durations as Rust ``Duration``s (whole nanoseconds): a modelled time
# in ms becomes ``Duration::from_secs_f64(ms / 1000)`` and a speed-up is applied with
# ``Duration::div_f64``.  Both round the *exact* binary value of their f64 argument to the
# nearest nanosecond (ties to even), so a half-nanosecond is decided by the last bit of
# the f64 (P(8188)/2 = 84524300.5 ns lands on 84524300).  These helpers reproduce that
# exactly: the float guess is checked with integer arithmetic when it is near a tie.

_TIE_WINDOW = 1e-6      # ns; beyond it the float product decides the rounding safely


def _exact_round_ns(x_s: float) -> int:
    """Nearest whole nanosecond of the exact value of the double ``x_s`` seconds."""
    num, den = x_s.as_integer_ratio()
    q, r = divmod(num * 1_000_000_000, den)
    if 2 * r > den or (2 * r == den and q & 1):
        q += 1
    return q


def _round_ns(x_s: float) -> int:
    z = x_s * 1e9
    n = math.floor(z + 0.5)
    if abs(z - math.floor(z) - 0.5) < _TIE_WINDOW:
        return _exact_round_ns(x_s)
    return n


def _as_secs_f64(ns: int) -> float:
    return (ns // 1_000_000_000) + (ns % 1_000_000_000) / 1e9


def duration_ns(ms: float) -> int:
    """``Duration::from_secs_f64(ms / 1000)`` in nanoseconds."""
    return _round_ns(ms / 1000.0)


def div_ns(ns: int, ratio: float) -> int:
    """``Duration::div_f64(ratio)`` of a duration of ``ns`` nanoseconds."""
    if ratio == 1.0:
        return ns
    return _round_ns(_as_secs_f64(ns) / ratio)


def _round_ns_array(x_s: np.ndarray) -> np.ndarray:
    z = x_s * 1e9
    n = np.floor(z + 0.5)
    near = np.abs(z - np.floor(z) - 0.5) < _TIE_WINDOW
    if near.any():
        for i in np.flatnonzero(near):
            n[i] = _exact_round_ns(float(x_s[i]))
    return n


def duration_ns_array(ms: np.ndarray) -> np.ndarray:
    return _round_ns_array(ms / 1000.0)


def div_ns_array(ns: np.ndarray, ratio: float) -> np.ndarray:
    if ratio == 1.0:
        return ns
    whole = np.floor(ns / 1e9)
    secs = whole + (ns - whole * 1e9) / 1e9
    return _round_ns_array(secs / ratio)


def speedup_divisor(r: float) -> float:
    # Offline replay leaves durations unchanged for a ratio of 0 (reference §1).
    return r if r > 0 else 1.0
