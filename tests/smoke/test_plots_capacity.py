"""Capacity plots of a sweep folder: the pure helpers, the data each plot draws, the folder
loader, every figure rendering to PNG, and `simmodel plot --kind sweep|pareto|probes`.

Summary tables and search results are built by hand (no simulation runs); a fake sweep
folder is written into ``tmp_path`` with the file names ``simmodel sweep --out`` uses.
"""
from __future__ import annotations

import json
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from simmodel import plots  # noqa: E402
from simmodel.cli import main  # noqa: E402
from simmodel.errors import UserError  # noqa: E402

from cli_helpers import one_error_line  # noqa: E402
from simmodel.plots.capacity_data import point_text, short_keys  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SLA = {"ttft_ms": 2000.0, "itl_ms": 50.0, "e2e_ms": None}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def stats(key: str, mean, low=np.nan, high=np.nan, std=np.nan) -> dict:
    return {f"{key}_mean": mean, f"{key}_std": std, f"{key}_ci95_low": low,
            f"{key}_ci95_high": high}


def summary_frame() -> pd.DataFrame:
    """Two router modes x workers (rows out of x order), and one disaggregated point whose
    ``cluster.workers`` is null.  kv at 4 workers has n=1 (no CI)."""
    rows = [
        # (point, workers, mode, decode, n, sla_met, p99 mean, low, high, gpu_h, goodput)
        (0, 4, "kv", None, 1, True, 1500.0, np.nan, np.nan, 2.0, 100.0),
        (1, 1, "kv", None, 3, False, 8000.0, 7000.0, 9000.0, 0.5, 30.0),
        (2, 2, "kv", None, 3, False, 4000.0, 3500.0, 4600.0, 1.0, 60.0),
        (3, 8, "kv", None, 3, True, 900.0, 800.0, 1000.0, 4.0, 100.0),
        (4, 2, "round_robin", None, 3, False, 5200.0, 5000.0, 5400.0, 1.0, 55.0),
        (5, 1, "round_robin", None, 3, False, 10400.0, 9000.0, 11800.0, 0.5, 27.0),
        (6, None, None, 3, 2, True, 1700.0, 1600.0, 1800.0, 2.0, 95.0),
    ]
    records = []
    for point, workers, mode, decode, n, met, p99, low, high, gpu_h, good in rows:
        records.append({
            "point": point, "label": f"p{point}", "cluster.workers": workers,
            "cluster.router.mode": mode, "cluster.decode.workers": decode,
            "gpus": int(gpu_h * 2), "n": n, "status": "ok", "sla_met": met,
            **stats("p99_ttft_ms", p99, low, high), **stats("gpu_hours", gpu_h, gpu_h, gpu_h),
            **stats("goodput_completed_requests", good)})
    frame = pd.DataFrame(records)
    frame["cluster.workers"] = frame["cluster.workers"].astype("Int64")
    frame["cluster.decode.workers"] = frame["cluster.decode.workers"].astype("Int64")
    return frame


def search_results() -> list:
    def probe(value, met, y, status="ok"):
        return {"value": value, "met": met, "status": status,
                "metrics": {"p99_ttft_ms": y, "gpu_hours": value * 0.5}}

    target = {"p99_ttft_ms": {"max": 2000.0}}
    return [
        {"grid": {"cluster.router.mode": "kv"}, "vary": "cluster.workers", "goal": "min",
         "target": target, "best": 4, "judged_on": "p99_ttft_ms_mean",
         "probes": [probe(1, False, 8000.0, "early_stopped"), probe(8, True, 900.0),
                    probe(4, True, 1500.0), probe(2, False, 4000.0)]},
        {"grid": {"cluster.router.mode": "round_robin"}, "vary": "cluster.workers",
         "goal": "min", "target": target, "best": None, "judged_on": "p99_ttft_ms_mean",
         "probes": [probe(2, False, 5200.0), probe(3, False, None, "early_stopped"),
                    probe(6, False, 2100.0)]},
    ]


