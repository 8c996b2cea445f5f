"""Invariants tier: runs cut by ``max_sim_time_ms`` at generated times.

Multi-turn synthetic-like Mooncake sessions on 1-3 workers, cut anywhere from before the
first arrival to after the end.  Checked: the requests table has one row per dispatched
request (``num_requests``), dispatched + undispatched = every turn, every row one
terminal status, nothing completes after the cut, ``service_end_ms`` is the cut when
work was left and the worker-seconds bill exactly that long.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.scenario import scenario_from_dict


@st.composite
def cut_runs(draw, tmp_dir):
    sessions = draw(st.integers(1, 6))
    rows = []
    for s in range(sessions):
        start = draw(st.integers(0, 300))
        for turn in range(draw(st.integers(1, 3))):
            row = {"timestamp": start + 10 * turn, "session_id": f"s{s}",
                   "input_length": draw(st.integers(16, 600)),
                   "output_length": draw(st.integers(1, 40)),
                   "hash_ids": list(range(s * 10, s * 10 + 2))}
            if turn:
                row["delay"] = draw(st.integers(0, 50))     # think time after turn k-1
            rows.append(row)
    trace = tmp_dir / f"t{draw(st.integers(0, 10 ** 9))}.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = {"workload": {"trace": str(trace), "trace_block_size": 512},
            "cluster": {"workers": draw(st.integers(1, 3)),
                        "engine": {"block_size": 16, "num_gpu_blocks": 256}},
            "run": {"max_sim_time_ms": draw(st.floats(0.5, 2000.0))}}
    return scenario_from_dict(data, base_dir=str(tmp_dir), source="gen"), len(rows)


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("traces")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_truncations(tmp_dir, data):
    scenario, turns = data.draw(cut_runs(tmp_dir))
    cut = scenario.run.max_sim_time_ms
    res = simmodel.run(scenario)
    s, req = res.summary, res.requests
    assert len(req) == s["num_requests"]                          # one row per dispatch
    assert s["num_requests"] + s["undispatched_requests"] == turns
    assert set(req["terminal_status"]) <= {"completed", "rejected", "incomplete"}
    assert (req["arrival_time_ms"] <= cut).all()
    assert (req["terminal_time_ms"].dropna() <= cut).all()
    left = s["undispatched_requests"] > 0 or (req["terminal_status"] == "incomplete").any()
    if left:
        assert s["service_end_ms"] == cut
    else:
        assert s["service_end_ms"] <= cut
    workers = scenario.cluster.workers
    assert s["decode_worker_seconds"] == pytest.approx(workers * s["service_end_ms"] / 1000)
    assert s["duration_ms"] <= s["service_end_ms"]
