"""Scale to zero: a pool drained to no worker starts one when a request waits.

Micro-scenarios with the fixed timing model (prefill 10 ms per pass with prompt work,
decode 1 ms per pass): a request of 5 output tokens alone on a ready worker has TTFT
10 ms (aggregated; the prefill pass emits the first token) and E2E 14 ms (four decode
passes).  Disaggregated: prefill 10 ms, zero-time transfer, one decode pass for the
first visible token (TTFT 11 ms), four more (E2E 15 ms).
"""
from __future__ import annotations

import textwrap

import pytest

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, PoolConfig, RouterConfig, Scenario,
                             SyntheticConfig, TimingConfig, WorkloadConfig)

FIXED = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)


class Plan:
    """Ticks at ``first`` then every ``every`` ms; tick k applies ``plan[k]`` =
    (target_prefill, target_decode); ticks stop after the plan."""

    def __init__(self, plan, first=100.0, every=1000.0):
        self.plan, self.first, self.every = list(plan), first, every
        self.k = 0

    def initial_tick_ms(self):
        return self.first

    def on_tick(self, snap):
        p, d = self.plan[self.k]
        self.k += 1
        nxt = snap["now_ms"] + self.every if self.k < len(self.plan) else None
        return {"target_prefill": p, "target_decode": d, "next_tick_ms": nxt}


def synthetic(requests=2, interval=1000.0):
    return WorkloadConfig(synthetic=SyntheticConfig(
        requests=requests, input_tokens=200, output_tokens=5, arrival_interval_ms=interval))


def agg(startup=None, workers=1, requests=2, interval=1000.0, router=None):
    return Scenario(workload=synthetic(requests, interval), cluster=ClusterConfig(
        workers=workers, engine=EngineConfig(timing_model=FIXED, startup_time=startup),
        router=router or RouterConfig()))


def disagg(prefill_startup=0.5, decode_startup=0.3, requests=2, interval=1000.0):
    def pool(startup):
        return PoolConfig(workers=1, engine=EngineConfig(timing_model=FIXED,
                                                         startup_time=startup))
    return Scenario(workload=synthetic(requests, interval), cluster=ClusterConfig(
        prefill=pool(prefill_startup), decode=pool(decode_startup)))


def transitions(res):
    return [(r.at_ms, r.pool, int(r.worker), r.transition, r.cause)
            for r in res.lifecycle.itertuples()]


@pytest.mark.parametrize("startup", [None, 0.5])
def test_agg_request_arriving_at_an_empty_pool_is_served_after_startup(startup):
    # The tick at 100 ms drains the only worker (idle since 14 ms: removed at once).
    # Request 1 arrives at 1000 ms to no worker: worker 1 starts then, is ready at
    # 1000 + startup, and serves it in 10 + 4 ms.  Worker-seconds: 0.1 s of worker 0 plus
    # worker 1 from 1000 ms (the scale-up) to the end.
    res = simmodel.run(agg(startup), scaling_policy=Plan([(None, 0)]))
    wait = 0.0 if startup is None else startup * 1000.0
    r = res.requests.sort_values("arrival_time_ms")
    assert (r.terminal_status == "completed").all()
    assert r.ttft_ms.tolist() == [10.0, 10.0 + wait]
    assert r.e2e_latency_ms.tolist() == [14.0, 14.0 + wait]
    assert r.decode_worker_idx.tolist() == [0, 1]
    started = [(1000.0, "agg", 1, "worker_ready", "request_waiting")] if startup is None else [
        (1000.0, "agg", 1, "worker_starting", "request_waiting"),
        (1500.0, "agg", 1, "worker_ready", "worker_ready_event")]
    assert transitions(res) == [(100.0, "agg", 0, "worker_draining", "planner_scale"),
                                (100.0, "agg", 0, "worker_removed", "drain_settlement")] + started
    end = 1014.0 + wait
    assert res.summary["duration_ms"] == end
    assert res.summary["decode_worker_seconds"] == pytest.approx(0.1 + (end - 1000.0) / 1000.0)
    assert res.lifecycle.tick_ordinal.isna().tolist() == [False, True] + [True] * len(started)


