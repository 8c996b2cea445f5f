"""Unit tier: the low-memory weighted statistics (simmodel.metrics.weighted) against the
expanded sequence, computed here with plain numpy (np.repeat, np.sort, np.mean)."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.metrics import weighted
from simmodel.metrics.weighted import Ranked, checked_samples, percentile_index

EXACT = ("min", "max", "median", "p75", "p90", "p95", "p99")


def _expanded(x: np.ndarray) -> dict:
    x = np.sort(x)
    out = {"mean": float(np.mean(x)), "min": float(x[0]), "max": float(x[-1]),
           "std": float(np.std(x))}
    for name, p in weighted.PERCENTILES:
        out[name] = float(x[percentile_index(x.size, p)])
    return out


def _check(got: dict, want: dict) -> None:
    for key in EXACT:
        assert got[key] == want[key], key
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-12, abs=1e-12)
    # a mean one ulp off (the weighted sum's rounding) leaves a std of about one ulp of
    # the values, however equal they are (hypothesis: speeds of 1e8, std 1.5e-8 for 0)
    scale = max(abs(want["min"]), abs(want["max"]))
    assert got["std"] == pytest.approx(want["std"], rel=1e-9, abs=1e-9 + 1e-12 * scale)


gaps = st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0, 18.25]) | st.floats(1e-6, 1e3),
                          st.integers(1, 30)), min_size=1, max_size=50)


@settings(max_examples=200, deadline=None)
@given(gaps, st.sampled_from([1, 2, 3, 1 << 20]))
def test_gap_and_speed_stats_equal_the_expanded_sequences(pairs, chunk):
    v = np.array([g for g, _ in pairs])
    w = np.array([c for _, c in pairs], dtype=np.int32)
    with _chunk(chunk):             # several chunks: sums and cumulative weights carried
        ranked = Ranked(*checked_samples(v, w))
        got, speed = ranked.stats(), ranked.speed_stats()
    expanded = np.repeat(v, w)
    _check(got, _expanded(expanded))
    positive = expanded[expanded > 0]
    if positive.size == 0:
        assert speed == {name: None for name in weighted.STAT_NAMES}
    else:
        _check(speed, _expanded(1000.0 / positive))


def test_speed_by_hand():
    # gaps 0 x2, 4 x1, 10 x3 -> speeds (positive gaps) 250, 100, 100, 100: sorted
    # [100, 100, 100, 250], mean 137.5, median index round(1.5) = 2 -> 100, p90 index
    # round(2.7) = 3 -> 250; variance (3 * 37.5^2 + 112.5^2) / 4 = 4218.75.
    s = Ranked(np.array([10.0, 0.0, 4.0]), np.array([3, 2, 1])).speed_stats()
    assert (s["min"], s["max"], s["median"], s["p90"]) == (100.0, 250.0, 100.0, 250.0)
    assert s["mean"] == pytest.approx(137.5)
    assert s["std"] == pytest.approx(4218.75 ** 0.5)


@contextmanager
def _chunk(n: int):
    original, weighted.CHUNK = weighted.CHUNK, n
    try:
        yield
    finally:
        weighted.CHUNK = original
