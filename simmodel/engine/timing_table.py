"""Measured-profile cost model (``timing_model: {type: table}``).  Pure, no SimPy.

The pass cost is read off a measured table instead of the fitted polynomials, exactly as
the reference's ``external / dynamo_profile`` provider does with its NPZ file (measured on
ai-dynamo-runtime 1.6.1, see docs/model.md):

* **prefill**: ``n`` requests with prompt work, ``t = n * (Σisl // n − Σprefix // n)`` new
  tokens (the polynomial's integer-mean aggregation), cost = linear interpolation of the
  ``(tokens, ms)`` points at ``t``, floored at 0 ms.  No prefill work: 0 ms.
* **decode**: ``n`` decoding requests holding ``Σ`` context tokens (prompt + tokens emitted
  so far), cost = bilinear interpolation of a grid over (Σ context, mean context) at
  ``(Σ, Σ // n)``, floored at 1 ms.  No decoder: 0 ms.
* both parts become the reference's nanosecond ``Duration`` and are then divided by the
  speed-up: prefill by ``speedup_ratio``, decode by ``speedup_ratio × decode_speedup_ratio``
  (a ratio, or a product, that is 0 leaves the durations unchanged).

Outside the measured range the reference always extends the edge segment / edge cell
linearly.  Here that needs ``extrapolate: true``; by default such a point raises a
one-line ``UserError``.

The profile files (``.npz``, ``.csv``) are read and checked by ``simmodel.engine.profile``.
"""
from __future__ import annotations

import bisect

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.clock import (batch_new_tokens, div_ns, div_ns_array, duration_ns,
                                   duration_ns_array, speedup_divisor)
from simmodel.engine.profile import Profile, fmt_value, load_profile
from simmodel.errors import UserError

PREFILL_FLOOR_MS = 0.0      # the reference clamps an interpolated prefill time at 0 ms
DECODE_FLOOR_MS = 1.0       # ... and a decode time at 1 ms (as its polynomial)


# -- interpolation, with the reference's arithmetic -------------------------------------
# ndarray-interp (the reference's interpolator): the cell is the one whose left edge is the
# last axis point <= x, clamped to the first / last cell (which is how it extrapolates);
# between two points (x1, y1), (x2, y2): ``(y2 - y1) / (x2 - x1) * (x - x1) + y1``.
# Bilinear: along the first axis at both second-axis edges, then along the second axis.

def _cell(axis: list, x: float) -> int:
    i = bisect.bisect_right(axis, x) - 1
    return 0 if i < 0 else (len(axis) - 2 if i > len(axis) - 2 else i)


def _lerp(x1: float, y1: float, x2: float, y2: float, x: float) -> float:
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def interp1(xs: list, ys: list, x: float) -> float:
    """Piecewise-linear interpolation, extended linearly past both ends."""
    i = _cell(xs, x)
    return _lerp(xs[i], ys[i], xs[i + 1], ys[i + 1], x)


def bilinear(xs: list, ys: list, z: list, x: float, y: float) -> float:
    """Bilinear interpolation on the grid ``z[i][j]`` at ``(xs[i], ys[j])``, extended
    linearly past the edges."""
    i = _cell(xs, x)
    j = _cell(ys, y)
    x1, x2 = xs[i], xs[i + 1]
    y1, y2 = ys[j], ys[j + 1]
    za = _lerp(x1, z[i][j], x2, z[i + 1][j], x)
    zb = _lerp(x1, z[i][j + 1], x2, z[i + 1][j + 1], x)
    return _lerp(y1, za, y2, zb, y)


def _cells(axis: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)


def _lerp_array(x1, y1, x2, y2, x):
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def bilinear_array(xs: np.ndarray, ys: np.ndarray, z: np.ndarray, x: np.ndarray,
                   y: np.ndarray) -> np.ndarray:
    """``bilinear`` over arrays of points (the same floating-point operations)."""
    i = _cells(xs, x)
    j = _cells(ys, y)
    x1, x2 = xs[i], xs[i + 1]
    y1, y2 = ys[j], ys[j + 1]
    za = _lerp_array(x1, z[i, j], x2, z[i + 1, j], x)
    zb = _lerp_array(x1, z[i, j + 1], x2, z[i + 1, j + 1], x)
    return _lerp_array(y1, za, y2, zb, y)