def write_sweep_dir(folder, *, search: bool = True, complete: bool = True):
    os.makedirs(folder, exist_ok=True)
    summary = summary_frame()
    summary.to_parquet(os.path.join(folder, "summary.parquet"))
    points = summary[["point", "label", "cluster.workers", "cluster.router.mode"]].copy()
    points["replication"], points["seed"] = 0, 1
    points.to_parquet(os.path.join(folder, "points.parquet"))
    meta = {"name": "layouts", "kind": "search" if search else "sweep",
            "spec": {"sla": SLA}, "version": "0.1", "executor": "local",
            "complete": complete}
    with open(os.path.join(folder, "sweep.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    if search:
        with open(os.path.join(folder, "search.json"), "w", encoding="utf-8") as f:
            json.dump({"results": search_results()}, f)
    return folder


def datax(line) -> list:
    return np.asarray(line.get_xdata(), dtype=float).tolist()


def datay(line) -> list:
    return np.asarray(line.get_ydata(), dtype=float).tolist()


def by_gid(ax) -> dict:
    artists = list(ax.get_lines()) + list(ax.collections)
    return {a.get_gid(): a for a in artists if a.get_gid()}


def assert_png(fig, path) -> None:
    fig.savefig(path, dpi=40)
    data = path.read_bytes()
    assert len(data) > 500 and data.startswith(PNG_MAGIC)


# -- pure helpers -----------------------------------------------------------------------------

def test_sweep_series_sorts_by_x_skips_null_x_and_groups_by_hue():
    series = plots.sweep_series(summary_frame(), "cluster.workers", "p99_ttft_ms",
                                hue="cluster.router.mode")
    assert [value for value, _ in series] == ["kv", "round_robin"]   # null-x row dropped
    kv = series[0][1]
    assert kv["x"].tolist() == [1.0, 2.0, 4.0, 8.0]
    assert kv["mean"].tolist() == [8000.0, 4000.0, 1500.0, 900.0]
    assert kv["point"].tolist() == [1, 2, 0, 3]
    np.testing.assert_array_equal(kv["low"], [7000.0, 3500.0, np.nan, 800.0])
    [(none, alone)] = plots.sweep_series(summary_frame(), "cluster.decode.workers",
                                         "gpu_hours")
    assert none is None and alone["x"].tolist() == [3.0] and alone["mean"].tolist() == [2.0]


def test_short_keys_and_point_text():
    keys = ["cluster.workers", "cluster.router.mode", "cluster.decode.workers"]
    assert short_keys(keys) == {"cluster.workers": "cluster.workers",
                                "cluster.router.mode": "mode",
                                "cluster.decode.workers": "decode.workers"}
    row = summary_frame().iloc[6]
    assert point_text(row, keys) == "p6\ndecode.workers=3"
    assert point_text(summary_frame().iloc[0], keys) == "p0\ncluster.workers=4\nmode=kv"


def test_pareto_front_keeps_ties_drops_dominated_and_nan():
    table = pd.DataFrame({
        "label": ["A", "B", "C", "D", "E", "F", "G", "H"],
        "gpu_hours_mean": [1.0, 2.0, 2.0, 2.0, 3.0, 4.0, np.nan, 5.0],
        "goodput_completed_requests_mean": [10.0, 10.0, 20.0, 20.0, 15.0, 30.0, 50.0, 30.0],
        "gpus": [8, 1, 2, 2, 3, 4, 1, 5],
    })
    front = plots.pareto_front(table, "gpu_hours", "goodput_completed_requests")
    # B: A costs less for the same value; E: C is cheaper and better; G: NaN cost;
    # H: F has the same value for less.  C and D tie exactly, so both stay.
    assert front["label"].tolist() == ["A", "C", "D", "F"]
    assert front.index.tolist() == [0, 2, 3, 5]
    by_gpus = plots.pareto_front(table, "gpus", "goodput_completed_requests")
    assert by_gpus["label"].tolist() == ["G"]         # 1 GPU and the highest value
    by_gpus = plots.pareto_front(table.drop(index=6), "gpus", "goodput_completed_requests")
    assert by_gpus["label"].tolist() == ["B", "C", "D", "F"]
    with pytest.raises(ValueError, match="no summary key 'cost' in the sweep summary"):
        plots.pareto_front(table, "cost", "goodput_completed_requests")


def test_default_sla_matches_the_y_key():
    meta = {"spec": {"sla": SLA}}
    assert plots.default_sla(meta, "p99_ttft_ms") == 2000.0
    assert plots.default_sla(meta, "p90_itl_ms") == 50.0
    assert plots.default_sla(meta, "mean_tpot_ms") == 50.0
    assert plots.default_sla(meta, "p99_e2e_latency_ms") is None      # e2e_ms is null
    assert plots.default_sla(meta, "gpu_hours") is None
    assert plots.default_sla({"spec": {"sla": None}}, "p99_ttft_ms") is None
    assert plots.default_sla(None, "p99_ttft_ms") is None


def test_search_series_reads_probes_in_order():
    metric, series = plots.search_series(search_results())
    assert metric == "p99_ttft_ms"
    kv, rr = series
    assert kv.label == "cluster.router.mode=kv" and kv.best == 4.0 and rr.best is None
    assert kv.bounds == (("max", 2000.0),)
    assert kv.probes["value"].tolist() == [1.0, 8.0, 4.0, 2.0]
    assert kv.probes["order"].tolist() == [1, 2, 3, 4]
    assert kv.probes["met"].tolist() == [False, True, True, False]
    assert np.isnan(rr.probes["y"].iloc[1])
    metric, series = plots.search_series(search_results(), metric="gpu_hours")
    assert series[0].probes["y"].tolist() == [0.5, 4.0, 2.0, 1.0] and series[0].bounds == ()
    with pytest.raises(ValueError, match="no search results"):
        plots.search_series([])
    with pytest.raises(ValueError, match="search result 1, probe 1 has no value"):
        plots.search_series([{"target": {"m": {"max": 1}}, "probes": [{"met": True}]}])
    with pytest.raises(ValueError, match="search result 1, probe 1: value 'kv' or m None "
                                         "is not a number"):
        plots.search_series([{"target": {"m": {"max": 1}}, "probes": [{"value": "kv"}]}])


# -- sweep lines ------------------------------------------------------------------------------

def test_sweep_lines_draw_sorted_means_bands_and_sla():
    ax = plots.sweep_lines(summary_frame(), "cluster.workers", "p99_ttft_ms",
                           hue="cluster.router.mode", sla=2000.0, log_y=True)
    art = by_gid(ax)
    kv, rr = art["sweep:kv"], art["sweep:round_robin"]
    assert datax(kv) == [1.0, 2.0, 4.0, 8.0]
    assert datay(kv) == [8000.0, 4000.0, 1500.0, 900.0]
    assert datax(rr) == [1.0, 2.0]
    assert datay(rr) == [10400.0, 5200.0]
    # kv's band: the finite CIs at 1, 2 (one polygon) and at 8 (a lone interval).
    kv_band = {tuple(v) for path in art["band:kv"].get_paths() for v in path.vertices}
    assert kv_band == {(1.0, 7000.0), (2.0, 3500.0), (1.0, 9000.0), (2.0, 4600.0),
                       (8.0, 800.0), (8.0, 1000.0)}
    rr_band = {tuple(v) for path in art["band:round_robin"].get_paths() for v in path.vertices}
    assert rr_band == {(1.0, 9000.0), (2.0, 5000.0), (1.0, 11800.0), (2.0, 5400.0)}
    [bar] = art["ci:kv"].get_segments()                    # the lone interval, as a bar
    assert bar.tolist() == [[8.0, 800.0], [8.0, 1000.0]]
    assert "ci:round_robin" not in art
    assert datay(art["sla"]) == [2000.0, 2000.0]
    assert art["sla"].get_label() == "SLA 2000 ms"
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "kv", "round_robin", "SLA 2000 ms"]


def test_sweep_lines_without_hue_and_with_a_categorical_x():
    ax = plots.sweep_lines(summary_frame(), "cluster.workers", "gpu_hours")
    lines = [line for line in ax.get_lines() if line.get_gid()]
    assert [line.get_gid() for line in lines] == ["sweep:gpu_hours"]
    # ties at x=1 and x=2 keep the table order (kv rows first)
    assert datax(lines[0]) == [1.0, 1.0, 2.0, 2.0, 4.0, 8.0]
    assert ax.get_yscale() == "linear" and ax.get_legend() is None
    ax = plots.sweep_lines(summary_frame(), "cluster.router.mode", "p99_ttft_ms")
    assert list(by_gid(ax)["sweep:p99_ttft_ms"].get_xdata()) == [
        "kv", "kv", "kv", "kv", "round_robin", "round_robin"]


@pytest.mark.parametrize("x,y,hue,message", [
    ("cluster.nodes", "p99_ttft_ms", None, "no column 'cluster.nodes' in the sweep summary; "
     "varied keys: cluster.workers, cluster.router.mode, cluster.decode.workers"),
    ("cluster.workers", "p99_tft_ms", None, "no summary key 'p99_tft_ms' in the sweep "
     "summary (no column 'p99_tft_ms_mean'); summary keys: p99_ttft_ms, gpu_hours, "
     "goodput_completed_requests"),
    ("cluster.workers", "p99_ttft_ms", "router", "no column 'router' in the sweep summary"),
])
def test_sweep_lines_name_a_missing_column(x, y, hue, message):
    before = plt.get_fignums()
    with pytest.raises(ValueError) as info:
        plots.sweep_lines(summary_frame(), x, y, hue=hue)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert plt.get_fignums() == before                    # no axis made for bad data


# -- Pareto -----------------------------------------------------------------------------------

def test_pareto_plot_front_fill_and_annotations():
    summary = summary_frame()
    ax = plots.pareto(summary, "gpu_hours", "goodput_completed_requests",
                      hue="cluster.router.mode")
    art = by_gid(ax)
    front = art["pareto_front"]
    assert datax(front) == [0.5, 1.0, 2.0]          # p1, p2, p0
    assert datay(front) == [30.0, 60.0, 100.0]
    assert front.get_drawstyle() == "steps-post"
    met, unmet = art["points:kv"], art["points_unmet:kv"]
    assert sorted(zip(met.get_xdata(), met.get_ydata())) == [(2.0, 100.0), (4.0, 100.0)]
    assert sorted(zip(unmet.get_xdata(), unmet.get_ydata())) == [(0.5, 30.0), (1.0, 60.0)]
    assert unmet.get_markerfacecolor() == "none" and met.get_markerfacecolor() != "none"
    assert art["points:n/a"].get_xydata().tolist() == [[2.0, 95.0]]          # the disagg point
    notes = {t.get_gid(): t.get_text() for t in ax.texts}
    assert notes == {"front_label:1": "p1\ncluster.workers=1\nmode=kv",
                     "front_label:2": "p2\ncluster.workers=2\nmode=kv",
                     "front_label:0": "p0\ncluster.workers=4\nmode=kv"}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["kv", "round_robin", "n/a", "Pareto front", "SLA met", "SLA missed"]


def test_pareto_front_of_the_plot_matches_the_helper():
    summary = summary_frame()
    front = plots.pareto_front(summary, "gpu_hours", "goodput_completed_requests")
    # p3 (4 GPU-h, 100) is dominated by p0 (2 GPU-h, 100); p6 (2, 95) by p0 too.
    assert front["label"].tolist() == ["p1", "p2", "p0"]
    ax = plots.pareto(summary.drop(columns=["sla_met"]), "gpus", "goodput_completed_requests")
    art = by_gid(ax)
    assert datax(art["pareto_front"]) == [1.0, 2.0, 4.0]
    assert "points_unmet:points" in art and len(art["points_unmet:points"].get_xdata()) == 0
    assert len(art["points:points"].get_xdata()) == 7
    assert "SLA met" not in [t.get_text() for t in ax.get_legend().get_texts()]


# -- search probes ----------------------------------------------------------------------------

def test_search_probes_markers_bounds_and_answer():
    ax = plots.search_probes(search_results())
    art = by_gid(ax)
    kv = "cluster.router.mode=kv"
    rr = "cluster.router.mode=round_robin"
    assert datax(art[f"probe_path:{kv}"]) == [1.0, 8.0, 4.0, 2.0]  # in order
    assert art[f"probes_met:{kv}"].get_xydata().tolist() == [[8.0, 900.0], [4.0, 1500.0]]
    assert art[f"probes_unmet:{kv}"].get_xydata().tolist() == [[2.0, 4000.0]]
    assert art[f"probes_unmet:{kv}"].get_markerfacecolor() == "none"
    assert art[f"probes_met:{kv}"].get_markerfacecolor() != "none"
    stopped = art[f"probes_stopped:{kv}"]
    assert stopped.get_xydata().tolist() == [[1.0, 8000.0]] and stopped.get_marker() == "x"
    assert art[f"probes_unmet:{rr}"].get_xydata().tolist() == [[2.0, 5200.0], [6.0, 2100.0]]
    assert datax(art[f"best:{kv}"]) == [4.0, 4.0]
    assert f"best:{rr}" not in art                            # no answer, no line
    assert datay(art["target:max=2000"]) == [2000.0, 2000.0]
    assert [g for g in art if g.startswith("target:")] == ["target:max=2000"]   # drawn once
    orders = [(t.get_text(), t.xy) for t in ax.texts]
    assert orders[:4] == [("1", (1.0, 8000.0)), ("2", (8.0, 900.0)), ("3", (4.0, 1500.0)),
                          ("4", (2.0, 4000.0))]
    # round robin's probe 2 stopped early without a p99_ttft_ms: drawn at the max bound
    # (its full run was certain to exceed it)
    assert orders[4:] == [("1", (2.0, 5200.0)), ("2", (3.0, 2000.0)), ("3", (6.0, 2100.0))]
    assert art[f"probes_stopped:{rr}"].get_xydata().tolist() == [[3.0, 2000.0]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == [f"{kv} (answer workers=4)", f"{rr} (no answer)"]
    assert ax.get_xlabel() == "cluster.workers" and ax.get_ylabel() == "p99 ttft (ms)"


# -- loader and whole figures -----------------------------------------------------------------

def test_read_sweep_dir_round_trip(tmp_path):
    data = plots.read_sweep_dir(write_sweep_dir(tmp_path / "runs"))
    assert set(data) == {"summary", "points", "sweep", "search"}
    assert data["sweep"]["name"] == "layouts" and len(data["search"]["results"]) == 2
    assert len(data["summary"]) == 7 and data["points"]["replication"].eq(0).all()
    [(value, kv), *_] = plots.sweep_series(data["summary"], "cluster.workers", "p99_ttft_ms",
                                           hue="cluster.router.mode")
    assert value == "kv" and kv["mean"].tolist() == [8000.0, 4000.0, 1500.0, 900.0]
    sweep_only = write_sweep_dir(tmp_path / "s", search=False)
    assert plots.read_sweep_dir(sweep_only)["search"] is None


def test_read_sweep_dir_errors(tmp_path):
    def message(path) -> str:
        with pytest.raises(UserError) as info:
            plots.read_sweep_dir(path)
        assert "\n" not in str(info.value)
        return str(info.value)

    missing = tmp_path / "nope"
    assert message(missing) == f"{missing}: not a sweep folder (it does not exist)"
    assert message(tmp_path) == f"{tmp_path}: not a sweep folder (sweep.json is missing)"
    folder = write_sweep_dir(tmp_path / "broken")
    (folder / "summary.parquet").write_bytes(b"not parquet")
    assert message(folder).startswith(f"{folder}: cannot read the sweep: ")
    folder = write_sweep_dir(tmp_path / "badjson")
    (folder / "search.json").write_text("{")
    assert message(folder).startswith(f"{folder}: cannot read the sweep: ")
    (folder / "search.json").write_text('{"results": 3}')
    assert message(folder) == (f"{folder}: cannot read the sweep: "
                               f"search.json has no results list")


def test_capacity_figures_render(tmp_path):
    data = plots.read_sweep_dir(write_sweep_dir(tmp_path / "runs", complete=False))
    fig = plots.capacity_figure("sweep", data, x="cluster.workers", y="p99_ttft_ms",
                                hue="cluster.router.mode")
    ax = fig.axes[0]
    assert datay(by_gid(ax)["sla"]) == [2000.0, 2000.0]      # from the spec
    assert ax.get_title() == "layouts (incomplete)"
    assert_png(fig, tmp_path / "sweep.png")
    fig = plots.capacity_figure("sweep", data, x="cluster.workers", y="p99_ttft_ms", sla=900)
    assert datay(by_gid(fig.axes[0])["sla"]) == [900.0, 900.0]
    fig = plots.capacity_figure("sweep", data, x="cluster.workers", y="gpu_hours")
    assert "sla" not in by_gid(fig.axes[0])
    fig = plots.capacity_figure("pareto", data, hue="cluster.router.mode")
    assert datax(by_gid(fig.axes[0])["pareto_front"]) == [0.5, 1.0, 2.0]
    assert_png(fig, tmp_path / "pareto.png")
    fig = plots.capacity_figure("probes", data)
    assert "target:max=2000" in by_gid(fig.axes[0])
    assert_png(fig, tmp_path / "probes.png")


def test_capacity_figure_errors_leave_no_figure(tmp_path):
    data = plots.read_sweep_dir(write_sweep_dir(tmp_path / "s", search=False))
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="no search results"):
        plots.capacity_figure("probes", data)
    with pytest.raises(ValueError, match="the sweep plot needs x and y; varied keys: "
                                         "cluster.workers, "):
        plots.capacity_figure("sweep", data, y="p99_ttft_ms")
    with pytest.raises(ValueError, match="no column 'cluster.nodes'"):
        plots.capacity_figure("sweep", data, x="cluster.nodes", y="p99_ttft_ms")
    with pytest.raises(ValueError, match="unknown capacity figure kind 'cdf'"):
        plots.capacity_figure("cdf", data)
    assert plt.get_fignums() == before


# -- CLI --------------------------------------------------------------------------------------



@pytest.mark.parametrize("extra", [
    ["--kind", "sweep", "--x", "cluster.workers", "--y", "p99_ttft_ms",
     "--hue", "cluster.router.mode", "--log-y"],
    ["--kind", "sweep", "--x", "cluster.router.mode", "--y", "p99_ttft_ms", "--sla-ms", "900"],
    ["--kind", "pareto", "--cost", "gpu_hours", "--value", "goodput_completed_requests"],
    ["--kind", "pareto", "--cost", "gpus", "--hue", "cluster.router.mode"],
    ["--kind", "probes"],
    ["--kind", "probes", "--metric", "gpu_hours"],
])
def test_cli_capacity_plots(tmp_path, capsys, extra):
    folder = write_sweep_dir(tmp_path / "runs")
    out = tmp_path / "fig.png"
    assert main(["plot", str(folder), "--out", str(out), *extra]) == 0, capsys.readouterr()
    assert capsys.readouterr().out == f"figure written to {out}\n"
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_cli_passes_capacity_options(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    calls = []

    def capacity_figure(kind, data, **options):
        calls.append((kind, data, options))
        return Figure()

    monkeypatch.setattr(plots, "capacity_figure", capacity_figure)
    folder = write_sweep_dir(tmp_path / "runs")
    out = tmp_path / "fig.png"
    assert main(["plot", str(folder), "--out", str(out), "--kind", "sweep", "--x",
                 "cluster.workers", "--y", "p99_itl_ms"]) == 0
    [(kind, data, options)] = calls
    assert kind == "sweep" and data["sweep"]["name"] == "layouts"
    assert options == {"x": "cluster.workers", "y": "p99_itl_ms", "hue": None, "sla": None,
                       "log_y": False, "cost": "gpu_hours",
                       "value": "goodput_completed_requests", "metric": None}


def test_cli_capacity_errors(tmp_path, capsys):
    folder = str(write_sweep_dir(tmp_path / "runs", search=False))
    out = tmp_path / "fig.png"

    def error(*extra) -> str:
        assert main(["plot", *extra, "--out", str(out)]) == 2
        return one_error_line(capsys)

    not_sweep = tmp_path / "empty"
    not_sweep.mkdir()
    assert error(str(not_sweep), "--kind", "pareto") == (
        f"{not_sweep}: not a sweep folder (sweep.json is missing)")
    assert error(folder, "--kind", "sweep", "--y", "p99_ttft_ms") == (
        "--kind sweep needs --x KEY and --y KEY; varied keys: cluster.workers, "
        "cluster.router.mode, cluster.decode.workers; summary keys: p99_ttft_ms, gpu_hours, "
        "goodput_completed_requests")
    assert error(folder, "--kind", "sweep", "--x", "workers", "--y", "p99_ttft_ms") == (
        "sweep plot: no column 'workers' in the sweep summary; varied keys: "
        "cluster.workers, cluster.router.mode, cluster.decode.workers")
    assert error(folder, "--kind", "pareto", "--cost", "dollars").startswith(
        "pareto plot: no summary key 'dollars' in the sweep summary")
    assert error(folder, "--kind", "probes") == (
        "probes plot: no search results (search.json): this folder is a sweep, not a search")
    assert error(folder, folder, "--kind", "pareto") == (
        "--kind pareto: give one sweep folder, not 2 directories")
    assert sorted(os.listdir(tmp_path)) == ["empty", "runs"]               # no figure written
