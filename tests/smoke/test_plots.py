"""Plots: the pure data helpers, the data each plot draws, and every figure rendering to PNG.

Real results come from two sub-second runs (``scenarios/tiny.yaml`` and a small
disaggregated scenario); telemetry is built by hand with the ``TELEMETRY_COLUMNS`` schema.
"""
from __future__ import annotations

import ast
import dataclasses
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import simmodel  # noqa: E402
from simmodel import plots  # noqa: E402
from simmodel.result import PASS_COLUMNS, TELEMETRY_COLUMNS, Result  # noqa: E402
from simmodel.scenario import scenario_from_dict  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMES = (0.0, 10.0, 20.0, 30.0)


@pytest.fixture(scope="module")
def agg() -> Result:
    return simmodel.run(simmodel.load_scenario(os.path.join(REPO, "scenarios", "tiny.yaml")))


@pytest.fixture(scope="module")
def disagg() -> Result:
    scenario = scenario_from_dict({
        "workload": {"synthetic": {"requests": 30, "input_tokens": 1000, "output_tokens": 20,
                                   "arrival_interval_ms": 30.0}},
        "cluster": {"prefill": {"workers": 1}, "decode": {"workers": 2},
                    "kv_transfer": {"bandwidth_gb_s": 25, "bytes_per_token": 131072}},
    }, base_dir=REPO, source="test")
    return simmodel.run(scenario)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def telemetry_frame(pool: str = "agg") -> pd.DataFrame:
    """Two workers, four samples; KV totals vary so a stack top is not a constant."""
    rows = []
    for i, t in enumerate(TIMES):
        for w in (0, 1):
            levels = {"kv_blocks_active": 10 * i + w, "kv_blocks_cached": 5 + i,
                      "kv_blocks_free": 100 - 3 * i, "running": i + w, "waiting": 3 - i}
            rows += [(t, pool, w, metric, float(v)) for metric, v in levels.items()]
        rows.append((t, pool, -1, "router_queue", float(2 * i)))
    return pd.DataFrame(rows, columns=list(TELEMETRY_COLUMNS))


def with_telemetry(result: Result, telemetry: pd.DataFrame) -> Result:
    return dataclasses.replace(result, telemetry=telemetry)


def lines_by_gid(ax) -> dict:
    return {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}


def assert_png(fig, path) -> None:
    fig.savefig(path, dpi=40)            # small: the test is about rendering at all
    data = path.read_bytes()
    assert len(data) > 500 and data.startswith(PNG_MAGIC)


# -- pure data helpers ------------------------------------------------------------------------

def test_cdf_points_sorts_drops_nan_and_reaches_one():
    x, y = plots.cdf_points([3.0, np.nan, 1.0, 2.0, 2.0])
    assert x.tolist() == [1.0, 2.0, 2.0, 3.0]
    assert y.tolist() == [0.25, 0.5, 0.75, 1.0]
    for empty in ([], [np.nan]):
        x, y = plots.cdf_points(empty)
        assert x.size == 0 and y.size == 0


def test_ttft_components_sum_to_ttft_on_a_disaggregated_run(disagg):
    parts = plots.ttft_components(disagg.requests)
    names = [name for name, _, _ in plots.TTFT_COMPONENTS]
    assert list(parts.columns) == names + ["ttft_ms"]
    done = disagg.requests[disagg.requests["terminal_status"] == "completed"]
    assert len(parts) == done["first_token_ms"].notna().sum() == 30
    np.testing.assert_allclose(parts[names].sum(axis=1), parts["ttft_ms"], rtol=1e-9, atol=0)
    assert (parts[names] >= 0).all().all()
    assert parts["kv_transfer"].gt(0).all()          # 1000 tokens over a 25 GB/s link


def test_ttft_components_refuse_an_aggregated_run(agg):
    with pytest.raises(ValueError, match="TTFT breakdown needs a disaggregated run"):
        plots.ttft_components(agg.requests)


def test_pass_shares_are_fractions_summing_to_one(agg):
    shares = plots.pass_shares(agg.passes, 0)
    assert len(shares) == (agg.passes["worker"] == 0).sum()
    assert shares["prefill_share"].between(0, 1).all()
    np.testing.assert_allclose(shares["prefill_share"] + shares["decode_share"], 1.0)
    assert shares["start_ms"].is_monotonic_increasing
    assert shares["prefill_share"].max() > 0.9 and shares["decode_share"].max() == 1.0


