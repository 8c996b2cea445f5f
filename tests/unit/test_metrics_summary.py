"""Unit tier: the run summary (simmodel.metrics.summary), every expected value hand-computed."""
from __future__ import annotations

import json
import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.config import SlaConfig
from simmodel.metrics import (
    GOODPUT_KEYS,
    SUMMARY_KEYS,
    percentile_index,
    summarize,
    weighted_stats,
)
from simmodel.result import REQUEST_COLUMNS

NAN = float("nan")
STATS = ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std")


def _row(**overrides) -> dict:
    row = {c: NAN for c in REQUEST_COLUMNS}
    row.update(session_id="s", turn_index=0, uid=0, input_length=0,
               requested_output_length=0, output_length=0, reused_input_tokens=0,
               first_admission_reused_input_tokens=0, decode_worker_idx=0,
               admission_count=1, readmission_count=0, terminal_status="completed")
    row.update(overrides)
    return row


def _frame(*rows: dict) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(REQUEST_COLUMNS))


# Three completed requests, one rejected, one incomplete.
#   A: arrival 0,  tokens at 10, 15, 15, 20, 30  (n=5): ttft 10, ttst 5,  e2e 30, itl (30-10)/4 = 5
#   B: arrival 5,  tokens at 25, 35, 45          (n=3): ttft 20, ttst 10, e2e 40, itl (45-25)/2 = 10
#   C: arrival 10, token  at 40                  (n=1): ttft 30, ttst -,  e2e 30, itl -
# Pooled gaps: A 5, 0, 5, 10; B 10, 10  ->  {0: 1, 5: 2, 10: 3}.
A = _row(uid=0, arrival_time_ms=0.0, first_admit_ms=0.0, first_token_ms=10.0,
         second_token_ms=15.0, last_token_ms=30.0, terminal_time_ms=30.0, ttft_ms=10.0,
         ttst_ms=5.0, e2e_latency_ms=30.0, tpot_ms=5.0, input_length=100,
         requested_output_length=5, output_length=5, reused_input_tokens=50,
         first_admission_reused_input_tokens=0)
B = _row(uid=1, arrival_time_ms=5.0, first_admit_ms=5.0, first_token_ms=25.0,
         second_token_ms=35.0, last_token_ms=45.0, terminal_time_ms=45.0, ttft_ms=20.0,
         ttst_ms=10.0, e2e_latency_ms=40.0, tpot_ms=10.0, input_length=200,
         requested_output_length=3, output_length=3, reused_input_tokens=100,
         first_admission_reused_input_tokens=100)
C = _row(uid=2, arrival_time_ms=10.0, first_admit_ms=10.0, first_token_ms=40.0,
         last_token_ms=40.0, terminal_time_ms=40.0, ttft_ms=30.0, e2e_latency_ms=30.0,
         input_length=300, requested_output_length=1, output_length=1)
# Would change every statistic if they were counted.
REJECTED = _row(uid=3, arrival_time_ms=12.0, terminal_time_ms=500.0, input_length=9000,
                requested_output_length=10, decode_worker_idx=-1, admission_count=0,
                terminal_status="rejected")
INCOMPLETE = _row(uid=4, arrival_time_ms=13.0, first_admit_ms=13.0, first_token_ms=900.0,
                  second_token_ms=990.0, last_token_ms=990.0, ttft_ms=887.0, ttst_ms=90.0,
                  e2e_latency_ms=977.0, tpot_ms=90.0, input_length=7000,
                  requested_output_length=50, output_length=2, reused_input_tokens=7000,
                  first_admission_reused_input_tokens=7000, terminal_status="incomplete")
GAPS = np.array([5.0, 0.0, 10.0])
WEIGHTS = np.array([2, 1, 3])

SCALARS = dict(num_requests=5, committed_prefill_tokens=123,
               decode_worker_seconds=200.599, prefill_worker_seconds=0.0,
               decode_gpus_per_worker=1, prefill_gpus_per_worker=1, wall_time_ms=2.0)


