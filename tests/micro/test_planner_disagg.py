"""Scaling a disaggregated cluster, and the routing rule behind it.

Fixed timing model (prefill 100 ms per pass with prompt work, decode 10 ms per pass) so the
times follow by hand.
"""
from __future__ import annotations

from hypothesis import given, settings, strategies as st
from pytest import approx

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, PoolConfig, Scenario,
                             SyntheticConfig, TimingConfig, WorkloadConfig)

FIXED = TimingConfig(type="fixed", prefill_ms=100.0, decode_ms=10.0)


def disagg(requests=12, interval=50.0, out=5, prefill=1, decode=1, startup=None):
    eng = EngineConfig(timing_model=FIXED, startup_time=startup)
    return Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=requests, input_tokens=1000, output_tokens=out,
            arrival_interval_ms=interval)),
        cluster=ClusterConfig(prefill=PoolConfig(workers=prefill, engine=eng),
                              decode=PoolConfig(workers=decode, engine=eng)))


def test_arrival_at_a_prefill_pass_end_waits_for_the_next_pass():
    # Arrivals every 50 ms, prefill passes of 100 ms: [0,100) takes request 0; at 100 the
    # pass for request 1 (arrived at 50) is formed before request 2 (arriving at 100) is
    # routed, so request 2 starts at 200 with request 3 (arrived 150).
    res = simmodel.run(disagg(requests=4))
    r = res.requests.sort_values("arrival_time_ms")
    assert r.prefill_admit_ms.tolist() == [0.0, 100.0, 200.0, 200.0]


class Steps:
    def __init__(self, plan, every=100.0):
        self.plan, self.every, self.k = plan, every, 0

    def initial_tick_ms(self):
        return self.every

    def on_tick(self, snap):
        p, d = self.plan[min(self.k, len(self.plan) - 1)]
        self.k += 1
        return {"target_prefill": p, "target_decode": d, "next_tick_ms": snap["now_ms"] + self.every}


def test_scale_both_pools_then_round_robin_over_active_workers():
    # Tick at 100 ms: 2 prefill and 2 decode workers, ready at once.  Requests arriving
    # later alternate between the prefill workers (routed at their arrival).
    res = simmodel.run(disagg(requests=8, interval=100.0), scaling_policy=Steps([(2, 2)]))
    r = res.requests.sort_values("arrival_time_ms")
    assert r.prefill_worker_idx.tolist()[1:] == [1, 0, 1, 0, 1, 0, 1]
    assert set(r.decode_worker_idx) == {0, 1}
    lc = res.lifecycle
    assert sorted(zip(lc.pool, lc.worker, lc.transition)) == [
        ("decode", 1, "worker_ready"), ("prefill", 1, "worker_ready")]
    s = res.summary
    end = s["duration_ms"] / 1000.0
    assert s["prefill_worker_seconds"] == s["decode_worker_seconds"] == approx(2 * end - 0.1)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=5),
       st.sampled_from([None, 0.0, 0.15]), st.floats(30.0, 400.0))
def test_random_scaling_of_both_pools_loses_no_request(plan, startup, every):
    plan = plan + [(1, 1)]          # ends with one worker per pool: the work can finish
    res = simmodel.run(disagg(requests=25, interval=20.0, out=15, startup=startup),
                       scaling_policy=Steps(plan, every))
    r = res.requests
    assert len(r) == 25 and (r.terminal_status == "completed").all()
    lc = res.lifecycle
    for pool in ("prefill", "decode"):
        mine = lc[lc.pool == pool]
        drained = set(mine[mine.transition == "worker_draining"].worker)
        removed = mine[mine.transition == "worker_removed"].set_index("worker").at_ms
        assert drained <= set(removed.index)
        col = "prefill_worker_idx" if pool == "prefill" else "decode_worker_idx"
        for w, t in removed.items():
            # nothing served there after it left (a prefill source is released by then)
            served = r[r[col] == w]
            last = served.source_released_ms if pool == "prefill" else served.terminal_time_ms
            assert (last <= t + 1e-9).all()
