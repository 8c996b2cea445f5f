"""Unit tier: the forward-pass cost model (reference §2) and the reference's nanosecond clock.

Expected values are either stated by the reference itself (§2.4 table, E2E example, the
integer-mean example) or derived here from the polynomials and an independent exact
model of Rust's ``Duration`` arithmetic (``Fraction``-based, below).
"""
from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.config import EngineConfig, TimingConfig
from simmodel.engine.request import EngineRequest
from simmodel.engine.scheduler import VllmScheduler
from simmodel.engine.timing import (FixedTiming, PolynomialTiming, batch_new_tokens,
                                    decode_poly_ms, div_ns, duration_ns, make_timing,
                                    prefill_poly_ms)
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt

CAPACITY = 16384 * 64          # vLLM defaults: KV capacity in tokens (§1)
BUDGET = 8192                  # max_num_batched_tokens default


# -- an independent model of Rust's Duration (whole nanoseconds) ----------------------

def rust_from_secs_f64(secs: float) -> int:
    """``Duration::from_secs_f64``: the exact value of the double, to the nearest ns,
    ties to even (``round`` of a Fraction rounds half to even)."""
    return round(Fraction(secs) * 10**9)


def rust_as_secs_f64(ns: int) -> float:
    """``Duration::as_secs_f64``: secs as f64 + nanos as f64 / 1e9."""
    return float(ns // 10**9) + float(ns % 10**9) / 1e9


def rust_div_f64(ns: int, ratio: float) -> int:
    """``Duration::div_f64``: from_secs_f64(as_secs_f64() / ratio)."""
    return rust_from_secs_f64(rust_as_secs_f64(ns) / ratio)


def pass_ns(ms: float, ratio: float = 1.0) -> int:
    """A modelled P or D value (ms) on the reference clock, divided by a speed-up."""
    ns = rust_from_secs_f64(ms / 1000.0)
    return ns if ratio == 1.0 else rust_div_f64(ns, ratio)


def P(t: int, ratio: float = 1.0) -> float:
    """Prefill pass of ``t`` new tokens, in ms on the ns grid."""
    return pass_ns(prefill_poly_ms(t), ratio) / 1e6


def D(active: int, capacity: int = CAPACITY, ratio: float = 1.0) -> float:
    """Decode part of a pass with ``active`` tokens, in ms on the ns grid."""
    return pass_ns(decode_poly_ms(active, capacity), ratio) / 1e6


def chunks(isl: int, budget: int = BUDGET) -> list[int]:
    """A lone prompt's chunk split: full budgets, then the rest."""
    return [budget] * (isl // budget) + ([isl % budget] if isl % budget else [])


# §2.4, verbatim: prompt -> (TTFT, TTST)
TABLE_2_4 = {
    1: (16.516604, 5.740103),
    100: (18.023974, 5.745202),
    1000: (32.105859, 5.791536),
    4096: (85.755980, 5.950635),
    8192: (169.136918, 6.160433),
    8193: (185.653522, 6.160484),
    10000: (214.466186, 6.252789),
    20000: (415.183328, 6.760845),
}


# -- the polynomials --------------------------------------------------------------------

def test_prefill_polynomial_coefficients():
    assert prefill_poly_ms(0) == 0.0
    assert prefill_poly_ms(-5) == 0.0
    for t in (1, 77, 1000, 8192):
        assert prefill_poly_ms(t) == pytest.approx(4.209989e-07 * t * t + 1.518344e-02 * t
                                                   + 16.50142, abs=1e-12)


def test_decode_polynomial_is_a_function_of_the_capacity_fraction_only():
    x = 0.3
    expected = -25.74 * x * x + 54.01 * x + 5.74
    assert decode_poly_ms(3, 10) == pytest.approx(expected, abs=1e-12)
    assert decode_poly_ms(300, 1000) == pytest.approx(expected, abs=1e-12)
    assert decode_poly_ms(0, CAPACITY) == pytest.approx(5.74, abs=1e-12)
    assert decode_poly_ms(CAPACITY, CAPACITY) == pytest.approx(34.01, abs=1e-12)


def test_decode_fraction_is_clamped_at_one():
    full = decode_poly_ms(CAPACITY, CAPACITY)
    assert decode_poly_ms(CAPACITY + 1, CAPACITY) == full
    assert decode_poly_ms(10 * CAPACITY, CAPACITY) == full
    # Unclamped, x = 2 would give -25.74*4 + 54.01*2 + 5.74 = 10.74.
    assert full == pytest.approx(34.01, abs=1e-12)


def test_decode_is_floored_at_one_ms():
    # The polynomial stays >= 5.74 on [0, 1]; the floor only shows for a value of the
    # polynomial below 1 ms (here x = -1: -25.74 - 54.01 + 5.74 = -74.01).
    assert decode_poly_ms(-CAPACITY, CAPACITY) == 1.0
    assert decode_poly_ms(-1, 100) == pytest.approx(max(1.0, -25.74e-4 - 54.01e-2 + 5.74))


def test_integer_mean_aggregation_example():
    # §2.1: (10000-token prompt with prefix 8192) + (3001 new) -> t = 4808, not 4809.
    n, sum_isl, sum_prefix = 2, 10000 + 3001, 8192 + 0
    assert batch_new_tokens(n, sum_isl, sum_prefix) == 4808
    timing = PolynomialTiming(EngineConfig())
    assert timing.prefill_ms(n, sum_isl, sum_prefix) == P(4808)
    assert timing.prefill_ms(n, sum_isl, sum_prefix) != P(4809)


def test_integer_mean_is_exact_for_a_single_request_and_zero_without_prefill():
    for isl, pfx in ((1000, 0), (10000, 8192), (1025, 1024)):
        assert batch_new_tokens(1, isl, pfx) == isl - pfx
    assert batch_new_tokens(0, 0, 0) == 0
    timing = PolynomialTiming(EngineConfig())
    assert timing.prefill_ms(0, 0, 0) == 0.0
    assert timing.decode_ms(0, 0) == 0.0


# -- §2.4: lone requests ----------------------------------------------------------------

@pytest.mark.parametrize("isl", sorted(TABLE_2_4))
def test_table_2_4_from_the_polynomials(isl):
    ttft, ttst = TABLE_2_4[isl]
    assert sum(P(c) for c in chunks(isl)) == pytest.approx(ttft, abs=1e-6)
    assert D(isl + 1) == pytest.approx(ttst, abs=1e-6)


def test_table_2_4_chunk_splits_are_the_documented_ones():
    assert chunks(8193) == [8192, 1]
    assert chunks(10000) == [8192, 1808]
    assert chunks(20000) == [8192, 8192, 3616]


def lone_request_token_times(isl: int, osl: int, engine: EngineConfig | None = None):
    """Drive the pure scheduler for one request arriving at 0; returns token times."""
    engine = engine or EngineConfig()
    sched = VllmScheduler(engine, make_timing(engine))
    req = EngineRequest(0, TokenSequence(Prompt((0,) * (-(-isl // 64)), 64, isl), 64, 0), osl,
                        arrival_ms=0.0)
    sched.enqueue(req)
    now, times, idx = 0.0, [], 0
    while sched.has_work():
        plan = sched.schedule(now)
        now += plan.duration_ms
        before = req.generated
        sched.settle(plan, now, idx, False)
        idx += 1
        if req.generated > before:
            times.append(now)
    return times


@pytest.mark.parametrize("isl", sorted(TABLE_2_4))
def test_table_2_4_through_the_scheduler(isl):
    ttft, ttst = TABLE_2_4[isl]
    times = lone_request_token_times(isl, 2)
    assert times[0] == pytest.approx(ttft, abs=1e-6)
    assert times[1] - times[0] == pytest.approx(ttst, abs=1e-6)


def test_e2e_of_1000_in_10_out():
    expected = P(1000) + sum(D(1000 + j) for j in range(1, 10))
    assert expected == pytest.approx(84.231535, abs=1e-6)       # §2.4
    times = lone_request_token_times(1000, 10)
    assert len(times) == 10
    assert times[-1] == pytest.approx(84.231535, abs=1e-6)
    # token k (k >= 2) comes D(isl + k - 1) after token k - 1
    for k in range(2, 11):
        assert times[k - 1] - times[k - 2] == pytest.approx(D(1000 + k - 1), abs=1e-9)


# -- the nanosecond grid and speed-up rounding -------------------------------------------

def test_durations_are_whole_nanoseconds():
    timing = PolynomialTiming(EngineConfig())
    for t in (1, 77, 1000, 4808, 8192):
        ms = timing.prefill_ms(1, t, 0)
        assert ms * 1e6 == pytest.approx(round(ms * 1e6), abs=1e-6)
        assert ms == pass_ns(prefill_poly_ms(t)) / 1e6


def test_speedup_example_77_tokens():
    # P(77) = 17.6730409824781 ms -> 17673041 ns -> /2 = 8836520.5 ns, decided by the f64
    # of as_secs_f64()/2, which lies above the tie: 8836521 ns.
    assert prefill_poly_ms(77) == pytest.approx(17.6730409824781, abs=1e-12)
    assert duration_ns(prefill_poly_ms(77)) == 17673041
    assert div_ns(17673041, 2.0) == 8836521 == rust_div_f64(17673041, 2.0)
    timing = PolynomialTiming(EngineConfig(speedup_ratio=2.0))
    assert timing.prefill_ms(1, 77, 0) == pytest.approx(8.836521, abs=1e-9)
    times = lone_request_token_times(77, 1, EngineConfig(speedup_ratio=2.0))
    assert times == [pytest.approx(8.836521, abs=1e-9)]


def test_speedup_example_1000_tokens():
    timing = PolynomialTiming(EngineConfig(speedup_ratio=2.0))
    assert timing.prefill_ms(1, 1000, 0) == pytest.approx(16.052930, abs=1e-9)


def test_speedup_tie_is_decided_by_the_f64_bits():
    # P(8188)/2 is 84524300.5 ns in exact arithmetic; the f64 quotient lands below the tie.
    ns = duration_ns(prefill_poly_ms(8188))
    assert ns % 2 == 1
    assert div_ns(ns, 2.0) == rust_div_f64(ns, 2.0) == 84524300


def test_decode_speedup_multiplies_the_ratios():
    eng = EngineConfig(speedup_ratio=2.0, decode_speedup_ratio=1.5)
    timing = PolynomialTiming(eng)
    assert timing.decode_ms(1, 1001) == D(1001, ratio=3.0)
    assert timing.prefill_ms(1, 1000, 0) == P(1000, ratio=2.0)


def test_speedup_zero_leaves_durations_unchanged():
    timing = PolynomialTiming(EngineConfig(speedup_ratio=0.0, decode_speedup_ratio=0.0))
    assert timing.prefill_ms(1, 1000, 0) == P(1000)
    assert timing.decode_ms(1, 1001) == D(1001)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e7, allow_nan=False, allow_infinity=False))
def test_duration_ns_matches_exact_rust_rounding(ms):
    assert duration_ns(ms) == rust_from_secs_f64(ms / 1000.0)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**13),
       st.sampled_from([0.5, 1.5, 2.0, 3.0, 4.0, 7.0, 0.3, 10.0]))
def test_div_ns_matches_exact_rust_rounding(ns, ratio):
    assert div_ns(ns, ratio) == rust_div_f64(ns, ratio)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=40000), st.sampled_from([2.0, 3.0, 4.0]))