def _summary(frame=None, gaps=GAPS, weights=WEIGHTS, sla=SlaConfig(), **scalars):
    frame = _frame(A, B, C, REJECTED, INCOMPLETE) if frame is None else frame
    return summarize(frame, gaps, weights, sla=sla, **{**SCALARS, **scalars})


def _group(summary: dict, metric: str, suffix: str = "_ms") -> dict:
    return {s: summary[f"{s}_{metric}{suffix}"] for s in STATS}


def _approx(expected: dict) -> dict:
    return {k: (None if v is None else pytest.approx(v, rel=1e-12, abs=1e-12))
            for k, v in expected.items()}


# ---------------------------------------------------------------- percentile_index

@pytest.mark.parametrize("n, p, index", [
    (1, 50, 0), (1, 99, 0),
    (2, 50, 1),    # round(0.5) = 1 (half away from zero; Python's round gives 0)
    (2, 49, 0),    # 0.49
    (3, 75, 2),    # round(1.5) = 2
    (4, 50, 2),    # round(1.5) = 2
    (5, 50, 2), (5, 75, 3), (5, 90, 4),   # 2.0, 3.0, 3.6
    (6, 50, 3),    # round(2.5) = 3 (Python's round gives 2)
    (11, 95, 10),  # round(9.5) = 10
    (101, 99, 99), (100, 99, 98),         # 99.0, 98.01
    (10, 0, 0), (10, 100, 9),
])
def test_percentile_index_rounds_half_away_from_zero(n, p, index):
    assert percentile_index(n, p) == index


@given(st.integers(1, 10**7), st.integers(0, 100))
def test_percentile_index_matches_decimal_rounding(n, p):
    exact = (Decimal((n - 1) * p) / Decimal(100)).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    assert percentile_index(n, p) == int(exact)


@pytest.mark.parametrize("n, p", [(0, 50), (5, -1), (5, 101)])
def test_percentile_index_rejects_bad_arguments(n, p):
    with pytest.raises(ValueError):
        percentile_index(n, p)


# ---------------------------------------------------------------- weighted_stats

def test_weighted_stats_by_hand():
    # 3 x1, 1 x2, 2 x1 -> expanded sorted [1, 1, 2, 3], n = 4, mean 7/4.
    # median index round(1.5) = 2 -> 2; p75 round(2.25) = 2 -> 2; p90 round(2.7) = 3 -> 3.
    # population variance ((0.75)^2*2 + 0.25^2 + 1.25^2) / 4 = 2.75 / 4.
    stats = weighted_stats([3.0, 1.0, 2.0], [1, 2, 1])
    assert stats == _approx({"mean": 1.75, "min": 1.0, "max": 3.0, "median": 2.0, "p75": 2.0,
                             "p90": 3.0, "p95": 3.0, "p99": 3.0, "std": math.sqrt(0.6875)})


def test_weighted_stats_unweighted_default_and_single_sample():
    assert weighted_stats([4.0, 2.0]) == _approx(
        {"mean": 3.0, "min": 2.0, "max": 4.0, "median": 4.0, "p75": 4.0, "p90": 4.0,
         "p95": 4.0, "p99": 4.0, "std": 1.0})
    assert weighted_stats([7.0], [5]) == _approx(
        {"mean": 7.0, "min": 7.0, "max": 7.0, "median": 7.0, "p75": 7.0, "p90": 7.0,
         "p95": 7.0, "p99": 7.0, "std": 0.0})


def test_weighted_stats_empty_is_none_and_zero_weights_ignored():
    assert weighted_stats([]) == {s: None for s in STATS}
    assert weighted_stats([1.0, 2.0], [0, 0]) == {s: None for s in STATS}
    assert weighted_stats([100.0, 1.0, 3.0], [0, 1, 1]) == weighted_stats([1.0, 3.0])


