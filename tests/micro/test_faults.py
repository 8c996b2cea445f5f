"""Faults on hand-computed micro scenarios (docs/faults.md).

Fixed pass costs keep the arithmetic visible: a pass with prompt work costs
``PREFILL`` = 10 ms, a pass with decoders ``DECODE`` = 2 ms (a disaggregated prefill
worker pays only the first, a decode worker only the second).  A prompt's pass emits its
first token (aggregated), so a request of ``n`` output tokens alone on a worker takes
10 + 2 (n - 1) ms.  Every case runs with decode runs coalesced and stepped.
"""
from __future__ import annotations

import json
import math

import pytest

import simmodel
from simmodel.scenario import scenario_from_dict

PREFILL, DECODE = 10.0, 2.0
FIXED = {"type": "fixed", "prefill_ms": PREFILL, "decode_ms": DECODE}


def run(tmp_path, rows, data: dict, coalesce: bool):
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = json.loads(json.dumps(data))
    data.setdefault("workload", {}).update(trace=str(path), trace_block_size=16)
    data.setdefault("run", {})["coalesce_decode"] = coalesce
    res = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="micro"))
    return res, res.requests.set_index("session_id")


def agg(workers: int, **engine) -> dict:
    return {"workers": workers, "engine": {"block_size": 16, "timing_model": FIXED, **engine}}


def req(sid: str, ts: float, out: int, blocks: int = 4) -> dict:
    return {"session_id": sid, "timestamp": ts, "hash_ids": list(range(100, 100 + blocks)),
            "input_length": 16 * blocks, "output_length": out}


@pytest.mark.parametrize("coalesce", [True, False])
def test_failure_mid_decode_retries_after_the_backoff(tmp_path, coalesce):
    """One request of 10 tokens on worker 0 of 2: tokens at 10, 12, 14; worker 0 fails at
    15 (the pass 14-16 never ends).  Retry 1 waits backoff_ms = 200: sent at 215 to
    worker 1, whose prefill pass ends at 225 (the first token the client keeps) and whose
    9 decode passes end at 243."""
    data = {"cluster": agg(2),
            "faults": [{"kind": "fail", "at_ms": 15.0, "worker": 0}],
            "retry": {"max_attempts": 3, "backoff_ms": 200.0, "backoff_factor": 2.0}}
    res, df = run(tmp_path, [req("a", 0.0, 10)], data, coalesce)
    r = df.loc["a"]
    assert r.terminal_status == "completed" and r.attempts == 2
    assert r.retried_ms == 215.0
    assert r.first_token_ms == 225.0 and r.ttft_ms == 225.0
    assert r.terminal_time_ms == 243.0 == r.e2e_latency_ms
    assert r.decode_worker_idx == 1 and r.output_length == 10
    life = res.lifecycle
    assert list(life.transition) == ["worker_failed"] and life.at_ms.tolist() == [15.0]
    # worker 0 logged its three ended passes, not the one in flight
    assert res.passes[res.passes.worker == 0].end_ms.tolist() == [10.0, 12.0, 14.0]
    assert res.summary["worker_failures"] == 1 and res.summary["retries"] == 1


@pytest.mark.parametrize("coalesce", [True, False])
def test_the_backoff_grows_by_its_factor(tmp_path, coalesce):
    """One worker, failing at 15 and at 130, back 1 ms later each time.  Attempt 1 is
    lost at 15; retry 1 waits 100 ms (sent at 115: prefill 115-125, tokens from 125) and
    is lost at 130; retry 2 waits 100 x 2 = 200 ms: sent at 330, first token at 340, its
    10 tokens end at 358."""
    data = {"cluster": agg(1),
            "faults": [{"kind": "fail", "at_ms": 15.0, "worker": 0, "repair_ms": 1.0},
                       {"kind": "fail", "at_ms": 130.0, "worker": 0, "repair_ms": 1.0}],
            "retry": {"max_attempts": 3, "backoff_ms": 100.0, "backoff_factor": 2.0}}
    res, df = run(tmp_path, [req("a", 0.0, 10)], data, coalesce)
    r = df.loc["a"]
    assert (r.terminal_status, r.attempts, r.retried_ms) == ("completed", 3, 330.0)
    assert r.first_token_ms == 340.0 and r.terminal_time_ms == 358.0
    assert list(res.lifecycle.transition) == ["worker_failed", "worker_repaired"] * 2


