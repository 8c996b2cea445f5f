"""Reliability tier: generated workloads x generated fault schedules x planner policies.

Each case is a small trace (sessions and single requests, shared prefixes, ties in time)
on an aggregated cluster (round robin or KV router, vLLM or SGLang) or a disaggregated one
(KV transfers, optional link contention), with a few faults of every kind, a retry policy,
sometimes client timeouts with retries, and sometimes a planner (a schedule or the load
policy).  Checked on every run (docs/faults.md, "Reliability"):

* conservation: every trace row is a row of ``requests`` or an undispatched turn, each
  row has exactly one terminal status, and the summary's status counts add up;
* per-request times are monotone, and retries are accounted (``attempts``,
  ``retried_ms``);
* KV blocks within [0, capacity] in every pass, and every block given back at the end
  (a run that was not cut leaves no worker holding KV or a handoff);
* every run ends (no cut-off is set: the run must run out of events by itself);
* determinism: the same seed gives the same results twice in one process (and, in
  ``test_determinism_across_processes``, in two);
* the identity rules: faults scheduled after the workload ends, or a straggler factor of
  1, leave every result as without them.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simmodel import sim
from simmodel.finish import collect
from simmodel.rng import Streams
from simmodel.scenario import scenario_from_dict

STATUSES = {"completed", "rejected", "cancelled", "timed_out", "failed"}
WALL_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
NUM_BLOCKS = (48, 200)


@st.composite
def traces(draw):
    n = draw(st.integers(1, 14))
    rows, seen = [], set()
    for i in range(n):
        base = draw(st.integers(0, 2))
        hash_ids = [100 * base + j for j in range(draw(st.integers(0, 3)))] + [1000 + i]
        r = {"hash_ids": hash_ids, "input_length": draw(st.integers(1, 64 * len(hash_ids))),
             "output_length": draw(st.integers(1, 80))}
        session = draw(st.sampled_from([None, None, "s1", "s2"]))
        if session is not None:
            r["session_id"] = session
        if session is None or session not in seen:
            r["timestamp"] = draw(st.sampled_from([0, 0, 2, 10, 25.5, 60, 200, 400]))
        else:
            r["delay"] = draw(st.sampled_from([0, 5, 30.0]))
        if session is not None:
            seen.add(session)
        rows.append(r)
    return rows


@st.composite
def fault_lists(draw, disagg: bool, sizes: dict):
    faults = []
    for _ in range(draw(st.integers(0, 4) | st.integers(1, 4))):
        kind = draw(st.sampled_from(["fail", "fail", "random", "slow"]
                                    + (["link"] if disagg else [])))
        at = draw(st.sampled_from([0.0, 3.0, 8.0, 15.0, 30.0, 60.0, 150.0, 400.0]))
        pool = draw(st.sampled_from(sorted(sizes))) if disagg else None
        f = {"kind": kind}
        if kind == "fail":
            f["at_ms"] = at
            if draw(st.booleans()):
                f["worker"] = draw(st.integers(0, sizes[pool or "agg"] - 1))
            else:
                f["count"] = draw(st.integers(1, sizes[pool or "agg"]))
            if draw(st.integers(0, 3)):
                f["repair_ms"] = draw(st.sampled_from([1.0, 30.0, 300.0]))
        elif kind == "random":
            f.update(mtbf_s=draw(st.sampled_from([0.05, 0.3, 2.0])),
                     mttr_s=draw(st.sampled_from([0.01, 0.1])))
        elif kind == "slow":
            f.update(at_ms=at, duration_ms=draw(st.sampled_from([10.0, 200.0])),
                     worker=draw(st.integers(0, sizes[pool or "agg"] - 1)),
                     factor=draw(st.sampled_from([1.0, 1.5, 4.0])))
        else:
            if any(x["kind"] == "link" for x in faults):
                continue                           # (link windows must not overlap)
            f.update(at_ms=at, duration_ms=draw(st.sampled_from([20.0, 500.0])),
                     bandwidth_factor=draw(st.sampled_from([0.1, 0.5])))
        if pool is not None and kind != "link":
            f["pool"] = pool
        faults.append(f)
    return faults


@st.composite
def scenarios(draw):
    disagg = draw(st.booleans())
    backend = draw(st.sampled_from(["vllm", "vllm", "sglang"]))
    blocks = draw(st.sampled_from(NUM_BLOCKS))
    engine = {"backend": backend, "block_size": 16, "num_gpu_blocks": blocks}
    if disagg:
        sizes = {"prefill": draw(st.integers(1, 2)), "decode": draw(st.integers(1, 3))}
        transfer = {"bandwidth_gb_s": 1.0, "bytes_per_token": 65536}
        if draw(st.booleans()):
            transfer.update(contention=True, policy=draw(st.sampled_from(["fair", "fifo"])))
        cluster = {"prefill": {"workers": sizes["prefill"], "engine": engine},
                   "decode": {"workers": sizes["decode"], "engine": engine},
                   "kv_transfer": transfer}
    else:
        sizes = {"agg": draw(st.integers(1, 3))}
        cluster = {"workers": sizes["agg"], "engine": engine,
                   "router": {"mode": draw(st.sampled_from(["round_robin", "kv"]))}}
    workload = {"trace_block_size": 64}
    if draw(st.booleans()):
        workload["client_timeout_ms"] = draw(st.sampled_from([30.0, 150.0, 2000.0]))
        workload["client_retries"] = draw(st.integers(0, 2))
    data = {"seed": draw(st.integers(0, 3)), "workload": workload, "cluster": cluster,
            "faults": draw(fault_lists(disagg, sizes)),
            "retry": {"max_attempts": draw(st.integers(1, 4)),
                      "backoff_ms": draw(st.sampled_from([0.0, 10.0, 100.0])),
                      "backoff_factor": 2.0}}
    planner = draw(st.sampled_from([None, None, "schedule", "load"]))
    if planner == "schedule":
        data["planner"] = {"kind": "schedule", "steps": [
            {"at_ms": 100.0, "decode": draw(st.integers(1, 3))}]}
    elif planner == "load":
        data["planner"] = {"kind": "load", "interval_ms": 50.0, "min_decode": 1,
                           "max_decode": 3}
    return {"rows": draw(traces()), "data": data}


def build_and_run(tmp_path, spec):
    """Run ``spec`` through the simulator's own steps and return (cluster, result)."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in spec["rows"]))
    data = json.loads(json.dumps(spec["data"]))
    data["workload"]["trace"] = str(path)
    scenario = scenario_from_dict(data, base_dir=str(tmp_path), source="reliability")
    from simmodel.cluster.policies import make_policy
    cluster = sim.build(scenario, Streams(scenario.seed), None, make_policy(scenario))
    sim.run_until(cluster.env, None, sim.Watchdog(cluster.env, cluster))
    if cluster.faults is not None:
        cluster.recovery.strand(cluster.driver.requests)
    return cluster, collect(scenario, cluster, 0.0)