@pytest.mark.parametrize("values, weights", [
    ([1.0, 2.0], [1]), ([1.0], [-1]), ([1.0], [1.5]), ([NAN], [1]), ([math.inf], None),
])
def test_weighted_stats_rejects_bad_input(values, weights):
    with pytest.raises(ValueError):
        weighted_stats(values, weights)


def _expanded_stats(values, weights) -> dict:
    x = np.sort(np.repeat(np.asarray(values, dtype=float), np.asarray(weights, dtype=int)))
    n = x.size
    out = {"mean": float(np.mean(x)), "min": float(x[0]), "max": float(x[-1]),
           "std": float(np.std(x))}
    for name, p in (("median", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99)):
        out[name] = float(x[percentile_index(n, p)])
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e4, allow_nan=False), st.integers(1, 40)),
                min_size=1, max_size=60))
def test_weighted_stats_equal_expanded(pairs):
    values = [v for v, _ in pairs]
    weights = [w for _, w in pairs]
    got = weighted_stats(values, weights)
    want = _expanded_stats(values, weights)
    for key in ("min", "max", "median", "p75", "p90", "p95", "p99"):
        assert got[key] == want[key], key
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-9, abs=1e-9)
    assert got["std"] == pytest.approx(want["std"], rel=1e-7, abs=1e-7)


# ---------------------------------------------------------------- summarize: by hand

def test_summary_counts_and_throughputs_by_hand():
    s = _summary()
    assert s["kv_eviction_policy"] == "lru"
    assert s["committed_prefill_tokens"] == 123
    assert s["num_requests"] == 5                  # as given: arrivals, not rows counted
    assert s["completed_requests"] == 3
    assert s["total_input_tokens"] == 600          # 100 + 200 + 300
    assert s["total_output_tokens"] == 9           # 5 + 3 + 1
    assert s["duration_ms"] == 45.0                # latest completed terminal time (B)
    assert s["wall_time_ms"] == 2.0
    assert s["request_throughput_rps"] == pytest.approx(3 / 0.045)
    assert s["input_throughput_tok_s"] == pytest.approx(600 / 0.045)
    assert s["output_throughput_tok_s"] == pytest.approx(9 / 0.045)
    assert s["total_throughput_tok_s"] == pytest.approx(609 / 0.045)
    assert s["processed_tokens"] == 609
    assert s["processed_tokens_per_s"] == pytest.approx(609 / 0.002)       # per wall second
    assert s["processed_output_tokens_per_s"] == pytest.approx(9 / 0.002)
    assert s["prefix_cache_reused_ratio"] == pytest.approx(150 / 600)      # 50 + 100 + 0
    assert s["first_admission_prefix_cache_reused_ratio"] == pytest.approx(100 / 600)
    assert s["power_w"] is None and s["power_coverage"] is None
    assert (s["num_ttft_samples"], s["num_tpot_samples"], s["num_e2e_latency_samples"]) == (3, 2, 3)



def test_reuse_ratio_counts_each_requests_largest_hit_of_any_admission():
    # disaggregated rows: a prefill hit of 1,536 and a decode re-admission hit of 3,530
    # count 3,530 (the larger, measured on the reference); a prefill hit of 100 plus 20
    # generated tokens found at a re-admission count 120; the ratio is over 4,000 + 1,000
    rows = [_row(input_length=4000, reused_input_tokens=1536, reused_generated_tokens=0,
                 decode_reused_input_tokens=3530, terminal_time_ms=10.0, arrival_time_ms=0.0),
            _row(input_length=1000, reused_input_tokens=100, reused_generated_tokens=20,
                 decode_reused_input_tokens=0, terminal_time_ms=20.0, arrival_time_ms=0.0)]
    s = _summary(_frame(*rows), gaps=np.array([]), weights=np.array([]))
    assert s["prefix_cache_reused_ratio"] == pytest.approx((3530 + 120) / 5000)