# -- the cost model ---------------------------------------------------------------------

class TableTiming:
    """The reference's ``dynamo_profile`` cost model on a measured table."""

    def __init__(self, engine: EngineConfig, profile: Profile | None = None):
        tm = engine.timing_model
        self.profile = profile if profile is not None else load_profile(tm.path)
        self.extrapolate = bool(tm.extrapolate)
        p = self.profile
        self._px, self._py = p.prefill_tokens.tolist(), p.prefill_ms.tolist()
        self._dx, self._dy = p.decode_kv_tokens.tolist(), p.decode_context.tolist()
        self._dz = p.decode_ms.tolist()
        self.prefill_scale = speedup_divisor(engine.speedup_ratio)
        # Measured: the decode divisor is the product; a product of 0 leaves decode as is.
        self.decode_scale = speedup_divisor(engine.speedup_ratio * engine.decode_speedup_ratio)

    # -- raw table values (ms, before the floor, the clock and the speed-up) -------------
    def prefill_table_ms(self, tokens: int) -> float:
        if not self.extrapolate and not self._px[0] <= tokens <= self._px[-1]:
            raise UserError(
                f"{self.profile.source}: prefill of {tokens} new tokens is outside the "
                f"measured range [{fmt_value(self._px[0])}, {fmt_value(self._px[-1])}] "
                "tokens; set timing_model.extrapolate: true")
        return interp1(self._px, self._py, float(tokens))

    def decode_table_ms(self, n: int, active_tokens: int) -> float:
        mean_context = active_tokens // n
        if not self.extrapolate:
            self._check_decode(n, active_tokens, mean_context)
        return bilinear(self._dx, self._dy, self._dz, float(active_tokens),
                        float(mean_context))

    def _check_decode(self, n: int, active: int, mean: int) -> None:
        dx, dy = self._dx, self._dy
        if not (dx[0] <= active <= dx[-1] and dy[0] <= mean <= dy[-1]):
            raise UserError(
                f"{self.profile.source}: decode point ({n} requests holding {active} "
                f"context tokens, mean {mean}) is outside the measured range (context "
                f"[{fmt_value(dx[0])}, {fmt_value(dx[-1])}] tokens, mean "
                f"[{fmt_value(dy[0])}, {fmt_value(dy[-1])}]); "
                "set timing_model.extrapolate: true")

    # -- TimingModel ---------------------------------------------------------------------
    def prefill_ms(self, n: int, sum_isl: int, sum_prefix: int) -> float:
        if n == 0:
            return 0.0
        ms = max(PREFILL_FLOOR_MS, self.prefill_table_ms(batch_new_tokens(n, sum_isl,
                                                                          sum_prefix)))
        return div_ns(duration_ns(ms), self.prefill_scale) / 1e6

    def decode_ms(self, n: int, active_tokens: int) -> float:
        if n == 0:
            return 0.0
        ms = max(DECODE_FLOOR_MS, self.decode_table_ms(n, active_tokens))
        return div_ns(duration_ns(ms), self.decode_scale) / 1e6

    def decode_ms_array(self, n: int, active_tokens: np.ndarray) -> np.ndarray:
        active = np.asarray(active_tokens, dtype=np.int64)
        if n == 0:
            return np.zeros(len(active))
        mean = active // n
        if not self.extrapolate and len(active):
            # a run's points are monotone in both coordinates: its ends bound it
            for k in (int(np.argmin(active)), int(np.argmax(active))):
                self._check_decode(n, int(active[k]), int(mean[k]))
        p = self.profile
        ms = bilinear_array(p.decode_kv_tokens, p.decode_context, p.decode_ms,
                            active.astype(np.float64), mean.astype(np.float64))
        ms = np.maximum(DECODE_FLOOR_MS, ms)
        return div_ns_array(duration_ns_array(ms), self.decode_scale) / 1e6