def test_pass_shares_of_an_empty_pass_and_pool_choice():
    passes = pd.DataFrame([("prefill", 0, 0.0, 1.0, 300, 1, 0, 0, 5),
                           ("decode", 0, 0.0, 1.0, 100, 1, 100, 900, 5),
                           ("decode", 0, 1.0, 2.0, 0, 0, 0, 0, 5)], columns=list(PASS_COLUMNS))
    decode = plots.pass_shares(passes, 0)            # pool=None: the decode pool
    assert decode["prefill_share"].tolist() == [0.5, 0.0]
    assert decode["decode_share"].tolist() == [0.5, 1.0]
    assert plots.pass_shares(passes, 0, pool="prefill")["prefill_share"].tolist() == [1.0]
    with pytest.raises(ValueError, match="no data for worker 3"):
        plots.pass_shares(passes, 3)


def test_telemetry_series_pivots_one_column_per_worker():
    tel = telemetry_frame()
    wide = plots.telemetry_series(tel, "running")
    assert wide.shape == (len(TIMES), 2)
    assert wide.index.name == "time_ms" and wide.index.tolist() == list(TIMES)
    assert wide.columns.tolist() == [0, 1]
    assert wide[1].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert plots.telemetry_series(tel, "waiting", worker=0).shape == (len(TIMES), 1)
    assert plots.telemetry_series(tel, "router_queue").columns.tolist() == [-1]
    assert plots.telemetry_series(tel, "preemptions").empty      # known, not sampled


def test_telemetry_series_errors():
    tel = telemetry_frame()
    with pytest.raises(ValueError, match="unknown telemetry metric 'runing'"):
        plots.telemetry_series(tel, "runing")
    with pytest.raises(ValueError, match="no telemetry"):
        plots.telemetry_series(None, "running")
    both = pd.concat([telemetry_frame("prefill"), telemetry_frame("decode")])
    with pytest.raises(ValueError, match="pass pool="):
        plots.telemetry_series(both, "running")
    assert plots.telemetry_series(both, "running", pool="decode").shape == (len(TIMES), 2)


# -- what the plots draw ----------------------------------------------------------------------

def test_cdf_draws_one_monotone_curve_per_run_reaching_one(agg, disagg):
    fig, ax = plt.subplots()
    assert plots.cdf({"agg": agg, "disagg": disagg}, ax=ax) is ax
    curves = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("cdf:")]
    assert [c.get_label() for c in curves] == ["agg", "disagg"]
    for curve, run in zip(curves, (agg, disagg)):
        x, y = curve.get_xdata(), curve.get_ydata()
        assert np.all(np.diff(y) >= 0) and y[-1] == 1.0
        np.testing.assert_array_equal(x[1:], np.sort(run.requests["ttft_ms"]))
    assert ax.get_legend() is not None and ax.get_xlabel() and ax.get_ylabel()


def test_cdf_counts_completed_requests_only():
    requests = pd.DataFrame({"ttft_ms": [1.0, 2.0, 50.0, np.nan],
                             "terminal_status": ["completed", "completed", "rejected",
                                                 "completed"]})
    ax = plots.cdf([requests, requests])
    curves = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("cdf:")]
    assert len(curves) == 2
    assert curves[0].get_xdata().tolist() == [1.0, 1.0, 2.0]
    assert curves[0].get_ydata().tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("metric,key", [("ttft_ms", "ttft"), ("tpot_ms", "tpot"),
                                        ("e2e_latency_ms", "e2e_latency")])
def test_percentile_markers_match_the_summary(agg, metric, key):
    ax = plots.cdf(agg, metric, percentiles=(50, 90, 99))
    marks = lines_by_gid(ax)["percentiles:tiny"]
    expected = [agg.summary[f"{name}_{key}_ms"] for name in ("median", "p90", "p99")]
    np.testing.assert_allclose(marks.get_xdata(), expected, rtol=0, atol=0)
    np.testing.assert_allclose(marks.get_ydata(), [0.5, 0.9, 0.99])
    # numpy's "nearest" agrees here: its one half rank (p50 of 40: 19.5) rounds to even, 20,
    # which is also the summary's round-half-away-from-zero.
    values = agg.requests[metric].dropna()
    np.testing.assert_allclose(marks.get_xdata(),
                               np.percentile(values, [50, 90, 99], method="nearest"))