@pytest.mark.parametrize("coalesce", [True, False])
def test_a_request_left_without_workers_fails_when_the_run_ends(tmp_path, coalesce):
    """Both workers fail at 5 (back at 55) and again at 60, for good.  The request lost
    at 5 is sent again at 105 (backoff 100), finds no worker up and waits in the router;
    nothing is left to happen, so it ends ``failed`` at the run's last instant, 105."""
    data = {"cluster": agg(2),
            "faults": [{"kind": "fail", "at_ms": 5.0, "count": 2, "repair_ms": 50.0},
                       {"kind": "fail", "at_ms": 60.0, "count": 2}],
            "retry": {"max_attempts": 2, "backoff_ms": 100.0, "backoff_factor": 2.0}}
    res, df = run(tmp_path, [req("a", 0.0, 10)], data, coalesce)
    r = df.loc["a"]
    assert r.terminal_status == "failed" and r.attempts == 2 and r.retried_ms == 105.0
    assert r.terminal_time_ms == 105.0
    assert res.summary["failed_requests"] == 1 and res.summary["worker_failures"] == 4


@pytest.mark.parametrize("coalesce", [True, False])
def test_max_attempts_reached_ends_failed_at_the_failure(tmp_path, coalesce):
    """max_attempts 1: the request lost at 15 is not retried; it fails there."""
    data = {"cluster": agg(2), "faults": [{"kind": "fail", "at_ms": 15.0, "worker": 0}],
            "retry": {"max_attempts": 1}}
    res, df = run(tmp_path, [req("a", 0.0, 10)], data, coalesce)
    r = df.loc["a"]
    assert (r.terminal_status, r.attempts, r.terminal_time_ms) == ("failed", 1, 15.0)
    assert r.output_length == 3                  # the tokens it had streamed by then


@pytest.mark.parametrize("coalesce", [True, False])
@pytest.mark.parametrize("timeout, status, end, tokens", [
    (18.0, "completed", 18.0, 5),    # the pass ending at 18 completes it: pass ends first
    (17.0, "completed", 18.0, 5),    # the cancel waits for the pass in flight, which ends it
    (16.0, "timed_out", 16.0, 4),    # at a pass end that does not complete it: cancelled now
    (15.0, "timed_out", 16.0, 4),    # mid-pass: cancelled at the end of the pass in flight
])
def test_a_timeout_at_a_pass_end(tmp_path, coalesce, timeout, status, end, tokens):
    """5 tokens at 10, 12, 14, 16, 18.  Pass ends come before timeouts at one instant
    (``Phase.PASS_END`` < ``Phase.FAULT``), and a client's cancel reaches the engine
    between passes."""
    data = {"cluster": agg(1), "workload": {"client_timeout_ms": timeout}}
    res, df = run(tmp_path, [req("a", 0.0, 5)], data, coalesce)
    r = df.loc["a"]
    assert (r.terminal_status, r.terminal_time_ms, r.output_length) == (status, end, tokens)
    assert res.summary[f"{status}_requests"] == 1


@pytest.mark.parametrize("coalesce", [True, False])
def test_client_retries_under_overload_redo_work(tmp_path, coalesce):
    """One worker serving one request at a time (max_num_seqs 1); three requests of 11
    tokens at 0 (30 ms each alone); clients give up after 50 ms and retry once.

    a runs 0-30.  b runs from 30; at 50 its pass 48-50 has just ended: cancelled (20 ms
    of work thrown away) and sent again; c, still waiting, too.  b' runs 50-80; c' from
    80 and is cancelled at its timeout 100 (a pass end), with no retry left."""
    rows = [req("a", 0.0, 11), req("b", 0.0, 11, 5), req("c", 0.0, 11, 6)]
    data = {"cluster": agg(1, max_num_seqs=1),
            "workload": {"client_timeout_ms": 50.0, "client_retries": 1}}
    res, df = run(tmp_path, rows, data, coalesce)
    assert df.loc["a"].terminal_time_ms == 30.0 and df.loc["a"].attempts == 1
    b, c = df.loc["b"], df.loc["c"]
    assert (b.terminal_status, b.attempts, b.retried_ms) == ("completed", 2, 50.0)
    assert b.first_token_ms == 60.0 and b.terminal_time_ms == 80.0
    assert (c.terminal_status, c.attempts, c.terminal_time_ms) == ("timed_out", 2, 100.0)
    busy = float((res.passes.end_ms - res.passes.start_ms).sum())
    assert busy == 30.0 + 20.0 + 30.0 + 20.0     # 40 ms of it redone or thrown away
    s = res.summary
    assert (s["completed_requests"], s["timed_out_requests"], s["retries"]) == (2, 1, 2)


