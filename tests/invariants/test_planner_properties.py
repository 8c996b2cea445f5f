"""Invariants tier for scaling: hypothesis-generated policies on small synthetic loads.

A generated policy ticks at random times (at least the 1 ms minimum apart) and asks for
random targets in [0, 8] (or leaves a pool unchanged); then it either stops ticking or
repeats its plan for as long as the workload runs.  Aggregated and disaggregated
clusters, round robin, with and without start-up times; some prompts too long for
``max_model_len`` (rejected).  No ``max_sim_time_ms``: every run must end by itself.

Checked: every request ends in exactly one terminal status (completed or rejected),
worker-seconds are >= 0 and equal the provisioned spans in the lifecycle table, and
every worker's transitions form a valid path (starting -> active -> draining ->
removed, in time order, each one's prior state the previous state), no worker serving
a request outside its life.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, PoolConfig, Scenario,
                             SyntheticConfig, TimingConfig, WorkloadConfig)

#: the legal transitions: (prior state, state)
PATHS = {(None, "starting"), (None, "active"), ("starting", "active"),
         ("active", "draining"), ("draining", "removed")}


class Generated:
    """Ticks at ``first`` then after each gap of ``plan`` [(gap_ms, prefill, decode)]."""

    def __init__(self, first, plan, repeat):
        self.first, self.plan, self.repeat = first, plan, repeat
        self.k = 0

    def initial_tick_ms(self):
        return self.first

    def on_tick(self, snap):
        if self.k >= len(self.plan) and not self.repeat:
            return {"target_prefill": None, "target_decode": None, "next_tick_ms": None}
        gap, prefill, decode = self.plan[self.k % len(self.plan)]
        self.k += 1
        return {"target_prefill": prefill, "target_decode": decode,
                "next_tick_ms": snap["now_ms"] + gap}


#: a pool's target in [0, 8] or unchanged; 0 drawn often, so pools empty out under load
targets = st.one_of(st.none(), st.just(0), st.integers(0, 8))


@st.composite
def cases(draw):
    disagg = draw(st.booleans())
    startup = draw(st.sampled_from([None, 0.0, 0.02, 0.3]))
    fixed = TimingConfig(type="fixed", prefill_ms=draw(st.sampled_from([2.0, 10.0])),
                         decode_ms=draw(st.sampled_from([0.5, 1.0])))
    max_len = draw(st.sampled_from([None, 400]))
    engine = EngineConfig(timing_model=fixed, startup_time=startup, max_model_len=max_len,
                          num_gpu_blocks=64, block_size=16)
    if disagg:
        cluster = ClusterConfig(prefill=PoolConfig(workers=draw(st.integers(1, 2)), engine=engine),
                                decode=PoolConfig(workers=draw(st.integers(1, 2)), engine=engine))
    else:
        cluster = ClusterConfig(workers=draw(st.integers(1, 3)), engine=engine)
    workload = WorkloadConfig(synthetic=SyntheticConfig(
        requests=draw(st.integers(1, 12)), input_tokens=draw(st.sampled_from([50, 300, 500])),
        output_tokens=draw(st.integers(1, 12)),
        arrival_interval_ms=draw(st.sampled_from([0.0, 3.0, 25.0, 120.0]))))
    plan = draw(st.lists(st.tuples(st.floats(1.0, 150.0), targets, targets),
                         min_size=1, max_size=8))
    policy = Generated(draw(st.floats(0.0, 60.0)), plan, draw(st.booleans()))
    return Scenario(workload=workload, cluster=cluster), policy


def check_lifecycle(res, disagg: bool) -> None:
    lc = res.lifecycle
    end = res.summary["service_end_ms"]
    pools = ("prefill", "decode") if disagg else ("agg",)
    initial = ({"prefill": res.scenario.cluster.prefill.workers,
                "decode": res.scenario.cluster.decode.workers} if disagg
               else {"agg": res.scenario.cluster.workers})
    for pool in pools:
        rows = lc[lc.pool == pool]
        ids = sorted(set(rows.worker) | set(range(initial[pool])))
        assert ids == list(range(len(ids)))                 # ids are handed out in order
        expected_s = 0.0
        for w in ids:
            mine = rows[rows.worker == w]
            state = "active" if w < initial[pool] else None
            last_t = 0.0
            created = 0.0 if w < initial[pool] else mine.at_ms.iloc[0]
            removed = end
            for r in mine.itertuples():
                prior = None if r.prior_state != r.prior_state else r.prior_state
                assert prior == state and (prior, r.state) in PATHS
                assert r.at_ms >= last_t
                state, last_t = r.state, r.at_ms
                if r.state == "removed":
                    removed = r.at_ms
            expected_s += max(0.0, min(end, removed) - created) / 1000.0
            # what the worker did lies within its life (a prefill worker's part ends when
            # the prompt's KV is released; a decode worker's with the request)
            if pool == "prefill":
                served = res.requests[res.requests.prefill_worker_idx == w]
                start, stop = served.prefill_admit_ms, served.source_released_ms
            else:
                served = res.requests[res.requests.decode_worker_idx == w]
                start, stop = served.terminal_time_ms, served.terminal_time_ms
            assert (start.dropna() >= created - 1e-9).all()        # NaN: rejected
            assert (stop.dropna() <= removed + 1e-9).all()
        key = "prefill_worker_seconds" if pool == "prefill" else "decode_worker_seconds"
        assert res.summary[key] >= 0.0
        assert res.summary[key] == pytest.approx(expected_s, rel=1e-9, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_generated_policies_serve_every_request_and_keep_the_lifecycle_consistent(case):
    sc, policy = case
    res = simmodel.run(sc, scaling_policy=policy)
    r = res.requests
    assert len(r) == sc.workload.synthetic.requests
    assert r.uid.is_unique
    assert r.terminal_status.isin(["completed", "rejected"]).all()
    assert r.terminal_time_ms.notna().all()
    done = r[r.terminal_status == "completed"]
    assert (done.output_length == done.requested_output_length).all()
    if sc.cluster.engine.max_model_len is None and not sc.cluster.disaggregated:
        assert len(done) == len(r)
    check_lifecycle(res, sc.cluster.disaggregated)