def test_cdf_sla_line_log_axis_and_bad_metric(agg):
    ax = plots.cdf(agg, sla_ms=40.0, log_x=True, percentiles=())
    gids = lines_by_gid(ax)
    assert list(gids["sla"].get_xdata()) == [40.0, 40.0]
    assert "percentiles:tiny" not in gids
    assert ax.get_xscale() == "log"
    with pytest.raises(ValueError, match="cannot plot a CDF of 'itl_ms' \\(the per-request column is now called tpot_ms\\)"):
        plots.cdf(agg, "itl_ms")
    with pytest.raises(ValueError, match="no runs"):
        plots.cdf({})


def test_pass_timeline_bars_are_the_pass_shares(agg):
    fig, ax = plt.subplots()
    assert plots.pass_timeline(agg.passes, worker=1, ax=ax) is ax
    shares = plots.pass_shares(agg.passes, 1)
    bars = {c.get_gid(): c for c in ax.collections}
    prefill = np.array([p.vertices for p in bars["prefill"].get_paths()])
    decode = np.array([p.vertices for p in bars["decode"].get_paths()])
    assert len(prefill) == len(decode) == len(shares)
    np.testing.assert_allclose(prefill[:, 0, 0], shares["start_ms"])
    np.testing.assert_allclose(prefill[:, 1, 0], shares["end_ms"])
    np.testing.assert_allclose(prefill[:, 2, 1] - prefill[:, 0, 1], shares["prefill_share"])
    np.testing.assert_allclose(decode[:, 2, 1] - decode[:, 0, 1], shares["decode_share"])
    np.testing.assert_allclose(decode[:, 2, 1], 1.0)


def test_kv_occupancy_stacks_telemetry_levels():
    tel = telemetry_frame()
    result = Result(summary={}, requests=pd.DataFrame(),
                    passes=pd.DataFrame(columns=list(PASS_COLUMNS)), telemetry=tel)
    ax = plots.kv_occupancy(result, worker=1)
    layers = {c.get_gid(): c for c in ax.collections}
    assert list(layers) == ["kv_blocks_active", "kv_blocks_cached", "kv_blocks_free"]
    mine = tel[tel["worker"] == 1].pivot(index="time_ms", columns="metric", values="value")
    totals = mine[list(layers)].sum(axis=1)
    top = layers["kv_blocks_free"].get_paths()[0].vertices
    for t, total in totals.items():
        assert top[top[:, 0] == t, 1].max() == pytest.approx(total)
    active = layers["kv_blocks_active"].get_paths()[0].vertices
    for t, value in mine["kv_blocks_active"].items():
        assert active[active[:, 0] == t, 1].max() == pytest.approx(value)


def test_kv_occupancy_falls_back_to_passes(agg):
    ax = plots.kv_occupancy(agg)                      # no telemetry in this result
    line = lines_by_gid(ax)["kv_blocks_active"]
    rows = agg.passes[agg.passes["worker"] == 0]
    np.testing.assert_array_equal(line.get_xdata()[:-1], rows["start_ms"])
    np.testing.assert_array_equal(line.get_ydata()[:-1], rows["kv_blocks_active"])
    assert line.get_xdata()[-1] == rows["end_ms"].iloc[-1]
    assert plots.kv_occupancy(agg.passes).get_lines()[0].get_ydata().size == len(rows) + 1


def test_queue_depth_draws_running_waiting_and_router_queue():
    tel = telemetry_frame()
    ax = plots.queue_depth(tel, worker=1)
    lines = lines_by_gid(ax)
    assert set(lines) == {"running", "waiting", "router_queue"}
    assert lines["running"].get_ydata().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert lines["waiting"].get_ydata().tolist() == [3.0, 2.0, 1.0, 0.0]
    assert lines["router_queue"].get_ydata().tolist() == [0.0, 2.0, 4.0, 6.0]
    assert ax.get_legend() is not None
    with pytest.raises(ValueError, match="no telemetry"):
        plots.queue_depth(None)


def test_ttft_breakdown_bars_stack_to_mean_ttft(disagg):
    fig, ax = plt.subplots()
    assert plots.ttft_breakdown({"a": disagg, "b": disagg.requests}, ax=ax) is ax
    parts = plots.ttft_components(disagg.requests)
    tops = np.zeros(2)
    for name, _, _ in plots.TTFT_COMPONENTS:
        bars = [p for p in ax.patches if p.get_gid() == f"component:{name}"]
        assert len(bars) == 2
        np.testing.assert_allclose([b.get_height() for b in bars], parts[name].mean())
        tops = np.array([b.get_y() + b.get_height() for b in bars])
    np.testing.assert_allclose(tops, parts["ttft_ms"].mean())