def test_disagg_empty_pools_each_start_a_worker_when_a_request_waits_there():
    # Both pools drained at 100 ms.  Request 1 arrives at 1000: prefill worker 1 starts
    # (ready 1500), prefills until 1510; then no decode worker: decode worker 1 starts
    # at 1510 (ready 1810), one decode pass -> first token 1811, four more -> 1815.
    res = simmodel.run(disagg(), scaling_policy=Plan([(0, 0)]))
    r = res.requests.sort_values("arrival_time_ms")
    assert (r.terminal_status == "completed").all()
    assert r.ttft_ms.tolist() == [11.0, 811.0] and r.e2e_latency_ms.tolist() == [15.0, 815.0]
    assert r.source_held_ms.tolist() == [10.0, 1510.0]
    assert r.destination_reserved_ms.tolist() == [10.0, 1810.0]
    assert [t for t in transitions(res) if t[4] == "request_waiting"] == [
        (1000.0, "prefill", 1, "worker_starting", "request_waiting"),
        (1510.0, "decode", 1, "worker_starting", "request_waiting")]
    assert res.summary["prefill_worker_seconds"] == pytest.approx(0.1 + 0.815)
    assert res.summary["decode_worker_seconds"] == pytest.approx(0.1 + 0.305)


def test_disagg_decode_pool_alone_drained_to_zero():
    # Only decode is drained: request 1 is prefilled on worker 0 at 1000-1010, then
    # decode worker 1 starts at 1010 (ready 1310): TTFT 311, E2E 315.
    res = simmodel.run(disagg(), scaling_policy=Plan([(None, 0)]))
    r = res.requests.sort_values("arrival_time_ms")
    assert r.ttft_ms.tolist() == [11.0, 311.0] and r.e2e_latency_ms.tolist() == [15.0, 315.0]


def test_disagg_tick_draining_prefill_at_an_arrival_instant():
    # Arrivals every 100 ms; the tick at 100 ms drains the prefill pool after request 1
    # arrived but before it is routed (disaggregated arrivals are routed after the tick):
    # a worker starts at once for it (no start-up time here).
    res = simmodel.run(disagg(None, None, requests=3, interval=100.0),
                       scaling_policy=Plan([(0, None)]))
    assert (res.requests.terminal_status == "completed").all()
    assert (100.0, "prefill", 1, "worker_ready", "request_waiting") in transitions(res)


def test_kv_router_queue_drained_to_zero_starts_a_worker():
    # Router queue on: two long prompts at once make worker 0 busy, so the second waits
    # in the router's queue; the tick at 5 ms drains worker 0 under it: worker 1 starts
    # at once for the queued request.
    sc = Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=2, input_tokens=9000, output_tokens=5, arrival_interval_ms=0.0)),
        cluster=ClusterConfig(workers=1, engine=EngineConfig(timing_model=FIXED),
                              router=RouterConfig(mode="kv", router_queue_threshold=0.5)))
    res = simmodel.run(sc, scaling_policy=Plan([(None, 0)], first=5.0))
    assert (res.requests.terminal_status == "completed").all()
    assert (5.0, "agg", 1, "worker_ready", "request_waiting") in transitions(res)
    assert sorted(res.requests.decode_worker_idx) == [0, 1]


def test_later_targets_still_apply_after_a_scale_from_zero():
    # 0 at 100 ms; request 1 at 1000 starts worker 1; the tick at 1100 asks for 3.
    res = simmodel.run(agg(requests=3), scaling_policy=Plan([(None, 0), (None, 3)]))
    t = transitions(res)
    assert (1000.0, "agg", 1, "worker_ready", "request_waiting") in t
    assert [x[2] for x in t if x[0] == 1100.0] == [2, 3]
    assert res.requests.decode_worker_idx.tolist()[-1] == 2     # round robin after 1


def test_load_planner_with_min_decode_zero_serves_every_request(tmp_path):
    # The load policy drains the idle pool to 0 at 100 ms and, with no worker, never
    # sees a reason to scale up: each arrival starts a worker (0.2 s start-up).
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""\
        workload:
          synthetic: {requests: 20, input_tokens: 500, output_tokens: 20,
                      arrival_interval_ms: 700.0}
        cluster:
          workers: 2
          engine: {startup_time: 0.2, timing_model: {type: fixed, prefill_ms: 10.0,
                                                     decode_ms: 1.0}}
        planner: {kind: load, min_decode: 0, interval_ms: 100}
        run: {max_sim_time_ms: 100000}
        """))
    res = simmodel.run(simmodel.load_scenario(path))
    r = res.requests
    assert len(r) == 20 and (r.terminal_status == "completed").all()
    lc = res.lifecycle
    assert lc[lc.cause == "request_waiting"].at_ms.min() == 1400.0
    # the first two arrive while workers exist; later ones wait the start-up time
    assert r.ttft_ms.tolist()[:3] == [10.0, 10.0, 210.0]
    assert res.summary["duration_ms"] < 100000