def disagg(decode_workers: int) -> dict:
    pool = {"block_size": 16, "timing_model": FIXED}
    return {"prefill": {"workers": 1, "engine": pool},
            "decode": {"workers": decode_workers, "engine": pool},
            "kv_transfer": {"bandwidth_gb_s": 1.0, "bytes_per_token": 1_000_000}}


@pytest.mark.parametrize("coalesce", [True, False])
def test_a_failure_during_a_kv_transfer(tmp_path, coalesce):
    """A 64-token prompt: prefill 0-10, transfer of 64 MB at 1 GB/s 10-74 to decode
    worker 0, which fails at 50: the transfer fails with it, the source is released.
    The retry (backoff 100) at 150: prefill 150-160, transfer 160-224 to decode worker 1,
    activation at 224, first token at the end of its decode pass, 226; 3 tokens end at
    230."""
    data = {"cluster": disagg(2),
            "faults": [{"kind": "fail", "at_ms": 50.0, "pool": "decode", "worker": 0}],
            "retry": {"max_attempts": 2, "backoff_ms": 100.0}}
    res, df = run(tmp_path, [req("a", 0.0, 3)], data, coalesce)
    r = df.loc["a"]
    assert (r.terminal_status, r.attempts, r.retried_ms) == ("completed", 2, 150.0)
    assert r.prefill_admit_ms == 150.0 and r.source_held_ms == 160.0
    assert r.transfer_ms == 64.0 and r.destination_activated_ms == 224.0
    assert r.first_token_ms == 226.0 and r.terminal_time_ms == 230.0
    assert r.decode_worker_idx == 1
    # the first attempt's source was given back, the second's after its transfer
    assert r.source_released_ms == 224.0


@pytest.mark.parametrize("coalesce", [True, False])
def test_a_degraded_link_slows_the_transfer_in_flight(tmp_path, coalesce):
    """The same prompt's transfer needs 64 ms from 10; the links carry a quarter of
    their bandwidth from 30 to 50: 20 ms at full speed, 20 ms at a quarter (5 ms worth),
    then 39 ms: it ends at 89; first token at 91."""
    data = {"cluster": disagg(1),
            "faults": [{"kind": "link", "at_ms": 30.0, "duration_ms": 20.0,
                        "bandwidth_factor": 0.25}]}
    res, df = run(tmp_path, [req("a", 0.0, 3)], data, coalesce)
    r = df.loc["a"]
    assert r.transfer_ms == pytest.approx(79.0, abs=1e-9)
    assert r.destination_activated_ms == pytest.approx(89.0, abs=1e-9)
    assert r.first_token_ms == pytest.approx(91.0, abs=1e-9)


@pytest.mark.parametrize("coalesce", [True, False])
def test_a_straggler_takes_factor_times_as_long(tmp_path, coalesce):
    """factor 1.5 on worker 0 from 13 to 20: passes 0-10 and 10-12 as usual, 12-14 too
    (it started before the window), then 14-17, 17-20 slowed, 20-22 and 22-24 not: the
    6 tokens end at 24."""
    data = {"cluster": agg(1),
            "faults": [{"kind": "slow", "at_ms": 13.0, "duration_ms": 7.0, "worker": 0,
                        "factor": 1.5}]}
    res, df = run(tmp_path, [req("a", 0.0, 7)], data, coalesce)
    assert res.passes.end_ms.tolist() == [10.0, 12.0, 14.0, 17.0, 20.0, 22.0, 24.0]
    assert df.loc["a"].terminal_time_ms == 24.0