def test_summary_latency_statistics_by_hand():
    s = _summary()
    # TTFT [10, 20, 30]: mean 20; n=3 -> median idx 1, p75 idx round(1.5)=2, p90.. idx 2;
    # population std sqrt((100 + 0 + 100) / 3).
    assert _group(s, "ttft") == _approx({"mean": 20.0, "min": 10.0, "max": 30.0, "median": 20.0,
                                         "p75": 30.0, "p90": 30.0, "p95": 30.0, "p99": 30.0,
                                         "std": math.sqrt(200 / 3)})
    # TTST [5, 10] (C has one token): n=2 -> every percentile idx >= round(0.5) = 1 -> 10.
    two = {"mean": 7.5, "min": 5.0, "max": 10.0, "median": 10.0, "p75": 10.0, "p90": 10.0,
           "p95": 10.0, "p99": 10.0, "std": 2.5}
    assert _group(s, "ttst") == _approx(two)
    # TPOT = per-request tpot_ms [5, 10]: the same numbers.
    assert _group(s, "tpot") == _approx(two)
    # E2E [30, 30, 40]: mean 100/3; median idx 1 -> 30, p75 idx 2 -> 40;
    # variance ((10/3)^2 * 2 + (20/3)^2) / 3 = 200/9.
    assert _group(s, "e2e_latency") == _approx({"mean": 100 / 3, "min": 30.0, "max": 40.0,
                                                "median": 30.0, "p75": 40.0, "p90": 40.0,
                                                "p95": 40.0, "p99": 40.0,
                                                "std": math.sqrt(200 / 9)})


def test_summary_itl_and_per_user_throughput_by_hand():
    s = _summary()
    # Pooled ITL [0, 5, 5, 10, 10, 10], n=6: mean 40/6; median idx round(2.5)=3 -> 10
    # (banker's rounding would pick idx 2 -> 5); p75 idx round(3.75)=4, p90 round(4.5)=5.
    # variance ((20/3)^2 + 2*(5/3)^2 + 3*(10/3)^2) / 6 = (400 + 50 + 300) / 54 = 125/9.
    assert _group(s, "itl") == _approx({"mean": 20 / 3, "min": 0.0, "max": 10.0, "median": 10.0,
                                        "p75": 10.0, "p90": 10.0, "p95": 10.0, "p99": 10.0,
                                        "std": math.sqrt(125 / 9)})
    assert s["max_itl_ms"] == 10.0
    # Per-user throughput, positive gaps only: 1000/5 = 200 x2, 1000/10 = 100 x3,
    # sorted [100, 100, 100, 200, 200], n=5: mean 140; median idx 2 -> 100; p75 idx 3 -> 200;
    # p90 idx round(3.6) = 4; variance (3 * 40^2 + 2 * 60^2) / 5 = 2400.
    assert _group(s, "output_token_throughput_per_user", "") == _approx(
        {"mean": 140.0, "min": 100.0, "max": 200.0, "median": 100.0, "p75": 200.0,
         "p90": 200.0, "p95": 200.0, "p99": 200.0, "std": math.sqrt(2400)})


def test_rejected_and_incomplete_rows_are_excluded():
    with_extra = _summary()
    only_completed = _summary(frame=_frame(A, B, C))
    assert with_extra == only_completed


def test_gpu_hours_arithmetic():
    # Two aggregated workers provisioned for 100.2995 s each (reference §8).
    s = _summary(decode_worker_seconds=2 * 100.2995, decode_gpus_per_worker=1)
    assert s["decode_worker_seconds"] == pytest.approx(200.599)
    assert s["gpu_hours"] == pytest.approx(200.599 / 3600)          # 0.055722...
    assert round(s["gpu_hours"], 5) == 0.05572
    # Disaggregated: 2 prefill x 50 s x 2 GPUs + 4 decode x 50 s x 4 GPUs = 200 + 800 GPU-s.
    s = _summary(prefill_worker_seconds=100.0, prefill_gpus_per_worker=2,
                 decode_worker_seconds=200.0, decode_gpus_per_worker=4)
    assert s["gpu_hours"] == pytest.approx(1000 / 3600)
    assert (s["prefill_gpus_per_worker"], s["decode_gpus_per_worker"]) == (2, 4)


