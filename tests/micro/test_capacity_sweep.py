"""Sweeps: tables equal individual runs, statistics by hand, the cache and resuming,
executors (processes, a user's executor, a Dask LocalCluster), failures, the CLI."""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import json
import math
import os

import pandas as pd
import pytest

import simmodel
from simmodel.capacity import load_spec, stats, sweep
from simmodel.capacity.runner import WALL_KEYS
from simmodel.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "scenarios", "tiny.yaml")


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def micro(tmp_path) -> str:
    """Two worker counts x two routers, two replications: 8 runs of ~10 ms."""
    return write(tmp_path / "micro.yaml", f"""
name: micro
base: {TINY}
grid:
  cluster.workers: [1, 2]
  cluster.router.mode: [round_robin, kv]
replications: 2
""")


def direct_summary(workers: int, mode: str, seed: int) -> dict:
    sc = simmodel.load_scenario(TINY)
    cl = dataclasses.replace(sc.cluster, workers=workers,
                             router=dataclasses.replace(sc.cluster.router, mode=mode))
    res = simmodel.run(dataclasses.replace(sc, cluster=cl, seed=seed))
    return {k: v for k, v in res.summary.items() if k not in WALL_KEYS}


def test_table_values_equal_individual_runs(micro):
    res = sweep(micro, jobs=1)
    assert len(res.points) == 8 and list(res.points["status"].unique()) == ["ok"]
    for _, row in res.points.iterrows():
        want = direct_summary(int(row["cluster.workers"]), row["cluster.router.mode"],
                              int(row["seed"]))
        for key, value in want.items():
            got = row[key]
            if isinstance(value, float) and math.isnan(value) or value is None:
                assert got is None or (isinstance(got, float) and math.isnan(got)), key
            else:
                assert got == value, (key, got, value)
    assert sorted(res.points["seed"].unique()) == [0, 1]       # seed, seed + 1
    assert set(res.points["gpus"]) == {1, 2}


def test_summary_statistics_by_hand(micro):
    res = sweep(micro, jobs=1)
    for pid, runs in res.points.groupby("point"):
        x = runs["p99_ttft_ms"].astype(float).tolist()
        row = res.summary.set_index("point").loc[pid]
        mean = (x[0] + x[1]) / 2
        std = abs(x[0] - x[1]) / math.sqrt(2)          # sample std of two values
        half = 12.706204736174698 * std / math.sqrt(2)  # t(0.975, 1 d.o.f.)
        assert row["n"] == 2
        assert row["p99_ttft_ms_mean"] == pytest.approx(mean, rel=1e-12)
        assert row["p99_ttft_ms_std"] == pytest.approx(std, rel=1e-12, abs=1e-12)
        assert row["p99_ttft_ms_ci95_low"] == pytest.approx(mean - half, rel=1e-9, abs=1e-9)
        assert row["p99_ttft_ms_ci95_high"] == pytest.approx(mean + half, rel=1e-9, abs=1e-9)


def test_ci_formula_by_hand():
    # 1, 2, 3, 4: mean 2.5, sample variance 5/3, t(0.975, 3) = 3.182446305284263
    mean, std, lo, hi = stats.mean_ci([1.0, 2.0, 3.0, 4.0])
    half = 3.182446305284263 * math.sqrt(5 / 3) / 2
    assert (mean, std) == (2.5, pytest.approx(math.sqrt(5 / 3)))
    assert (lo, hi) == (pytest.approx(2.5 - half), pytest.approx(2.5 + half))
    assert stats.mean_ci([7.0])[:2] == (7.0, pytest.approx(math.nan, nan_ok=True))
    assert all(math.isnan(v) for v in stats.mean_ci([]))