def check(cluster, res, spec) -> None:
    df, s = res.requests, res.summary
    rows = spec["rows"]
    # conservation: every row ends once, or was never released (a session cut short)
    assert len(df) + s["undispatched_requests"] == len(rows)
    assert s["undispatched_requests"] == 0 or (df.terminal_status != "completed").any()
    assert set(df.terminal_status) <= STATUSES, set(df.terminal_status)
    assert not df.duplicated(["session_id", "turn_index"]).any()
    if "completed_requests" in s and "failed_requests" in s:
        assert sum(s[f"{k}_requests"] for k in STATUSES) == len(df)
    released = df[df.uid >= 0]
    assert (released.attempts >= 1).all() and (released.retried_ms >= 0).all()
    assert (released.retried_ms <= released.terminal_time_ms - released.arrival_time_ms).all()
    max_attempts = spec["data"]["retry"]["max_attempts"]
    clients = spec["data"]["workload"].get("client_retries", 0)
    assert (released.attempts <= max_attempts * (1 + clients)).all()
    failed = released[released.terminal_status == "failed"]
    assert ((failed.attempts >= max_attempts) | (failed.first_token_ms != failed.first_token_ms)
            ).all()
    done = df[df.terminal_status == "completed"]
    for r in done.itertuples():
        assert r.arrival_time_ms + r.retried_ms <= r.first_token_ms <= r.last_token_ms
        assert r.last_token_ms == r.terminal_time_ms
        assert r.output_length == r.requested_output_length
    # KV within the pool at every pass, and nothing held once the run is over
    blocks = spec["data"]["cluster"].get("engine", {}).get("num_gpu_blocks") or \
        spec["data"]["cluster"]["decode"]["engine"]["num_gpu_blocks"]
    assert res.passes.kv_blocks_active.between(0, blocks).all()
    for w in cluster.prefill_workers + cluster.workers:
        if w.state in ("failed", "removed"):
            continue
        assert w.sched.held == 0, (w.pool, w.idx, w.sched.held)
        assert not w.sched.running and not w.sched.waiting
        assert w.sched.kv.active_blocks == 0, (w.pool, w.idx, w.sched.kv.active_blocks)
    # passes of one worker never overlap (a failed pass is never logged)
    for _, wp in res.passes.groupby(["pool", "worker"]):
        assert (wp.start_ms.to_numpy()[1:] >= wp.end_ms.to_numpy()[:-1]).all()