def test_ttft_breakdown_box_and_errors(agg, disagg):
    ax = plots.ttft_breakdown(disagg, kind="box")
    assert len(ax.get_xticks()) == len(plots.TTFT_COMPONENTS)
    with pytest.raises(ValueError, match="unknown breakdown kind"):
        plots.ttft_breakdown(disagg, kind="pie")
    with pytest.raises(ValueError, match="disaggregated"):
        plots.ttft_breakdown(agg)


def test_throughput_latency_points_and_labels(agg, disagg):
    summaries = [{"output_throughput_tok_s": 10.0, "p99_ttft_ms": 5.0},
                 {"output_throughput_tok_s": 20.0, "p99_ttft_ms": 9.0}]
    ax = plots.throughput_latency(summaries, labels=["1 rps", "2 rps"])
    line = lines_by_gid(ax)["throughput_latency"]
    assert list(line.get_xdata()) == [10.0, 20.0] and list(line.get_ydata()) == [5.0, 9.0]
    assert [t.get_text() for t in ax.texts] == ["1 rps", "2 rps"]
    assert ax.get_xlabel() == "output throughput (tok/s)"
    ax = plots.throughput_latency({"agg": agg, "disagg": disagg}, y="mean_e2e_latency_ms")
    line = lines_by_gid(ax)["throughput_latency"]
    assert list(line.get_ydata()) == [agg.summary["mean_e2e_latency_ms"],
                                      disagg.summary["mean_e2e_latency_ms"]]
    with pytest.raises(ValueError, match="has no key 'p42_ttft_ms'"):
        plots.throughput_latency([agg], y="p42_ttft_ms")


# -- figures ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", plots.FIGURE_KINDS)
def test_figure_for_renders_every_kind(agg, disagg, kind, tmp_path):
    fig = plots.figure_for(kind, {"disagg": disagg, "agg": agg} if kind != "breakdown"
                           else {"disagg": disagg}, sla_ms=60.0, log_x=True)
    assert_png(fig, tmp_path / f"{kind}.png")


def test_timeline_figure_with_and_without_telemetry(agg, tmp_path):
    fig = plots.timeline_figure(agg)
    assert len(fig.axes) == 3
    assert "running" in lines_by_gid(fig.axes[2])                 # from passes
    assert fig.axes[1].get_lines()[0].get_gid() == "kv_blocks_active"
    assert_png(fig, tmp_path / "plain.png")
    fig = plots.timeline_figure(with_telemetry(agg, telemetry_frame()), worker=1)
    assert {"running", "waiting", "router_queue"} <= set(lines_by_gid(fig.axes[2]))
    assert len(fig.axes[1].collections) == 3                      # stacked KV
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[2])
    assert_png(fig, tmp_path / "telemetry.png")


def test_timeline_of_a_disaggregated_run_defaults_to_decode(disagg):
    fig = plots.timeline_figure(disagg)
    assert fig.axes[0].get_title().startswith("decode worker 0")
    fig = plots.timeline_figure(disagg, pool="prefill")
    assert fig.axes[0].get_title().startswith("prefill worker 0")


def test_figure_for_errors(agg):
    with pytest.raises(ValueError, match="unknown figure kind 'pie'") as err:
        plots.figure_for("pie", {"agg": agg})
    assert "\n" not in str(err.value)
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="TTFT breakdown needs a disaggregated run"):
        plots.figure_for("breakdown", {"agg": agg})
    with pytest.raises(ValueError, match="no data for worker 7"):
        plots.figure_for("timeline", {"agg": agg}, worker=7)
    with pytest.raises(ValueError, match="no runs"):
        plots.figure_for("cdf", {})
    assert plt.get_fignums() == before                             # no half-built figures


def test_plot_modules_import_matplotlib_only_inside_functions():
    # Checked on the source (a fresh interpreter would cost a second): no module-level
    # matplotlib import, so importing simmodel.plots sets no backend.
    folder = os.path.join(REPO, "simmodel", "plots")
    modules = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    assert "__init__.py" in modules and len(modules) >= 4
    for name in modules:
        tree = ast.parse(open(os.path.join(folder, name), encoding="utf-8").read())
        for node in tree.body:
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(m.split(".")[0] == "matplotlib" for m in imported), name