def test_polynomial_timing_is_poly_then_duration_then_div(t, ratio):
    eng = EngineConfig(speedup_ratio=ratio)
    timing = PolynomialTiming(eng)
    assert timing.prefill_ms(1, t, 0) == P(t, ratio)
    assert timing.decode_ms(1, t) == D(t, ratio=ratio)


# -- fixed model -------------------------------------------------------------------------

def fixed(prefill_ms: float, decode_ms: float, **kw) -> EngineConfig:
    return EngineConfig(timing_model=TimingConfig(type="fixed", prefill_ms=prefill_ms,
                                                  decode_ms=decode_ms), **kw)


def test_fixed_model_costs():
    timing = make_timing(fixed(3.0, 0.5))
    assert isinstance(timing, FixedTiming)
    assert timing.prefill_ms(1, 10, 0) == 3.0
    assert timing.prefill_ms(4, 40000, 100) == 3.0      # independent of the batch shape
    assert timing.prefill_ms(0, 0, 0) == 0.0
    assert timing.decode_ms(1, 10) == 0.5
    assert timing.decode_ms(100, CAPACITY) == 0.5
    assert timing.decode_ms(0, 0) == 0.0
    assert list(timing.decode_ms_array(2, [10, 20, 30])) == [0.5, 0.5, 0.5]