def test_sla_verdict_rule():
    target = stats.sla_target({"ttft_ms": 100.0, "itl_ms": 20.0, "e2e_ms": None}, 99.0)
    assert target == {"p99_ttft_ms": {"max": 100.0}, "p99_tpot_ms": {"max": 20.0}}
    assert stats.sla_target({"e2e_ms": 5.0}, 90.0) == {"p90_e2e_latency_ms": {"max": 5.0}}
    assert stats.met({"p99_ttft_ms": 100.0, "p99_tpot_ms": 19.0}, target) is True
    assert stats.met({"p99_ttft_ms": 100.1, "p99_tpot_ms": 19.0}, target) is False
    assert stats.met({"p99_ttft_ms": math.nan, "p99_tpot_ms": 1.0}, target) is False
    assert stats.met({}, {}) is None


def test_sla_met_column_follows_the_rule(micro):
    res = sweep(micro, jobs=1)
    target = stats.sla_target(res.spec.sla, 99.0)
    for _, row in res.points.iterrows():
        ok = row["p99_ttft_ms"] <= 100 and row["p99_tpot_ms"] <= 20
        assert row["sla_met"] == ok
    assert target and res.summary["sla_met"].notna().all()


def test_out_folder_cache_and_identical_rerun(micro, tmp_path):
    out = tmp_path / "out"
    first = sweep(micro, jobs=1, out=str(out))
    for name in ("points.parquet", "summary.parquet", "sweep.json"):
        assert (out / name).is_file()
    assert len(os.listdir(out / "cache")) == 8
    info = json.loads((out / "sweep.json").read_text())
    assert info["complete"] is True and info["executor"] == "serial"
    assert info["spec"]["replications"] == 2 and info["version"] == simmodel.__version__
    fresh = []
    again = sweep(micro, jobs=1, out=str(out), on_run=lambda row: fresh.append(row["cached"]))
    assert fresh == [True] * 8
    pd.testing.assert_frame_equal(first.points.drop(columns="wall_s"),
                                  again.points.drop(columns="wall_s"))
    back = pd.read_parquet(out / "points.parquet")
    assert len(back) == 8 and back["p99_ttft_ms"].tolist() == first.points["p99_ttft_ms"].tolist()


def test_interrupted_sweep_resumes_only_the_missing_runs(micro, tmp_path):
    out = tmp_path / "out"
    seen = []

    def stop_after_three(row):
        seen.append(row)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(micro, jobs=1, out=str(out), on_run=stop_after_three)
    info = json.loads((out / "sweep.json").read_text())
    assert info["complete"] is False and info["runs"] == 3
    assert len(pd.read_parquet(out / "points.parquet")) == 3
    assert set(pd.read_parquet(out / "summary.parquet")["status"]) <= {"ok", "partial"}
    cached = []
    res = sweep(micro, jobs=1, out=str(out), on_run=lambda row: cached.append(row["cached"]))
    assert sorted(cached) == [False] * 5 + [True] * 3        # only the missing five ran
    assert res.complete and len(res.points) == 8


def test_process_pool_and_user_executor_give_identical_tables(micro):
    serial = sweep(micro, jobs=1)
    pool = sweep(micro, jobs=2)
    with cf.ThreadPoolExecutor(2) as ex:
        threads = sweep(micro, ex)
    assert pool.executor == "processes:2" and threads.executor == "ThreadPoolExecutor"
    for other in (pool, threads):
        pd.testing.assert_frame_equal(serial.points.drop(columns="wall_s"),
                                      other.points.drop(columns="wall_s"))
        pd.testing.assert_frame_equal(serial.summary.filter(regex="^(?!wall_s)"),
                                      other.summary.filter(regex="^(?!wall_s)"))


