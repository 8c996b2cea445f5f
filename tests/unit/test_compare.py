"""simmodel.compare (unit tier, pure pandas): summaries side by side, measured files,
percentile errors and Kolmogorov–Smirnov distances, all checked against hand-computed
values."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from simmodel.compare import (HEADLINE_KEYS, compare_measured, compare_summaries,
                              format_table, ks_distance, load_measured, nearest_rank,
                              relative_difference)
from simmodel.errors import UserError

nan = math.nan


# --------------------------------------------------------------------------- KS, percentiles


def test_ks_distance_by_hand():
    # pooled 1 2 2 3 4:  F_a = 1/3 2/3 2/3 1 1,  F_b = 0 1/2 1/2 1/2 1
    # |F_a - F_b|        = 1/3 1/6 1/6 1/2 0  -> sup = 1/2 (at x = 3)
    assert ks_distance(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0])) == pytest.approx(0.5)
    assert ks_distance(np.array([2.0, 4.0]), np.array([3.0, 1.0, 2.0])) == pytest.approx(0.5)


def test_ks_distance_ties_identical_disjoint_empty():
    # at 1: 2/3 vs 1/3, at 2: 1 vs 1  -> 1/3
    assert ks_distance([1, 1, 2], [1, 2, 2]) == pytest.approx(1 / 3)
    assert ks_distance([5, 1, 3], [1, 3, 5]) == 0.0
    assert ks_distance([1, 2], [3, 4, 5]) == 1.0
    assert math.isnan(ks_distance([], [1.0]))
    assert math.isnan(ks_distance([1.0], []))


def test_nearest_rank_is_the_summary_definition():
    x = np.array([40.0, 10.0, 30.0, 20.0])
    # index round((n-1)·p/100) half away from zero: p50 -> 1.5 -> 2; p90 -> 2.7 -> 3
    assert nearest_rank(x, 50) == 30.0
    assert nearest_rank(x, 90) == 40.0
    assert nearest_rank(x, 0) == 10.0
    assert math.isnan(nearest_rank(np.array([]), 50))


def test_relative_difference():
    got = relative_difference([110.0, 90.0, 5.0, 1.0, nan], [100.0, 100.0, 0.0, nan, 2.0])
    np.testing.assert_allclose(got, [0.1, -0.1, nan, nan, nan])
    assert relative_difference(-3.0, -2.0) == pytest.approx(-0.5)     # |base|


# --------------------------------------------------------------------------- compare_measured


def sim_requests() -> pd.DataFrame:
    return pd.DataFrame({
        "ttft_ms": [10.0, 20.0, 30.0, 40.0, 1000.0, nan],
        "e2e_latency_ms": [100.0, 200.0, 300.0, 400.0, 9000.0, nan],
        "tpot_ms": [1.0, 2.0, 3.0, 4.0, 5.0, nan],
        "terminal_status": ["completed"] * 4 + ["rejected", "completed"],
    })


def test_compare_measured_percentiles_and_ks():
    measured = pd.DataFrame({"ttft_ms": [20.0, 20.0, 25.0, 50.0, 50.0]})
    table = compare_measured(sim_requests(), measured, percentiles=(50, 90))
    # only ttft is in the measured data; the rejected request and the NaN are left out
    assert list(table.index) == [("ttft_ms", "p50"), ("ttft_ms", "p90"), ("ttft_ms", "ks")]
    assert table.index.names == ["metric", "statistic"]
    # sim sorted 10 20 30 40: p50 -> index 2 = 30, p90 -> index 3 = 40
    # measured sorted 20 20 25 50 50: p50 -> index 2 = 25, p90 -> 3.6 -> 4 = 50
    p50, p90, ks = (table.loc[("ttft_ms", s)] for s in ("p50", "p90", "ks"))
    assert (p50.simulated, p50.measured) == (30.0, 25.0)
    assert p50.rel_error == pytest.approx(0.2)             # (30 - 25) / 25
    assert (p90.simulated, p90.measured) == (40.0, 50.0)
    assert p90.rel_error == pytest.approx(-0.2)
    assert math.isnan(p50.ks_distance)
    # F_sim: 10->.25 20->.5 25->.5 30->.75 40->1 50->1
    # F_meas:10->0  20->.4 25->.6 30->.6  40->.6 50->1   -> sup 0.4 at 40
    assert ks.ks_distance == pytest.approx(0.4)
    assert (ks.simulated, ks.measured) == (4.0, 5.0)        # sample counts
    assert math.isnan(ks.rel_error)


def test_compare_measured_tpot_from_itl_and_all_metrics():
    measured = pd.DataFrame({"ttft_ms": [10.0, 20.0, 30.0, 40.0],
                             "e2e_latency_ms": [100.0, 200.0, 300.0, 400.0],
                             "tpot_ms": [2.0, 2.0, 2.0, 2.0]})
    table = compare_measured(sim_requests(), measured,
                             metrics=("ttft_ms", "e2e_latency_ms", "tpot_ms"), percentiles=(50,))
    assert table.loc[("ttft_ms", "ks"), "ks_distance"] == 0.0
    assert table.loc[("e2e_latency_ms", "p50"), "rel_error"] == 0.0
    assert table.loc[("tpot_ms", "p50"), "simulated"] == 3.0     # the tpot_ms column
    assert table.loc[("tpot_ms", "p50"), "rel_error"] == pytest.approx(0.5)


def test_measured_itl_column_is_compared_with_the_simulated_tpot():
    # a per-request itl_ms of a measured file is that request's mean gap: sim tpot_ms
    table = compare_measured(sim_requests(), pd.DataFrame({"ttft_ms": [10.0],
                                                           "itl_ms": [4.0, ][:1]}),
                             metrics=("ttft_ms", "itl_ms"), percentiles=(50,))
    assert table.loc[("itl_ms", "p50"), "simulated"] == 3.0   # median of 1, 2, 3, 4 (nearest rank)
    assert table.loc[("itl_ms", "p50"), "rel_error"] == pytest.approx(-0.25)


def test_compare_measured_measured_zero_and_empty():
    measured = pd.DataFrame({"ttft_ms": [0.0, 0.0], "e2e_latency_ms": [nan, nan]})
    table = compare_measured(sim_requests(), measured, percentiles=(50,))
    assert table.loc[("ttft_ms", "p50"), "measured"] == 0.0
    assert math.isnan(table.loc[("ttft_ms", "p50"), "rel_error"])          # base 0
    assert math.isnan(table.loc[("e2e_latency_ms", "p50"), "measured"])     # no sample
    assert table.loc[("e2e_latency_ms", "ks"), "measured"] == 0.0
    assert math.isnan(table.loc[("e2e_latency_ms", "ks"), "ks_distance"])


def test_compare_measured_errors():
    with pytest.raises(ValueError, match="none of the metrics ttft_ms, e2e_latency_ms"):
        compare_measured(sim_requests(), pd.DataFrame({"itl_ms": [1.0]}))
    with pytest.raises(ValueError, match="ttst_ms: not a column of the simulated requests"):
        compare_measured(sim_requests(), pd.DataFrame({"ttst_ms": [1.0]}), metrics=("ttst_ms",))


# --------------------------------------------------------------------------- compare_summaries


def test_compare_summaries_rel_diffs():
    a = {"completed_requests": 10, "mean_ttft_ms": 50.0, "gpu_hours": 0.0,
         "p99_ttft_ms": None, "duration_ms": 1000.0}
    b = {"completed_requests": 12, "mean_ttft_ms": 40.0, "gpu_hours": 0.5,
         "p99_ttft_ms": 70.0}
    c = {"completed_requests": 10, "mean_ttft_ms": 75.0, "gpu_hours": 0.0,
         "p99_ttft_ms": 60.0, "duration_ms": 900.0}
    table = compare_summaries({"a": a, "b": b, "c": c})
    assert list(table.index) == list(HEADLINE_KEYS)            # no goodput key anywhere
    assert list(table.columns) == ["a", "b", "c", "rel_diff_b", "rel_diff_c"]
    assert table.loc["completed_requests", "rel_diff_b"] == pytest.approx(0.2)
    assert table.loc["mean_ttft_ms", "rel_diff_b"] == pytest.approx(-0.2)
    assert table.loc["mean_ttft_ms", "rel_diff_c"] == pytest.approx(0.5)
    assert table.loc["duration_ms", "rel_diff_c"] == pytest.approx(-0.1)
    assert math.isnan(table.loc["duration_ms", "b"])             # missing in b
    assert math.isnan(table.loc["duration_ms", "rel_diff_b"])
    assert math.isnan(table.loc["gpu_hours", "rel_diff_b"])      # base 0
    assert math.isnan(table.loc["p99_ttft_ms", "a"])             # None
    assert math.isnan(table.loc["p99_ttft_ms", "rel_diff_c"])    # base NaN
    assert math.isnan(table.loc["mean_tpot_ms", "a"])   # in no summary


def test_compare_summaries_goodput_and_one_run():
    table = compare_summaries({"x": {"mean_ttft_ms": 1.0, "goodput_completed_requests": 3,
                                     "goodput_request_throughput_rps": 2.5}})
    assert list(table.columns) == ["x"]
    assert list(table.index)[-2:] == ["goodput_completed_requests",
                                      "goodput_request_throughput_rps"]
    assert table.loc["goodput_completed_requests", "x"] == 3.0


def test_compare_summaries_explicit_keys():
    runs = {"a": {"p90_ttft_ms": 10.0, "kv_eviction_policy": "lru"},
            "b": {"p90_ttft_ms": 11.0, "kv_eviction_policy": "lru"}}
    table = compare_summaries(runs, keys=["kv_eviction_policy", "p90_ttft_ms", "p90_ttft_ms"])
    assert list(table.index) == ["kv_eviction_policy", "p90_ttft_ms"]      # order, no dupes
    assert table.loc["kv_eviction_policy", "b"] == "lru"
    assert math.isnan(table.loc["kv_eviction_policy", "rel_diff_b"])      # not a number
    assert table.loc["p90_ttft_ms", "rel_diff_b"] == pytest.approx(0.1)


def test_compare_summaries_errors():
    with pytest.raises(ValueError, match="^unknown keys nope, p91_ttft_ms \\(in no summary\\)$"):
        compare_summaries({"a": {"p90_ttft_ms": 1.0}}, keys=["nope", "p90_ttft_ms", "p91_ttft_ms"])
    with pytest.raises(ValueError, match="^unknown key nope "):
        compare_summaries({"a": {}}, keys=["nope"])
    with pytest.raises(ValueError, match="no run"):
        compare_summaries({})


def test_format_table():
    table = compare_summaries({"base": {"completed_requests": 40, "mean_ttft_ms": 41.79020627},
                               "new": {"completed_requests": 40, "mean_ttft_ms": 50.0}},
                              keys=["completed_requests", "mean_ttft_ms"])
    lines = format_table(table).splitlines()
    assert lines[0].split() == ["metric", "base", "new", "rel_diff_new"]
    assert lines[1].split() == ["completed_requests", "40", "40", "+0.00%"]
    assert lines[2].split() == ["mean_ttft_ms", "41.7902", "50", "+19.65%"]
    assert len({len(line) for line in lines}) == 1          # fixed width, right-aligned
    measured = format_table(compare_measured(sim_requests(), pd.DataFrame({"ttft_ms": [30.0]}),
                                             percentiles=(50,)))
    # ks: F_sim(20) = 0.5 against F_meas(20) = 0
    assert measured.splitlines()[2].split() == ["ttft_ms", "ks", "4", "1", "-", "0.5000"]


# --------------------------------------------------------------------------- load_measured


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_load_csv_ms_and_optional_columns(tmp_path):
    path = write(tmp_path, "m.csv", "id,ttft_ms,latency_ms,itl,other\n"
                                    "a,10.5,100,2,x\n\nb,,200,3,y\n")
    df = load_measured(path)
    assert list(df.columns) == ["ttft_ms", "e2e_latency_ms", "itl_ms"]
    np.testing.assert_array_equal(df.ttft_ms, [10.5, nan])       # empty cell -> NaN
    np.testing.assert_array_equal(df.e2e_latency_ms, [100.0, 200.0])
    np.testing.assert_array_equal(df.itl_ms, [2.0, 3.0])


def test_load_seconds_are_converted(tmp_path):
    df = load_measured(write(tmp_path, "m.csv", "ttft_s,e2e_s,tpot_s\n0.25,1.5,0.01\n"))
    assert df.ttft_ms.tolist() == [250.0]
    assert df.e2e_latency_ms.tolist() == [1500.0]
    assert df.tpot_ms.tolist() == [10.0]


def test_load_jsonl_aliases_and_preference(tmp_path):
    lines = [{"ttft": 12, "e2e": 300, "e2e_ms": 301.5}, {"ttft": 14.5, "e2e_ms": None}]
    path = write(tmp_path, "m.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    df = load_measured(path)
    assert df.ttft_ms.tolist() == [12.0, 14.5]
    np.testing.assert_array_equal(df.e2e_latency_ms, [301.5, nan])   # e2e_ms before e2e


def test_load_json_array_and_json_lines(tmp_path):
    array = write(tmp_path, "a.json", json.dumps([{"e2e_latency_ms": 5}, {"e2e_latency_ms": 6}],
                                                 indent=2))
    assert load_measured(array).e2e_latency_ms.tolist() == [5.0, 6.0]
    lines = write(tmp_path, "l.json", '{"ttft_s": 0.002}\n{"ttft_s": "0.004"}\n')
    assert load_measured(lines).ttft_ms.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("name,text,expected", [
    ("m.csv", "id,latency\n1,20\n",
     "no TTFT or E2E latency column (accepted names: ttft_ms, ttft, ttft_s; "
     "e2e_latency_ms, e2e_ms, e2e, latency_ms, e2e_s)"),
    ("m.csv", "ttft_ms\n1\nfast\n", "line 3: ttft_ms: must be a non-negative number, got 'fast'"),
    ("m.csv", "ttft_ms\n-1\n", "line 2: ttft_ms: must be a non-negative number, got '-1'"),
    ("m.csv", "ttft_ms,e2e_ms\n1,2\n3\n", "line 3: expected 2 fields (as in the header), got 1"),
    ("m.csv", "", "empty file (no requests)"),
    ("m.csv", "ttft_ms,e2e_ms\n", "empty file (no requests)"),
    ("m.jsonl", "\n\n", "empty file (no requests)"),
    ("m.jsonl", '{"ttft_ms": 1}\n{"ttft_ms": 2,\n',
     "line 2: invalid JSON: Expecting property name enclosed in double quotes"),
    ("m.jsonl", '{"ttft_ms": 1}\n[1, 2]\n', "line 2: expected a JSON object, got a list"),
    ("m.jsonl", '{"ttft_ms": true}\n', "line 1: ttft_ms: must be a non-negative number, got True"),
    ("m.json", '[{"e2e": 1}, 7]', "element 1: expected a JSON object, got a number"),
    ("m.json", '[{"e2e": 1},\n {"e2e": }]', "line 2: invalid JSON: Expecting value"),
    ("m.txt", "ttft_ms\n1\n", "unknown measured-file format '.txt'; expected .csv, .jsonl or .json"),
])
def test_load_measured_errors(tmp_path, name, text, expected):
    path = write(tmp_path, name, text)
    with pytest.raises(UserError) as info:
        load_measured(path)
    message = str(info.value)
    assert "\n" not in message
    assert message == f"{path}: {expected}"


def test_load_measured_missing_file(tmp_path):
    path = str(tmp_path / "none.csv")
    with pytest.raises(UserError, match="none.csv: cannot read measured file: No such file"):
        load_measured(path)


def test_load_measured_not_utf8(tmp_path):
    path = tmp_path / "m.csv"
    path.write_bytes(b"ttft_ms\n\xff\xfe\n")
    with pytest.raises(UserError, match="m.csv: cannot read measured file: not UTF-8 text"):
        load_measured(str(path))