def test_fixed_model_scales_first_then_rounds():
    # The documented example: 2.6e-6 ms / 2 = 1.3e-6 ms -> 1 ns.
    timing = make_timing(fixed(2.6e-6, 2.6e-6, speedup_ratio=2.0))
    assert timing.prefill_ms(1, 10, 0) == 1e-6
    assert timing.decode_ms(1, 10) == 1e-6
    # A value where the order shows: 3.4e-6 ms / 2 = 1.7 ns -> 2 ns, whereas rounding
    # first (3 ns) and then dividing (1.5 ns, just below the tie in f64) gives 1 ns.
    timing = make_timing(fixed(3.4e-6, 3.4e-6, speedup_ratio=2.0))
    assert timing.prefill_ms(1, 10, 0) == 2e-6
    assert timing.decode_ms(1, 10) == 2e-6
    assert rust_from_secs_f64(3.4e-6 / 2 / 1000) == 2
    assert rust_div_f64(rust_from_secs_f64(3.4e-6 / 1000), 2.0) == 1   # the other order
    eng = fixed(1.0, 1.0, speedup_ratio=2.0, decode_speedup_ratio=4.0)
    timing = make_timing(eng)
    assert timing.prefill_ms(1, 10, 0) == 0.5
    assert timing.decode_ms(1, 10) == 0.125


