"""What a scaling policy sees: forward-pass metrics, idle heartbeats, the traffic window.

Expected values follow from the definitions in ``simmodel.engine.fpm`` and
``simmodel.cluster.traffic`` (reference §9): sequence lengths are prompt + tokens emitted so
far, pass durations are read from the run's own pass table.
"""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, Scenario, SyntheticConfig,
                             WorkloadConfig)
from simmodel.engine.fpm import FPM_KEYS, IDLE_HEARTBEAT_MS, last_heartbeat, variance


class Ticks:
    """Records snapshots at the given tick times (no scaling unless ``targets``)."""

    def __init__(self, times, targets=None):
        self.times = list(times)
        self.targets = targets or {}
        self.snaps = []

    def initial_tick_ms(self):
        return self.times[0]

    def on_tick(self, snap):
        self.snaps.append(snap)
        i = len(self.snaps)
        return {"target_prefill": None, "target_decode": self.targets.get(i - 1),
                "next_tick_ms": self.times[i] if i < len(self.times) else None}


def synthetic(n, isl, osl, interval, **engine):
    return Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=n, input_tokens=isl, output_tokens=osl, arrival_interval_ms=interval)),
        cluster=ClusterConfig(workers=engine.pop("workers", 1), engine=EngineConfig(**engine)))


def trace_scenario(tmp_path, rows, **engine):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Scenario(workload=WorkloadConfig(trace=str(path), format="mooncake"),
                    cluster=ClusterConfig(workers=1, engine=EngineConfig(**engine)))


def latest_pass(res, worker, t):
    p = res.passes[(res.passes.worker == worker) & (res.passes.end_ms <= t)]
    return p.iloc[-1]


def test_prefill_then_decode_metrics():
    # Three 1000-token prompts at 0: one prefill pass of the three, then decode passes in
    # which every sequence is 1000 + tokens emitted so far.
    pol = Ticks([50.0, 70.0, 80.0])
    res = simmodel.run(synthetic(3, 1000, 5, 0.0), scaling_policy=pol)
    p0 = latest_pass(res, 0, 70.0)
    assert p0.start_ms == 0.0 and 50.0 < p0.end_ms <= 70.0        # the prefill pass
    s0, s1, s2 = pol.snaps
    assert s0["decode_fpm_snapshots"] == []                        # nothing ended by 50 ms
    (f,) = s1["decode_fpm_snapshots"]
    assert list(f) == list(FPM_KEYS)
    assert (f["num_prefill_requests"], f["sum_prefill_tokens"], f["sum_prefill_kv_tokens"]) \
        == (3, 3000, 0)
    assert f["var_prefill_length"] == 0.0 and f["num_decode_requests"] == 0
    assert f["wall_time"] == pytest.approx((p0.end_ms - p0.start_ms) / 1000.0, rel=1e-12)
    # by 80 ms two decode passes ended: the latest has sequences of 1000 + 2 tokens
    (g,) = s2["decode_fpm_snapshots"]
    p = latest_pass(res, 0, 80.0)
    assert (g["num_decode_requests"], g["sum_decode_kv_tokens"]) == (3, 3 * 1002)
    assert g["wall_time"] == pytest.approx((p.end_ms - p.start_ms) / 1000.0, rel=1e-12)
    # traffic: 3 arrivals in the first window, two decode passes of 3 in the third
    assert s0["traffic"]["num_req"] == 3 and s1["traffic"]["num_req"] == 0
    assert s2["traffic"]["accept_length_forward_count"] == 6
    assert s2["traffic"]["avg_accept_length"] == 1.0
    assert s1["traffic"]["avg_accept_length"] is None                # no decode forward