def test_the_timeline_shades_the_down_time(tmp_path):
    """Worker 0 of the mid-decode case is down from 15 to its repair at 115 and serves
    request b from 300: one shaded span per axis (gid ``down``), and its held KV level
    ends at 15 (a NaN breaks the line) instead of running on through the down time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simmodel.plots.timeline import timeline_figure

    data = {"cluster": agg(2),
            "faults": [{"kind": "fail", "at_ms": 15.0, "worker": 0, "repair_ms": 100.0}],
            "retry": {"max_attempts": 3, "backoff_ms": 200.0}}
    res, df = run(tmp_path, [req("a", 0.0, 10), req("b", 300.0, 3)], data, True)
    assert df.loc["b"].decode_worker_idx == 0
    fig = timeline_figure(res, worker=0)
    try:
        spans = [p for ax in fig.axes for p in ax.patches if p.get_gid() == "down"]
        assert len(spans) == 3
        box = spans[0].get_window_extent().transformed(fig.axes[0].transData.inverted())
        assert (box.x0, box.x1) == pytest.approx((15.0, 115.0))
        line = next(ln for ln in fig.axes[1].get_lines() if ln.get_gid() == "kv_blocks_active")
        x, y = list(line.get_xdata()), line.get_ydata()
        assert 15.0 in x and math.isnan(y[x.index(15.0)])
    finally:
        plt.close(fig)


def test_a_planner_replaces_a_failed_worker(tmp_path):
    """Two workers and a schedule planner holding the pool at 2.  Worker 0 fails at 50
    (back at 1000).  The tick at 100 counts one live worker and starts worker 2 (ready
    at 100 + 300 ms start-up); once worker 0 is back, the tick at 2000 finds 3 and
    drains the highest id, worker 2, which leaves at once (idle)."""
    data = {"cluster": agg(2, startup_time=0.3),
            "planner": {"kind": "schedule", "steps": [{"at_ms": 100.0, "decode": 2},
                                                      {"at_ms": 2000.0, "decode": 2}]},
            "faults": [{"kind": "fail", "at_ms": 50.0, "worker": 0, "repair_ms": 950.0}]}
    rows = [req("a", 0.0, 3), req("b", 3000.0, 3)]
    res, df = run(tmp_path, rows, data, True)
    life = res.lifecycle
    got = list(zip(life.at_ms, life.worker, life.transition))
    assert got == [(50.0, 0, "worker_failed"), (100.0, 2, "worker_starting"),
                   (400.0, 2, "worker_ready"), (1000.0, 0, "worker_repaired"),
                   (2000.0, 2, "worker_draining"),
                   (2000.0, 2, "worker_removed")]
    assert (df.terminal_status == "completed").all()


def test_random_faults_differ_between_replications_of_a_sweep(tmp_path):
    """A sweep point with random failures, 3 replications (seeds 0, 1, 2): each seed
    draws its own failure times (stream ``faults``), so the runs differ and the point's
    summary carries a confidence interval over them."""
    import yaml

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({
        "workload": {"synthetic": {"requests": 60, "input_tokens": 200, "output_tokens": 40,
                                   "request_rate": 40.0}},
        "cluster": {"workers": 3, "engine": {"block_size": 16, "timing_model": FIXED}},
        "faults": [{"kind": "random", "mtbf_s": 0.3, "mttr_s": 0.1}]}))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({"base": "base.yaml", "replications": 3,
                                    "grid": {"cluster.workers": [3]}}))
    res = simmodel.sweep(str(spec), jobs=1)
    runs = res.points
    assert len(runs) == 3 and runs["worker_failures"].nunique() > 1
    row = res.summary.iloc[0]
    assert row["worker_failures_ci95_low"] < row["worker_failures_mean"] \
        < row["worker_failures_ci95_high"]


def test_a_pool_empty_for_good_stops_random_faults_and_the_run_ends(tmp_path):
    """The only prefill worker fails at 0 for good, while the decode worker fails and is
    repaired at random forever: nothing can be served any more, so the random faults stop
    (else their events would run on without end), the run ends, and the request that
    waited for a prefill worker ends ``failed`` at the run's last instant.  (Found by
    benchmarks/fault_cases.py: before, this run never ended.)"""
    data = {"cluster": disagg(1),
            "faults": [{"kind": "random", "mtbf_s": 0.05, "mttr_s": 0.1, "pool": "decode"},
                       {"kind": "fail", "at_ms": 0.0, "count": 1, "pool": "prefill"}]}
    res, df = run(tmp_path, [req("a", 0.0, 2)], data, True)
    assert df.loc["a"].terminal_status == "failed"
    assert res.summary["worker_failures"] >= 1


def test_workers_a_planner_adds_fail_at_random_too(tmp_path):
    """One worker, and a schedule planner adding a second at 10 ms; random failures
    (mean 50 ms between them, 10 ms to repair) over about two seconds of requests: the
    added worker (id 1) fails and is repaired as well, and every request still ends once."""
    data = {"cluster": agg(1),
            "planner": {"kind": "schedule", "steps": [{"at_ms": 10.0, "decode": 2}]},
            "faults": [{"kind": "random", "mtbf_s": 0.05, "mttr_s": 0.01}],
            "retry": {"max_attempts": 5, "backoff_ms": 1.0}}
    rows = [req(f"r{i}", 100.0 * i, 5) for i in range(20)]
    res, df = run(tmp_path, rows, data, True)
    life = res.lifecycle
    added = life[(life.worker == 1) & (life.transition == "worker_failed")]
    assert len(added) >= 1
    assert len(df) == 20 and df.terminal_status.isin(["completed", "failed"]).all()