# ---------------------------------------------------------------- goodput

@pytest.mark.parametrize("sla, good", [
    (SlaConfig(ttft_ms=20.0), "AB"),              # A 10, B 20 (inclusive), C 30 fails
    (SlaConfig(itl_ms=5.0), "AC"),                # A 20/4 = 5 ok, B 20/2 = 10 fails, C n=1 skipped
    (SlaConfig(e2e_ms=30.0), "AC"),               # A 30, C 30 (inclusive), B 40 fails
    (SlaConfig(ttft_ms=25.0, itl_ms=5.0), "A"),   # B fails itl, C fails ttft
    (SlaConfig(ttft_ms=1.0), ""),
    (SlaConfig(ttft_ms=1e9, itl_ms=1e9), "ABC"),
])
def test_goodput_rules(sla, good):
    s = _summary(sla=sla)
    out_tokens = {"A": 5, "B": 3, "C": 1}
    assert s["goodput_completed_requests"] == len(good)
    assert s["goodput_request_throughput_rps"] == pytest.approx(len(good) / 0.045)
    assert s["goodput_output_throughput_tok_s"] == pytest.approx(
        sum(out_tokens[r] for r in good) / 0.045)


def test_itl_rule_is_skipped_for_single_token_requests_even_when_ttft_equals_e2e():
    # C alone: e2e - ttft = 0 and n - 1 = 0; the ITL rule must not apply (0/0 would fail it).
    s = _summary(frame=_frame(C), gaps=np.array([]), weights=np.array([], dtype=int),
                 sla=SlaConfig(itl_ms=0.001))
    assert s["goodput_completed_requests"] == 1


def test_goodput_keys_only_when_sla_set():
    assert list(_summary()) == list(SUMMARY_KEYS)
    assert list(_summary(sla=SlaConfig(e2e_ms=1.0))) == list(SUMMARY_KEYS) + list(GOODPUT_KEYS)


# ---------------------------------------------------------------- shape, types, edge cases

