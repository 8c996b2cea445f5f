"""Invariants tier: hypothesis-generated small workloads run through ``simmodel.run``.

Workloads: a handful of requests whose prompts share prefixes of a few base hash-id
chains, random outputs and arrivals (ties included), some multi-turn sessions, 1-3
workers, pools small enough to force preemption, lifo/fifo, chunked prefill on/off
(with prompts that fit the budget when it is off), optional ``max_model_len``.  Every
request fits a worker's pool on its own, so every one must end.

Checked on every run: one terminal status per request, output lengths, timestamp order,
tokens stamped at pass ends, passes of a worker ordered and disjoint, KV within the pool,
and -- the important one -- decode coalescing on and off give identical results.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simmodel
from simmodel.result import REQUEST_COLUMNS
from simmodel.scenario import scenario_from_dict

UID = "uid" if "uid" in REQUEST_COLUMNS else "request_id"
#: a safety net: no generated workload needs anywhere near this long
MAX_SIM_MS = 1e6
#: summary keys that measure the simulator's own wall-clock time
WALL_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


@st.composite
def scenarios(draw):
    # "pressure": one worker, everything arriving at once, short prompts and long outputs
    # in a small pool -- the running set outgrows the pool and preempts.
    pressure = draw(st.booleans())
    bs = draw(st.sampled_from([16, 64]))
    tbs = draw(st.sampled_from([16, 64, 512]))
    num_blocks = draw(st.integers(6, 32))
    capacity = num_blocks * bs
    chunked = draw(st.booleans())
    budget = draw(st.sampled_from([64, 256, 1024, 8192]))
    max_model_len = None if pressure else draw(st.one_of(st.none(),
                                                         st.integers(32, 2 * capacity)))
    engine = {
        "block_size": bs,
        "num_gpu_blocks": num_blocks,
        "max_num_batched_tokens": budget,
        "max_num_seqs": 256 if pressure else draw(st.sampled_from([1, 3, 256])),
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": draw(st.booleans()) or draw(st.booleans()),
        "preemption_mode": draw(st.sampled_from(["lifo", "fifo"])),
        "max_model_len": max_model_len,
    }
    if draw(st.integers(0, 4)) == 0:
        engine["timing_model"] = {"type": "fixed", "prefill_ms": draw(st.sampled_from([0.7, 3.0])),
                                  "decode_ms": draw(st.sampled_from([0.25, 1.0]))}
    if draw(st.booleans()):
        engine["speedup_ratio"] = draw(st.sampled_from([0.0, 1.5, 2.0, 3.0]))

    # a request (prompt + outputs) must fit the pool alone; with chunking off its
    # sequence (recomputed after a preemption) must fit the budget too
    limit = capacity if chunked else min(capacity, budget)
    n = draw(st.integers(2 if pressure else 1, 9))
    rows, seen, fresh = [], set(), 1000
    for _ in range(n):
        if pressure:
            out = draw(st.integers(limit // 3, 2 * limit // 3))
        else:
            out = draw(st.integers(1, min(64, limit // 2)))
        max_in = limit - out                  # >= limit / 3 >= 21
        base = draw(st.integers(0, 2))
        n_shared = draw(st.integers(0, 6))
        n_own = draw(st.integers(0 if n_shared else 1, 2))
        hash_ids = [100 * base + j for j in range(n_shared)] + list(range(fresh, fresh + n_own))
        fresh += n_own
        longest = min(max_in, len(hash_ids) * tbs)
        short = max(1, min(longest, capacity // (2 * n)))
        input_length = draw(st.integers(1, short) if pressure
                            else st.integers(1, short) | st.integers(1, longest))
        r = {"hash_ids": hash_ids, "input_length": input_length, "output_length": out}
        session = None if pressure else draw(st.sampled_from([None, None, "s1", "s2"]))
        if session is not None:
            r["session_id"] = session
        if session is None or session not in seen:
            times = [0, 0, 3] if pressure else [0, 0, 5, 17.5, 40, 120, 300]
            r["timestamp"] = draw(st.sampled_from(times))
        else:
            r["delay"] = draw(st.sampled_from([0, 3, 25.0]))
        if session is not None:
            seen.add(session)
        rows.append(r)
    return {
        "rows": rows,
        "engine": engine,
        "workers": 1 if pressure else draw(st.sampled_from([1, 2, 3])),
        "trace_block_size": tbs,
        "record_kv_events": draw(st.booleans()),
    }


def run(tmp_path, spec, coalesce: bool):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in spec["rows"]))
    data = {
        "workload": {"trace": str(path), "trace_block_size": spec["trace_block_size"]},
        "cluster": {"workers": spec["workers"], "engine": spec["engine"]},
        "run": {"coalesce_decode": coalesce, "max_sim_time_ms": MAX_SIM_MS,
                "record_kv_events": spec["record_kv_events"]},
    }
    return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="invariants"))


def check_invariants(res, spec) -> None:
    df = res.requests
    eng = spec["engine"]
    # one row, one terminal status per request; everything ends
    assert len(df) == len(spec["rows"])
    assert not df.duplicated(["session_id", "turn_index"]).any()
    assert sorted(df[UID]) == list(range(len(df)))
    assert set(df.terminal_status) <= {"completed", "rejected"}, df.terminal_status.tolist()
    assert res.summary["num_requests"] == len(df)
    assert res.summary["completed_requests"] == int((df.terminal_status == "completed").sum())

    mml = eng["max_model_len"]
    done = df[df.terminal_status == "completed"]
    rejected = df[df.terminal_status == "rejected"]
    for r in done.itertuples():
        cap = r.requested_output_length
        if mml is not None:
            cap = min(cap, mml - r.input_length)
        assert r.output_length == cap
        assert r.arrival_time_ms <= r.first_admit_ms <= r.first_token_ms
        assert r.first_token_ms <= r.last_token_ms == r.terminal_time_ms
        assert 0 <= r.ttft_ms <= r.e2e_latency_ms
        assert r.admission_count >= 1
        assert r.readmission_count == r.admission_count - 1
        # a first admission computes at least the last prompt token; a re-admission's
        # cached prefix may extend into the tokens generated before the preemption
        assert 0 <= r.first_admission_reused_input_tokens < r.input_length
        assert r.first_admission_reused_input_tokens <= r.reused_input_tokens
        assert r.reused_input_tokens < r.input_length + r.output_length
        if r.admission_count == 1:
            assert r.reused_input_tokens == r.first_admission_reused_input_tokens
        if r.output_length >= 2:
            assert r.second_token_ms <= r.last_token_ms
            assert math.isclose(r.tpot_ms, (r.last_token_ms - r.first_token_ms) / (r.output_length - 1),
                                rel_tol=1e-12, abs_tol=1e-12)
        else:
            assert math.isnan(r.ttst_ms) and math.isnan(r.tpot_ms)
        if not eng["enable_prefix_caching"]:
            assert r.reused_input_tokens == 0
    for r in rejected.itertuples():
        assert mml is not None and r.input_length >= mml
        assert r.output_length == 0 and math.isnan(r.first_token_ms)
        assert r.terminal_time_ms >= r.arrival_time_ms
    if mml is not None:
        assert (df[df.input_length >= mml].terminal_status == "rejected").all()

    # passes: per worker ordered, disjoint, within the pool; tokens land on pass ends
    p = res.passes
    assert (p.kv_blocks_active <= eng["num_gpu_blocks"]).all()
    assert (p.kv_blocks_active >= 0).all()
    assert (p.end_ms >= p.start_ms).all()
    for w, wp in p.groupby("worker"):
        starts, ends = wp.start_ms.to_numpy(), wp.end_ms.to_numpy()
        assert (starts[1:] >= ends[:-1]).all(), f"worker {w}: overlapping passes"
        mine = done[done.decode_worker_idx == w]
        end_set = set(ends.tolist())
        for col in ("first_token_ms", "last_token_ms"):
            assert set(mine[col].tolist()) <= end_set
    assert set(done.decode_worker_idx) <= set(range(spec["workers"]))

    # conservation of prefill work: at least every first admission's uncached tokens
    s = res.summary
    assert s["total_output_tokens"] == int(done.output_length.sum())
    needed = int((done.input_length - done.first_admission_reused_input_tokens).sum())
    assert s["committed_prefill_tokens"] >= needed


def assert_same_runs(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.passes.reset_index(drop=True),
                                  b.passes.reset_index(drop=True), check_exact=True)
    sa = {k: v for k, v in a.summary.items() if k not in WALL_KEYS}
    sb = {k: v for k, v in b.summary.items() if k not in WALL_KEYS}
    assert sa.keys() == sb.keys()
    for k in sa:
        x, y = sa[k], sb[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        assert x == y, (k, x, y)
    if a.kv_events is not None or b.kv_events is not None:
        pd.testing.assert_frame_equal(a.kv_events, b.kv_events, check_exact=True)


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(scenarios())
def test_invariants_and_coalescing_changes_nothing(tmp_path, spec):
    coalesced = run(tmp_path, spec, True)
    stepped = run(tmp_path, spec, False)
    check_invariants(coalesced, spec)
    check_invariants(stepped, spec)
    assert_same_runs(coalesced, stepped)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(2, 6), st.integers(20, 200), st.sampled_from(["lifo", "fifo"]))
def test_long_decode_runs_interrupted_by_arrivals(tmp_path, n_long, n_short, out, mode):
    """Long decodes (where coalescing covers many passes) cut by arrivals at arbitrary
    instants, on a pool small enough to preempt: identical with and without coalescing."""
    rows = [{"timestamp": 0, "hash_ids": [i], "input_length": 100 + 37 * i, "output_length": out}
            for i in range(n_long)]
    rows += [{"timestamp": 13.7 * (j + 1) + 0.31 * j * j, "hash_ids": [50 + j],
              "input_length": 64 * (j + 1), "output_length": 3 + j} for j in range(n_short)]
    spec = {"rows": rows, "workers": 1, "trace_block_size": 512, "record_kv_events": True,
            "engine": {"num_gpu_blocks": 12, "preemption_mode": mode, "max_model_len": None,
                       "enable_prefix_caching": True, "block_size": 64}}
    a, b = run(tmp_path, spec, True), run(tmp_path, spec, False)
    check_invariants(a, spec)
    assert_same_runs(a, b)
    assert np.isfinite(a.requests.e2e_latency_ms).all()


def test_request_released_after_a_batch_formed_at_its_instant(tmp_path):
    # Found by hypothesis: at 28.65 ms worker 0's pass ends and its next pass is formed;
    # in the same instant worker 1 rejects s2's turn 1 (over max_model_len), which
    # releases turn 2 onto worker 0.  It must wait for the pass after the one formed at
    # that instant (rejected at the end of the pass starting at the next boundary),
    # whether worker 0 steps pass by pass or covers its decode passes with one run.
    rows = [{"hash_ids": [100, 101, 102, 103, 1000, 1001], "input_length": 95,
             "output_length": 6, "timestamp": 4},
            {"hash_ids": [100, 101, 102, 103, 1002, 1003], "input_length": 3,
             "output_length": 8, "session_id": "s1", "timestamp": 0},
            {"hash_ids": [1004], "input_length": 16, "output_length": 1, "timestamp": 0},
            {"hash_ids": [1005, 1006], "input_length": 1, "output_length": 1, "timestamp": 0},
            {"hash_ids": [0, 1007, 1008], "input_length": 48, "output_length": 1,
             "session_id": "s2", "timestamp": 4},
            {"hash_ids": [1009], "input_length": 16, "output_length": 2, "session_id": "s2",
             "delay": 0},
            {"hash_ids": [1010], "input_length": 16, "output_length": 1, "session_id": "s2",
             "delay": 0}]
    engine = {"block_size": 8, "num_gpu_blocks": 4, "max_num_batched_tokens": 8192,
              "max_num_seqs": 256, "enable_chunked_prefill": False,
              "enable_prefix_caching": False, "max_model_len": 8}
    spec = {"rows": rows, "engine": engine, "workers": 2, "trace_block_size": 16,
            "record_kv_events": False}
    coalesced, stepped = run(tmp_path, spec, True), run(tmp_path, spec, False)
    assert_same_runs(coalesced, stepped)
    r = stepped.requests
    t2 = r[(r.session_id == "s2") & (r.turn_index == 2)].iloc[0]
    ends = stepped.passes[stepped.passes.worker == 0].end_ms.tolist()
    k = ends.index(t2.arrival_time_ms)       # it arrives exactly at a pass end of worker 0
    assert t2.terminal_status == "rejected" and t2.terminal_time_ms == ends[k + 2]