def assert_same(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.passes, b.passes, check_exact=True)
    sa = {k: v for k, v in a.summary.items() if k not in WALL_KEYS}
    sb = {k: v for k, v in b.summary.items() if k not in WALL_KEYS}
    for k in set(sa) & set(sb):
        x, y = sa[k], sb[k]
        if isinstance(x, float) and math.isnan(x) and isinstance(y, float) and math.isnan(y):
            continue
        assert x == y, (k, x, y)


CASES = int(os.environ.get("SIMMODEL_RELIABILITY_CASES", "150"))


@settings(max_examples=CASES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=scenarios())
def test_faults_conserve_and_repeat(tmp_path, spec):
    cluster, res = build_and_run(tmp_path, spec)
    check(cluster, res, spec)
    _, again = build_and_run(tmp_path, spec)
    assert_same(res, again)


def _late(spec, at_ms: float):
    """``spec`` with each timed fault moved to ``at_ms`` and no random ones."""
    out = json.loads(json.dumps(spec))
    faults = [f for f in out["data"]["faults"] if f["kind"] != "random"]
    for f in faults:
        f["at_ms"] = at_ms
    out["data"]["faults"] = faults
    return out


@settings(max_examples=max(10, CASES // 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=scenarios())
def test_faults_after_the_workload_change_nothing(tmp_path, spec):
    spec["data"]["workload"].pop("client_timeout_ms", None)
    spec["data"]["workload"].pop("client_retries", None)
    clean = json.loads(json.dumps(spec))
    clean["data"]["faults"] = []
    _, base = build_and_run(tmp_path, clean)
    _, late = build_and_run(tmp_path, _late(spec, 1e9))
    assert_same(base, late)
    assert late.summary.get("worker_failures", 0) == 0


@settings(max_examples=max(10, CASES // 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=scenarios(), at=st.sampled_from([0.0, 20.0, 150.0]))
def test_a_straggler_of_factor_one_changes_nothing(tmp_path, spec, at):
    spec["data"]["workload"].pop("client_timeout_ms", None)
    spec["data"]["workload"].pop("client_retries", None)
    spec["data"]["faults"] = []
    _, base = build_and_run(tmp_path, spec)
    pool = "decode" if "decode" in spec["data"]["cluster"] else None
    slow = {"kind": "slow", "at_ms": at, "duration_ms": 500.0, "worker": 0, "factor": 1.0}
    if pool:
        slow["pool"] = pool
    spec["data"]["faults"] = [slow]
    _, same = build_and_run(tmp_path, spec)
    assert_same(base, same)


@pytest.mark.parametrize("seed", [1, 2])
def test_determinism_across_processes(tmp_path, seed):
    """The same fault scenario run by two interpreters writes the same tables."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 20 * i, "hash_ids": [i % 3, 100 + i],
                                         "input_length": 100, "output_length": 30}) + "\n"
                             for i in range(40)))
    yaml_text = f"""
seed: {seed}
workload: {{trace: t.jsonl, trace_block_size: 64, client_timeout_ms: 400, client_retries: 1}}
cluster: {{workers: 3, engine: {{block_size: 16, num_gpu_blocks: 200}}, router: {{mode: kv}}}}
faults:
  - {{kind: random, mtbf_s: 0.2, mttr_s: 0.05}}
  - {{kind: fail, at_ms: 100, count: 2, repair_ms: 80}}
retry: {{max_attempts: 3, backoff_ms: 10}}
"""
    (tmp_path / "s.yaml").write_text(yaml_text)
    outs = []
    for k in range(2):
        out = tmp_path / f"out{k}"
        subprocess.run([sys.executable, "-m", "simmodel", "run", str(tmp_path / "s.yaml"),
                        "--out", str(out), "--quiet"], check=True)
        outs.append(out)
    for name in ("requests.parquet", "passes.parquet", "lifecycle.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(outs[0] / name),
                                      pd.read_parquet(outs[1] / name), check_exact=True)
    assert (pd.read_parquet(outs[0] / "requests.parquet").attempts > 1).any()
