"""The nine statistics of run-length-encoded samples, in little memory.

``values[i]`` occurs ``weights[i]`` times; the statistics are those of the expanded
sequence ``np.repeat(values, weights)`` without building it.  A long run's pooled ITL
samples are one entry per pass (tens of millions at a million requests), so the
arrays are never copied whole: one ``argsort`` (8 bytes an entry) and the cumulative
weights in sorted order (4 bytes an entry) are all that is held besides the inputs, and
sums run over chunks.

* min, max and the nearest-rank percentiles (``percentile_index``) are exact;
* mean and population std are sums over ``CHUNK``-entry chunks (numpy's pairwise sum
  within a chunk, ``math.fsum`` over the chunks' partial sums, in input order): the same
  bits on every machine and thread count, within a few units in the last place of the
  exact value;
* the per-user decode speed ``1000 / gap`` is decreasing in the gap (correctly rounded
  division is monotone), so its percentiles are read from the gaps' order: the speed at
  ascending rank ``k`` of the positive gaps is ``1000 /`` the gap at rank ``total-1-k``
  of all gaps (zero gaps sort first).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

#: (key prefix, percentile) of the reported percentiles, in report order.
PERCENTILES = (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99))

#: The nine statistics reported for every sample set, in report order.
STAT_NAMES = ("mean", "min", "max") + tuple(name for name, _ in PERCENTILES) + ("std",)

#: Entries per chunk of a sum (8 MB of float64 temporaries).
CHUNK = 1 << 20


def percentile_index(n: int, p: float) -> int:
    """Index into ``n`` sorted samples of the ``p``-th percentile (0 ≤ p ≤ 100).

    ``round((n-1)·p/100)`` rounding half away from zero, so ``n=2, p=50`` → 1 and
    ``n=4, p=50`` → 2 (Python's ``round`` would give 0 and 2).
    """
    if n <= 0:
        raise ValueError(f"percentile of an empty sample set (n={n})")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p!r}")
    q = (n - 1) * p / 100.0
    lower = math.floor(q)
    # q - lower is exact in floating point (lower <= q < lower + 1).
    return int(lower + 1) if q - lower >= 0.5 else int(lower)


def weighted_stats(values, weights=None) -> dict[str, Optional[float]]:
    """The nine statistics of ``values[i]`` repeated ``weights[i]`` times.

    ``weights`` are non-negative integers (default: all 1); zero-weight entries are
    ignored.  Returns ``{name: None}`` for every statistic when the expanded sequence is
    empty.
    """
    v, w = checked_samples(values, weights)
    if v.size == 0:
        return {name: None for name in STAT_NAMES}
    return Ranked(v, w).stats()


def checked_samples(values, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64, weights as integers) with the zero-weight entries dropped;
    ValueError for mismatched lengths, weights that are not non-negative integers, or
    values that are not finite."""
    v = np.asarray(values, dtype=float).ravel()
    if weights is None:
        w = np.ones(v.shape, dtype=np.int64)
    else:
        w = np.asarray(weights).ravel()
        if w.shape != v.shape:
            raise ValueError(f"{v.size} values but {w.size} weights")
        if w.dtype.kind in "iu":
            bad = w.size > 0 and bool(np.any(w < 0))
        else:
            bad = w.size > 0 and not bool(np.all(np.isfinite(w) & (w >= 0)
                                                 & (w == np.floor(w))))
            w = w.astype(np.int64) if not bad else w
        if bad:
            raise ValueError("weights must be non-negative integers")
        if w.size and not bool(np.all(w > 0)):
            keep = w > 0
            v, w = v[keep], w[keep]
    if not np.all(np.isfinite(v)):
        raise ValueError("sample values must be finite")
    return v, w


class Ranked:
    """Samples (non-empty ``v``, positive integer weights ``w``) in sorted order:
    ``order`` (argsort of ``v``, stable) and ``cum`` (cumulative weights along it, in 32
    bits unless the total needs more)."""

    def __init__(self, v: np.ndarray, w: np.ndarray):
        self.v, self.w = v, w
        self.total = int(np.sum(w, dtype=np.int64))
        kind = np.int32 if self.total >> 31 == 0 else np.int64
        self.order = np.argsort(v, kind="stable")
        self.cum = np.empty(v.size, dtype=kind)
        carry = 0
        for a in range(0, v.size, CHUNK):
            part = self.cum[a:a + CHUNK]
            np.cumsum(w[self.order[a:a + CHUNK]], dtype=kind, out=part)
            part += carry
            carry = int(part[-1])

    def at_rank(self, k: int) -> float:
        """The value at position ``k`` of the expanded sorted sequence."""
        return float(self.v[self.order[int(np.searchsorted(self.cum, k, side="right"))]])

    def stats(self) -> dict[str, Optional[float]]:
        mean, std = mean_std(self.v, self.w, self.total)
        out: dict[str, Optional[float]] = {"mean": mean, "min": self.at_rank(0),
                                           "max": self.at_rank(self.total - 1)}
        for name, p in PERCENTILES:
            out[name] = self.at_rank(percentile_index(self.total, p))
        out["std"] = std
        return out

    def speed_stats(self, scale: float = 1000.0) -> dict[str, Optional[float]]:
        """The statistics of ``scale / v`` over the positive values (the per-user decode
        speed of ITL gaps in ms); ``None`` for each if no value is positive."""
        positive = self.v > 0
        zeros = self.total - int(np.sum(self.w, where=positive, dtype=np.int64))
        m = self.total - zeros
        if m == 0:
            return {name: None for name in STAT_NAMES}

        def speed(v: np.ndarray) -> np.ndarray:
            return scale / v

        mean, std = mean_std(self.v, self.w, m, mask=positive, f=speed)
        top = self.total - 1          # ascending speed rank k <-> gap rank top - k
        out: dict[str, Optional[float]] = {"mean": mean,
                                           "min": scale / self.at_rank(top),
                                           "max": scale / self.at_rank(zeros)}
        for name, p in PERCENTILES:
            out[name] = scale / self.at_rank(top - percentile_index(m, p))
        out["std"] = std
        return out


def mean_std(v: np.ndarray, w: np.ndarray, total: int, mask: Optional[np.ndarray] = None,
             f: Optional[Callable] = None) -> tuple[float, float]:
    """Weighted mean and population std of ``f(v)`` over the entries where ``mask`` (all
    if None); ``total``: their weight."""
    def chunks():
        for a in range(0, v.size, CHUNK):
            x, c = v[a:a + CHUNK], w[a:a + CHUNK]
            if mask is not None:
                keep = mask[a:a + CHUNK]
                x, c = x[keep], c[keep]
            yield (x if f is None else f(x)), c.astype(float)

    # np.sum (pairwise), not np.dot: a BLAS dot product's rounding depends on its thread
    # count, and the same run must give the same bits on every executor.
    mean = math.fsum(float(np.sum(c * x)) for x, c in chunks()) / total
    parts = []
    for x, c in chunks():
        t = x - mean
        np.multiply(t, t, out=t)
        np.multiply(c, t, out=t)
        parts.append(float(np.sum(t)))
    var = math.fsum(parts) / total
    return mean, math.sqrt(var)