def test_variances_and_queue(tmp_path):
    # Prompts of 1000 and 2000 tokens decode together: variance (500)^2 whatever the step.
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 20, "hash_ids": [1, 2]},
            {"timestamp": 0, "input_length": 2000, "output_length": 20, "hash_ids": [3, 4, 5, 6]},
            {"timestamp": 0, "input_length": 700, "output_length": 20, "hash_ids": [7, 8]},
            {"timestamp": 0, "input_length": 900, "output_length": 20, "hash_ids": [9, 10]}]
    pol = Ticks([150.0])
    res = simmodel.run(trace_scenario(tmp_path, rows, max_num_seqs=2), scaling_policy=pol)
    (f,) = pol.snaps[0]["decode_fpm_snapshots"]
    p = latest_pass(res, 0, 150.0)
    assert f["num_decode_requests"] == 2 and f["sum_decode_kv_tokens"] == p.decode_tokens
    assert f["var_decode_kv_tokens"] == pytest.approx(variance([1000, 2000]))
    # max_num_seqs 2: the other two wait, never having run
    assert (f["num_queued_prefill"], f["sum_queued_prefill_tokens"]) == (2, 1600)
    assert f["var_queued_prefill_length"] == pytest.approx(100.0 ** 2)
    assert f["num_queued_decode"] == 0


def test_idle_worker_heartbeat_once_a_second():
    # One short request at 0 (done well before 100 ms), the next at 3000 ms.
    pol = Ticks([500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0])
    res = simmodel.run(synthetic(2, 100, 3, 3000.0), scaling_policy=pol)
    idle_from = res.passes[res.passes.end_ms < 3000].end_ms.max()
    beats = {t for t in (idle_from + IDLE_HEARTBEAT_MS, idle_from + 2 * IDLE_HEARTBEAT_MS)}
    assert pol.snaps[0]["decode_fpm_snapshots"][0]["num_decode_requests"] == 1   # real pass
    for snap in pol.snaps[1:]:
        t = snap["now_ms"]
        fpms = snap["decode_fpm_snapshots"]
        expected = any(t - 500.0 < b <= t for b in beats)
        assert bool(fpms) == expected, t
        if fpms:
            (f,) = fpms
            assert all(f[k] == 0 for k in FPM_KEYS if k not in ("worker_id", "dp_rank"))


def test_last_heartbeat_rule():
    assert last_heartbeat(None, None, 0.0, 5000.0) is None
    assert last_heartbeat(100.0, None, 0.0, 1099.0) is None
    assert last_heartbeat(100.0, None, 0.0, 2100.0) == 2100.0
    assert last_heartbeat(100.0, None, 2100.0, 3000.0) is None
    assert last_heartbeat(100.0, 1500.0, 0.0, 5000.0) == 1100.0   # ended at 1500


def test_draining_workers_are_not_reported():
    # 2 workers; the tick at 200 ms drains worker 1, which still has work afterwards.
    pol = Ticks([200.0, 250.0, 300.0, 350.0], targets={0: 1})
    res = simmodel.run(synthetic(40, 2000, 30, 10.0, workers=2), scaling_policy=pol)
    lc = res.lifecycle
    removed = lc[lc.transition == "worker_removed"].at_ms.item()
    assert removed > 300.0                      # worker 1 really was busy while draining
    for snap in pol.snaps[1:]:
        assert [f["worker_id"] for f in snap["decode_fpm_snapshots"]] in ([0], [])
        assert snap["draining_decode_ids"] == [1] and snap["active_decode_ids"] == [0]


def test_traffic_window_counts_completions():
    pol = Ticks([1000.0, 2000.0, 3000.0])
    res = simmodel.run(synthetic(30, 500, 10, 100.0), scaling_policy=pol)
    r = res.requests
    last = 0.0
    for snap in pol.snaps:
        t = snap["now_ms"]
        done = r[(r.terminal_time_ms > last) & (r.terminal_time_ms <= t)]
        tr = snap["traffic"]
        assert tr["shape_count"] == len(done) == tr["ttft_count"] == tr["itl_count"]
        assert tr["avg_ttft_ms"] == pytest.approx(done.ttft_ms.mean(), rel=1e-12)
        assert tr["avg_itl_ms"] == pytest.approx(done.tpot_ms.mean(), rel=1e-12)
        assert tr["avg_isl"] == 500.0 and tr["avg_osl"] == 10.0
        assert tr["duration_s"] == pytest.approx((t - last) / 1000.0)
        assert tr["hit_rate_count"] == 0                # only a KV router knows overlaps
        last = t
