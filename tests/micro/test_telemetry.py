"""Telemetry (``telemetry: {interval_ms}``): one tidy table of per-worker and per-pool
levels sampled in simulated time.  Fixed timing (prefill 10 ms, decode 1 ms per pass) and
64-token blocks, so every level follows by hand."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, RunConfig, Scenario, TelemetryConfig,
                             TimingConfig, WorkloadConfig)
from simmodel.report import read_result, write_result
from simmodel.result import (TELEMETRY_COLUMNS, TELEMETRY_POOL_METRICS,
                             TELEMETRY_WORKER_METRICS)

FIXED = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)


def scenario(tmp_path, rows, interval=5.0, **cluster):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Scenario(
        workload=WorkloadConfig(trace=str(path), format="mooncake"),
        cluster=ClusterConfig(engine=EngineConfig(block_size=64, num_gpu_blocks=100,
                                                  timing_model=FIXED), **cluster),
        telemetry=TelemetryConfig(interval_ms=interval))


def level(tel, t, metric, worker=0):
    row = tel[(tel.time_ms == t) & (tel.metric == metric) & (tel.worker == worker)]
    assert len(row) == 1, (t, metric)
    return row.value.item()


@pytest.mark.parametrize("coalesce", [True, False], ids=["coalesced", "per-pass"])
def test_levels_by_hand(tmp_path, coalesce):
    # Two identical 640-token prompts (10 blocks), 5 output tokens, at 0 and 20 ms.
    rows = [{"timestamp": 0, "input_length": 640, "output_length": 5, "hash_ids": [1, 2]},
            {"timestamp": 20, "input_length": 640, "output_length": 5, "hash_ids": [1, 2]}]
    sc = scenario(tmp_path, rows, workers=1)
    sc = dataclasses.replace(sc, run=RunConfig(coalesce_decode=coalesce))
    res = simmodel.run(sc)
    tel = res.telemetry
    assert list(tel.columns) == list(TELEMETRY_COLUMNS)
    assert sorted(tel.time_ms.unique()) == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0]
    # Samples come after the instant's pass ends and arrivals, before its new passes; a
    # pass in flight is seen as it was formed, its admitted requests still counted waiting.
    def state(t):
        return tuple(level(tel, t, m) for m in ("kv_blocks_active", "kv_blocks_cached",
                                                 "kv_blocks_free", "running", "waiting"))
    assert state(0.0) == (0, 0, 100, 0, 1)          # arrived, not yet scheduled
    assert state(5.0) == (0, 0, 100, 0, 1)          # prefill pass [0, 10) in flight
    assert state(10.0) == (10, 0, 90, 1, 0)         # its 10 blocks; decoding from 10
    # 15: done at 14; its 10 full blocks stay cached (inactive), the partial one is freed
    assert state(15.0) == (0, 10, 90, 0, 0)
    # the same prompt at 20 hits 9 cached blocks (one token must be computed): 576 tokens,
    # counted in the interval (20, 25] since its pass is formed after the sample at 20
    assert level(tel, 20.0, "cache_hit_tokens") == 0
    assert level(tel, 25.0, "cache_hit_tokens") == 576
    assert tel[tel.metric == "cache_hit_tokens"].value.sum() == 576
    assert (tel[tel.metric == "preemptions"].value == 0).all()
    # pool rows: one active worker, empty router queue, at every sample
    pool = tel[tel.worker == -1]
    assert set(pool.metric) == set(TELEMETRY_POOL_METRICS)
    assert (pool[pool.metric == "workers_active"].value == 1).all()
    assert (pool[pool.metric == "router_queue"].value == 0).all()
    assert set(tel[tel.worker == 0].metric) == set(TELEMETRY_WORKER_METRICS)


def test_blocks_add_up_and_files_round_trip(tmp_path):
    rows = [{"timestamp": 3 * i, "input_length": 300 + 40 * i, "output_length": 20,
             "hash_ids": [i % 3, 100 + i, 200 + i]} for i in range(30)]
    res = simmodel.run(scenario(tmp_path, rows, interval=7.0, workers=2))
    tel = res.telemetry
    wide = tel[tel.worker >= 0].pivot_table(index=["time_ms", "worker"], columns="metric",
                                            values="value")
    total = wide.kv_blocks_active + wide.kv_blocks_cached + wide.kv_blocks_free
    assert (total == 100).all()
    assert set(wide.index.get_level_values("worker")) == {0, 1}
    write_result(res, tmp_path / "out")
    back = read_result(tmp_path / "out")
    pd.testing.assert_frame_equal(back.telemetry, tel)


def test_disaggregated_pools_and_yaml(tmp_path):
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"timestamp": 10 * i, "input_length": 500, "output_length": 10,
                    "hash_ids": [i]}) + "\n" for i in range(10)))
    path = tmp_path / "s.yaml"
    path.write_text("workload: {trace: t.jsonl, format: mooncake}\n"
                    "cluster: {prefill: {workers: 1}, decode: {workers: 2}}\n"
                    "telemetry: {interval_ms: 20}\n")
    res = simmodel.run(simmodel.load_scenario(path))
    tel = res.telemetry
    assert set(tel.pool) == {"prefill", "decode"}
    assert set(tel[tel.pool == "decode"].worker) == {-1, 0, 1}
    n = tel[(tel.metric == "workers_active") & (tel.worker == -1)]
    assert set(zip(n.pool, n.value)) == {("prefill", 1), ("decode", 2)}


def test_no_telemetry_unless_asked():
    res = simmodel.run(simmodel.load_scenario("scenarios/tiny.yaml"))
    assert res.telemetry is None