def test_dask_local_cluster(micro):
    pytest.importorskip("distributed")      # the test extra installs it: CI runs this
    from distributed import Client, LocalCluster

    serial = sweep(micro, jobs=1)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        res = sweep(micro, client)
    assert res.executor.startswith("dask:")
    pd.testing.assert_frame_equal(serial.points.drop(columns="wall_s"),
                                  res.points.drop(columns="wall_s"))


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    # the second point's prompts exceed the token budget with chunking off: that is found
    # only once the trace is read, so the point fails at run time
    spec = write(tmp_path / "dp.yaml", f"""
base: {TINY}
grid: {{cluster.engine.max_num_batched_tokens: [8192, 512],
        cluster.engine.enable_chunked_prefill: [false]}}
""")
    res = sweep(spec, jobs=1)
    assert list(res.points["status"]) == ["ok", "error"]
    err = res.points["error"].iloc[1]
    assert "max_num_batched_tokens" in err and "\n" not in err
    assert list(res.summary["status"]) == ["ok", "error"]
    out = tmp_path / "out"
    assert main(["sweep", spec, "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    assert "1 run(s) failed" in capsys.readouterr().err
    assert main(["sweep", spec, "--out", str(out / "ff"), "--jobs", "1", "--quiet",
                 "--fail-fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simmodel: error: --fail-fast: point 1")


def test_keep_runs_writes_result_folders(tmp_path):
    spec = write(tmp_path / "k.yaml", f"base: {TINY}\ngrid: {{cluster.workers: [1, 2]}}\n")
    out = tmp_path / "out"
    sweep(spec, jobs=1, out=str(out), keep_runs=True)
    runs = sorted(os.listdir(out / "runs"))
    assert runs == ["p0000-r0", "p0001-r0"]
    kept = json.loads((out / "runs" / "p0001-r0" / "summary.json").read_text())
    scenario = json.loads((out / "runs" / "p0001-r0" / "scenario.json").read_text())
    assert scenario["cluster"]["workers"] == 2 and kept["num_requests"] == 40


def test_cli_sweep_prints_the_verdicts(micro, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", micro, "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    text = capsys.readouterr().out
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines[0].split()[:4] == ["point", "label", "cluster.workers", "cluster.router.mode"]
    table = pd.read_parquet(out / "summary.parquet")
    verdicts = [ln.split()[-1] for ln in lines[1:5]]
    assert verdicts == ["met" if m else "MISSED" for m in table["sla_met"]]


def test_warmup_leaves_early_arrivals_out(tmp_path):
    spec = write(tmp_path / "w.yaml", f"base: {TINY}\ngrid: {{cluster.workers: [2]}}\n"
                                      "warmup_ms: 400\n")
    row = sweep(spec, jobs=1).points.iloc[0]
    sc = simmodel.load_scenario(TINY)
    full = simmodel.run(sc)
    reqs = full.requests[full.requests["arrival_time_ms"] >= 400]
    assert row["num_requests"] == len(reqs) == 20                 # one arrival every 20 ms
    assert row["max_ttft_ms"] == reqs["ttft_ms"].max()
    assert row["duration_ms"] == pytest.approx(reqs["terminal_time_ms"].max() - 400)
    assert row["gpu_hours"] == full.summary["gpu_hours"]          # cost: the whole run


def test_spec_round_trips_into_sweep_json(micro, tmp_path):
    spec = load_spec(micro)
    assert spec.kind == "sweep" and len(spec.points) == 4 and spec.replications == 2
    assert spec.varied == ("cluster.workers", "cluster.router.mode")


def test_cli_joins_a_running_dask_scheduler(micro, tmp_path, capsys):
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    serial = sweep(micro, jobs=1)
    out = tmp_path / "out"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster:
        assert main(["sweep", micro, "--out", str(out), "--dask", cluster.scheduler_address,
                     "--quiet"]) == 0
    info = json.loads((out / "sweep.json").read_text())
    assert info["executor"] == f"dask:{cluster.scheduler_address}"
    pd.testing.assert_frame_equal(serial.points.drop(columns="wall_s"),
                                  pd.read_parquet(out / "points.parquet").drop(columns="wall_s"),
                                  check_dtype=False)