def test_key_names_and_order():
    keys = list(_summary())
    assert keys[:6] == ["kv_eviction_policy", "committed_prefill_tokens", "num_requests",
                        "completed_requests", "total_input_tokens", "total_output_tokens"]
    assert keys.index("num_e2e_latency_samples") + 1 == keys.index("mean_ttft_ms")
    assert keys[keys.index("mean_ttft_ms"):keys.index("mean_ttft_ms") + 9] == [
        "mean_ttft_ms", "min_ttft_ms", "max_ttft_ms", "median_ttft_ms", "p75_ttft_ms",
        "p90_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "std_ttft_ms"]
    assert keys[-1] == "std_output_token_throughput_per_user"
    assert len(keys) == 27 + 6 * 9 and len(set(keys)) == len(keys)


def test_values_are_plain_json_types():
    s = _summary(sla=SlaConfig(ttft_ms=20.0))
    for key, value in s.items():
        assert type(value) in (int, float, str, type(None)), (key, type(value))
    json.dumps(s, allow_nan=False)


def test_nothing_completed_gives_zeros_and_nulls():
    for frame in (_frame(REJECTED, INCOMPLETE), _frame()):
        s = _summary(frame=frame, gaps=np.array([]), weights=np.array([], dtype=int),
                     wall_time_ms=0.0, sla=SlaConfig(ttft_ms=1.0))
        assert s["completed_requests"] == 0 and s["duration_ms"] == 0.0
        for key in ("request_throughput_rps", "input_throughput_tok_s", "output_throughput_tok_s",
                    "total_throughput_tok_s", "processed_tokens_per_s",
                    "processed_output_tokens_per_s", "prefix_cache_reused_ratio",
                    "first_admission_prefix_cache_reused_ratio",
                    "goodput_request_throughput_rps", "goodput_output_throughput_tok_s"):
            assert s[key] == 0.0, key
        assert (s["num_ttft_samples"], s["num_tpot_samples"], s["num_e2e_latency_samples"]) == (0, 0, 0)
        # no samples: every statistic 0.0, as the reference reports it
        for metric in ("ttft", "ttst", "tpot", "itl", "e2e_latency"):
            assert _group(s, metric) == {k: 0.0 for k in STATS}
        assert _group(s, "output_token_throughput_per_user", "") == {k: 0.0 for k in STATS}
        json.dumps(s, allow_nan=False)


def test_zero_duration_with_a_completed_request():
    # Everything at t = 0: a finished request but no elapsed time -> throughputs 0, no error.
    r = _row(arrival_time_ms=0.0, first_token_ms=0.0, last_token_ms=0.0, terminal_time_ms=0.0,
             ttft_ms=0.0, e2e_latency_ms=0.0, input_length=10, output_length=1)
    s = _summary(frame=_frame(r), gaps=np.array([]), weights=np.array([], dtype=int),
                 sla=SlaConfig(ttft_ms=1.0))
    assert s["duration_ms"] == 0.0 and s["completed_requests"] == 1
    assert s["request_throughput_rps"] == 0.0 and s["goodput_request_throughput_rps"] == 0.0
    assert s["goodput_completed_requests"] == 1
    assert s["mean_ttft_ms"] == 0.0 and s["mean_itl_ms"] == 0.0 and s["num_tpot_samples"] == 0


def test_only_zero_gaps_give_itl_but_no_per_user_throughput():
    s = _summary(gaps=np.array([0.0]), weights=np.array([4]))
    assert s["mean_itl_ms"] == 0.0 and s["p99_itl_ms"] == 0.0 and s["std_itl_ms"] == 0.0
    assert s["mean_output_token_throughput_per_user"] == 0.0     # no positive gap


@pytest.mark.parametrize("gaps, weights", [
    (np.array([-1.0]), np.array([1])), (np.array([NAN]), np.array([1])),
    (np.array([1.0, 2.0]), np.array([1])), (np.array([1.0]), np.array([0.5])),
])
def test_bad_itl_samples_are_rejected(gaps, weights):
    with pytest.raises(ValueError):
        _summary(gaps=gaps, weights=weights)


def test_missing_columns_are_reported():
    with pytest.raises(ValueError, match="ttst_ms"):
        _summary(frame=_frame(A, B, C).drop(columns=["ttst_ms"]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 3.25, 7.0, 12.5, 40.0]),
                          st.integers(1, 30)), min_size=1, max_size=30))
def test_summary_itl_keys_equal_expanded_samples(pairs):
    gaps = np.array([g for g, _ in pairs])
    weights = np.array([w for _, w in pairs])
    s = _summary(gaps=gaps, weights=weights)
    expanded = np.repeat(gaps, weights)
    want = _expanded_stats(expanded, np.ones(expanded.size, dtype=int))
    got = _group(s, "itl")
    for key in ("min", "max", "median", "p75", "p90", "p95", "p99"):
        assert got[key] == want[key], key
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-9)
    assert got["std"] == pytest.approx(want["std"], rel=1e-7, abs=1e-9)
    positive = expanded[expanded > 0]
    got = _group(s, "output_token_throughput_per_user", "")
    if positive.size == 0:
        assert got == {k: 0.0 for k in STATS}
    else:
        want = _expanded_stats(1000.0 / positive, np.ones(positive.size, dtype=int))
        for key in ("min", "max", "median", "p75", "p90", "p95", "p99"):
            assert got[key] == want[key], key
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-9)
