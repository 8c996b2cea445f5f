"""Planner: ticks, scale-up with startup time, scale-down with draining, worker-seconds.

The workloads use the fixed timing model (prefill 10 ms, decode 1 ms per pass) so the
times can be followed by hand.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, Scenario, SyntheticConfig,
                             TimingConfig, WorkloadConfig)

FIXED = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)


def scenario(workers=1, startup_time=None, requests=30, interval=100.0, out=5):
    return Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=requests, input_tokens=200, output_tokens=out, arrival_interval_ms=interval)),
        cluster=ClusterConfig(workers=workers, engine=EngineConfig(
            timing_model=FIXED, startup_time=startup_time)))


class Schedule:
    """Targets by tick: ticks at ``first`` then every ``every`` ms."""

    def __init__(self, targets, first=1000.0, every=1000.0):
        self.targets = list(targets)
        self.first, self.every = first, every
        self.calls = []

    def initial_tick_ms(self):
        return self.first

    def on_tick(self, snap):
        self.calls.append(snap)
        t = self.targets[len(self.calls) - 1] if len(self.calls) <= len(self.targets) else None
        return {"target_prefill": None, "target_decode": t,
                "next_tick_ms": snap["now_ms"] + self.every}


def test_scale_up_with_startup_time_then_round_robin_over_active_workers():
    # Tick at 1000 asks for 3 workers; they start at 1000 and are ready at 1500.
    # Arrivals every 100 ms: up to 1400 all go to worker 0 (the 1000 arrival is routed
    # before the tick); from 1500 the round robin continues after worker 0: 1, 2, 0, ...
    res = simmodel.run(scenario(startup_time=0.5), scaling_policy=Schedule([3]))
    r = res.requests.sort_values("arrival_time_ms")
    before = r[r.arrival_time_ms < 1500]
    assert (before.decode_worker_idx == 0).all()
    after = r[r.arrival_time_ms >= 1500].decode_worker_idx.tolist()
    assert after[:6] == [1, 2, 0, 1, 2, 0]
    lc = res.lifecycle
    ready = lc[lc.transition == "worker_ready"]
    assert ready.at_ms.tolist() == [1500.0, 1500.0]
    assert sorted(ready.worker.tolist()) == [1, 2]


def test_scale_down_drains_highest_ids_and_counts_provisioned_seconds():
    # 3 workers from the start; the tick at 1000 keeps 1: workers 2 then 1 drain.
    res = simmodel.run(scenario(workers=3), scaling_policy=Schedule([1]))
    lc = res.lifecycle
    drained = lc[lc.transition == "worker_draining"].worker.tolist()
    assert drained == [2, 1]
    removed = lc[lc.transition == "worker_removed"].set_index("worker").at_ms
    # After the tick nothing new reaches workers 1 and 2.
    late = res.requests[res.requests.arrival_time_ms > 1000]
    assert (late.decode_worker_idx == 0).all()
    # Worker-seconds: worker 0 for the whole run, workers 1 and 2 until their removal.
    end_s = res.summary["duration_ms"] / 1000.0
    expected = end_s + removed[1] / 1000.0 + removed[2] / 1000.0
    assert res.summary["decode_worker_seconds"] == pytest.approx(expected)
    assert res.summary["gpu_hours"] == pytest.approx(expected / 3600.0)


def test_no_startup_time_means_ready_at_once():
    res = simmodel.run(scenario(), scaling_policy=Schedule([2]))
    lc = res.lifecycle
    assert lc[lc.transition == "worker_ready"].at_ms.tolist() == [1000.0]
    r = res.requests.sort_values("arrival_time_ms")
    assert r[r.arrival_time_ms == 1100].decode_worker_idx.item() == 1


def test_tick_after_the_workload_is_done_is_dropped():
    # 30 requests every 100 ms end around 2915 ms: ticks at 1000, 2000 run; 3000 is dropped.
    pol = Schedule([None, None, None, None])
    simmodel.run(scenario(), scaling_policy=pol)
    assert [c["now_ms"] for c in pol.calls] == [1000.0, 2000.0]
    assert [c["tick_ordinal"] for c in pol.calls] == [0, 1]


def test_non_increasing_next_tick_is_not_rearmed():
    class Stuck(Schedule):
        def on_tick(self, snap):
            self.calls.append(snap)
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": snap["now_ms"]}

    pol = Stuck([])
    simmodel.run(scenario(), scaling_policy=pol)
    assert len(pol.calls) == 1


def test_non_finite_initial_tick_means_no_ticks():
    pol = Schedule([5], first=math.inf)
    res = simmodel.run(scenario(), scaling_policy=pol)
    assert pol.calls == [] and res.lifecycle.empty


def test_snapshot_counts_and_traffic():
    pol = Schedule([3, 3])
    simmodel.run(scenario(startup_time=0.5), scaling_policy=pol)
    first, second = pol.calls
    assert first["active_decode_count"] == 1 and first["starting_decode_count"] == 0
    assert second["active_decode_count"] == 3 and second["active_decode_ids"] == [0, 1, 2]
    # Arrivals in [0, 1000]: 0, 100, ..., 1000 -> 11 of 200 tokens in, 5 out.
    assert first["traffic"]["num_req"] == 11
    assert first["traffic"]["avg_isl"] == 200.0 and first["traffic"]["avg_osl"] == 5.0


class RandomPolicy:
    def __init__(self, targets, every):
        self.targets, self.every, self.i = targets, every, 0

    def initial_tick_ms(self):
        return self.every

    def on_tick(self, snap):
        # The list, then its last (non-zero) target for good (zero targets for good, where
        # waiting requests start workers: tests/test_planner_properties.py).
        t = self.targets[min(self.i, len(self.targets) - 1)]
        self.i += 1
        return {"target_prefill": None, "target_decode": t, "next_tick_ms": snap["now_ms"] + self.every}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=6), st.integers(1, 4), st.floats(5.0, 300.0),
       st.sampled_from([None, 0.0, 0.05, 0.3]), st.integers(1, 3))
def test_random_scaling_loses_no_request_and_drains_every_worker(targets, last, every, startup,
                                                                 workers):
    targets = targets + [last]
    sc = scenario(workers=workers, startup_time=startup, requests=40, interval=25.0, out=20)
    res = simmodel.run(sc, scaling_policy=RandomPolicy(targets, every))
    assert len(res.requests) == 40
    assert (res.requests.terminal_status == "completed").all()
    lc = res.lifecycle
    # Every drained worker eventually left, and left after it started draining.
    drained = set(lc[lc.transition == "worker_draining"].worker)
    removed = lc[lc.transition == "worker_removed"].set_index("worker").at_ms
    assert drained <= set(removed.index)
    for w in drained:
        start = lc[(lc.worker == w) & (lc.transition == "worker_draining")].at_ms.min()
        assert removed[w] >= start
    # No request was served by a worker after it was removed.
    for w, t in removed.items():
        served = res.requests[res.requests.decode_worker_idx == w]
        assert (served.terminal_time_ms <= t + 1e-9).all()