def test_fixed_model_lone_request_pass_times():
    # pass 1: prefill only (3 ms); later passes decode only (0.5 ms)
    times = lone_request_token_times(100, 4, fixed(3.0, 0.5))
    assert times == [pytest.approx(v, abs=1e-12) for v in (3.0, 3.5, 4.0, 4.5)]


def test_polynomial_decode_array_matches_scalar():
    import numpy as np
    for eng in (EngineConfig(), EngineConfig(speedup_ratio=2.0), EngineConfig(num_gpu_blocks=40)):
        timing = PolynomialTiming(eng)
        active = np.arange(1000, 3000, 37, dtype=np.int64)
        arr = timing.decode_ms_array(1, active)
        assert [float(a) for a in arr] == [timing.decode_ms(1, int(a)) for a in active]
        assert not any(math.isnan(a) for a in arr)


@pytest.mark.parametrize("sr,dsr,scale", [(2.0, 0.0, 1.0), (0.0, 3.0, 1.0), (2.0, 1.5, 3.0),
                                          (0.0, 0.0, 1.0)])
def test_decode_divided_by_the_product_of_the_ratios_unless_it_is_zero(sr, dsr, scale):
    # The reference divides decode by speedup_ratio x decode_speedup_ratio and leaves it
    # unscaled when that product is 0 (so (2, 0) is not a speed-up of 2).
    eng = EngineConfig(speedup_ratio=sr, decode_speedup_ratio=dsr)
    base = make_timing(EngineConfig()).decode_ms(1, 5000)
    d_ns = duration_ns(decode_poly_ms(5000, EngineConfig().kv_capacity_tokens))
    assert make_timing(eng).decode_ms(1, 5000) == div_ns(d_ns, scale) / 1e6
    if scale == 1.0:
        assert make_timing(eng).decode_ms(1, 5000) == base
