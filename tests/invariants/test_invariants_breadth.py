"""Invariants tier for the engine variants (attention DP, speculative decoding) on the
hypothesis workloads of ``test_invariants``: every request ends once, outputs have their
length, timestamps are ordered and land on pass ends, KV stays within the pools."""
from __future__ import annotations


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_invariants import run, scenarios


@st.composite
def variants(draw):
    spec = draw(scenarios())
    eng = dict(spec["engine"])
    kind = draw(st.sampled_from(["dp", "mtp", "both"]))
    if kind in ("dp", "both"):
        eng["dp_size"] = draw(st.sampled_from([2, 3]))
        eng["prefill_schedule_interval"] = draw(st.sampled_from([1, 1, 2, 3]))
    if kind in ("mtp", "both"):
        n = draw(st.integers(1, 3))
        eng["aic_nextn"] = n
        eng["aic_nextn_accept_rates"] = draw(st.lists(st.sampled_from([0.0, 0.5, 0.9, 1.0]),
                                                      min_size=n, max_size=n))
    return {**spec, "engine": eng}


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=variants())
def test_engine_variants_keep_the_invariants(tmp_path, spec):
    res = run(tmp_path, spec, coalesce=True)
    df = res.requests
    eng = spec["engine"]
    dp = eng.get("dp_size", 1)
    mml = eng["max_model_len"]
    assert len(df) == len(spec["rows"])
    assert set(df.terminal_status) <= {"completed", "rejected"}
    done = df[df.terminal_status == "completed"]
    for r in done.itertuples():
        cap = r.requested_output_length if mml is None else min(r.requested_output_length,
                                                                 mml - r.input_length)
        assert r.output_length == cap
        assert r.arrival_time_ms <= r.first_admit_ms <= r.first_token_ms <= r.last_token_ms
        assert 0 <= r.ttft_ms <= r.e2e_latency_ms
        assert 0 <= r.decode_worker_idx < spec["workers"] * dp
    p = res.passes
    assert (p.kv_blocks_active <= eng["num_gpu_blocks"] * dp).all()
    for w, wp in p.groupby("worker"):
        ends = wp.end_ms.to_numpy()
        assert (wp.start_ms.to_numpy()[1:] >= ends[:-1]).all()
        mine = done[done.decode_worker_idx // dp == w]
        assert set(mine.last_token_ms.tolist()) <= set(ends.tolist())
    if "aic_nextn" in eng and len(done):
        assert 1.0 <= res.summary["mean_accept_length"] <= 1 + eng["aic_nextn"]
