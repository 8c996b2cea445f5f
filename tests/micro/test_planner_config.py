"""Planners from YAML (``planner: {kind: schedule | load | python}``) and the built-in
load-based policy's decisions on hand-built snapshots."""
from __future__ import annotations

import math
import textwrap

import pytest

import simmodel
from simmodel.cli import main
from simmodel.cluster.policies import LoadPolicy, SchedulePolicy
from simmodel.config import PlannerConfig
from simmodel.errors import UserError

HEAD = """\
workload:
  synthetic: {requests: 60, input_tokens: 1000, output_tokens: 50, arrival_interval_ms: 100.0}
cluster:
  workers: 1
  engine: {startup_time: 0.5, timing_model: {type: fixed, prefill_ms: 10.0, decode_ms: 1.0}}
"""


def write(tmp_path, planner: str, name="s.yaml"):
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(planner))
    return path


def transitions(res):
    return [(r.at_ms, int(r.worker), r.transition) for r in res.lifecycle.itertuples()]


def test_schedule_planner_scales_at_its_step_times(tmp_path):
    sc = simmodel.load_scenario(write(tmp_path, """\
        planner:
          kind: schedule
          steps: [{at_ms: 1000, decode: 3}, {at_ms: 3000, decode: 1}]
        """))
    res = simmodel.run(sc)
    t = transitions(res)
    assert t[:4] == [(1000.0, 1, "worker_starting"), (1000.0, 2, "worker_starting"),
                     (1500.0, 1, "worker_ready"), (1500.0, 2, "worker_ready")]
    assert [x[1:] for x in t[4:6]] == [(2, "worker_draining"), (1, "worker_draining")]
    assert {x[0] for x in t[4:6]} == {3000.0}
    # provisioned seconds: worker 0 for the whole run, 1 and 2 from 1000 ms to their removal
    end = res.summary["duration_ms"]
    removed = {w: at for at, w, tr in t if tr == "worker_removed"}
    expected = (end + (removed[1] - 1000.0) + (removed[2] - 1000.0)) / 1000.0
    assert res.summary["decode_worker_seconds"] == pytest.approx(expected, rel=1e-12)


def test_schedule_policy_unit():
    pol = SchedulePolicy([(1000.0, None, 3), (2000.0, 2, None)])
    assert pol.initial_tick_ms() == 1000.0
    assert pol.on_tick({"now_ms": 1000.0}) == {"target_prefill": None, "target_decode": 3,
                                               "next_tick_ms": 2000.0}
    assert pol.on_tick({"now_ms": 2000.0}) == {"target_prefill": 2, "target_decode": None,
                                               "next_tick_ms": None}
    assert math.isinf(SchedulePolicy([]).initial_tick_ms())


def test_python_policy_from_the_scenario_folder(tmp_path):
    (tmp_path / "my_policy.py").write_text(textwrap.dedent("""\
        class Up:
            def initial_tick_ms(self):
                return 1000.0
            def on_tick(self, snap):
                return {"target_prefill": None, "target_decode": 2, "next_tick_ms": None}
        def make():
            return Up()
        ready = Up()
        """))
    for attr in ("make", "ready", "Up"):     # factory function, object, class (a factory)
        sc = simmodel.load_scenario(write(tmp_path, f"""\
            planner: {{kind: python, policy: "my_policy:{attr}"}}
            """))
        res = simmodel.run(sc)
        assert transitions(res)[:2] == [(1000.0, 1, "worker_starting"),
                                        (1500.0, 1, "worker_ready")]


@pytest.mark.parametrize("planner,message", [
    ('{kind: python, policy: "my_policy"}',
     "planner.policy: must be 'file.py:attribute' or 'module:attribute'"),
    ('{kind: python, policy: "nope.py:make"}', "planner.policy: 'nope.py:make': no file nope.py"),
    ("{kind: magic}", "planner.kind: must be one of schedule, load, python"),
    ("{kind: schedule}", "planner.steps: a schedule planner needs at least one step"),
    ("{kind: schedule, steps: [{at_ms: 5, decode: 1}, {at_ms: 2, decode: 2}]}",
     "planner.steps: at_ms must be strictly increasing"),
    ("{kind: schedule, steps: [{at_ms: 5}]}", "planner.steps[0].decode: a step needs"),
    ("{kind: load, min_decode: 4, max_decode: 2}", "planner.min_decode: must not exceed"),
    ("{kind: load, kv_usage_high: 1.5}", "planner.kv_usage_high: must be a fraction"),
    ("{kind: load, interval_ms: 0}", "planner.interval_ms: must be a positive number"),
    ("{kind: load, interval_ms: 1.0e-6}", "planner.interval_ms: must be at least 1 ms"),
    ("{kind: schedule, steps: [{at_ms: 5, decode: 1}, {at_ms: 5.5, decode: 2}]}",
     "planner.steps: at_ms must be at least 1 ms apart"),
])
def test_bad_planner_is_one_line_exit_2(tmp_path, capsys, planner, message):
    (tmp_path / "my_policy.py").write_text("x = 1\n")
    path = write(tmp_path, f"planner: {planner}\n")
    with pytest.raises(UserError) as e:
        simmodel.load_scenario(path)
    assert str(e.value).startswith(f"{path}: {message}")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# -- the load-based policy ------------------------------------------------------------------

def fpm(worker, *, decode_kv=0, prefill_kv=0, prefill_new=0, queued=0, queued_n=0):
    return {"worker_id": worker, "dp_rank": 0, "wall_time": 0.01,
            "num_prefill_requests": 0, "sum_prefill_tokens": prefill_new,
            "var_prefill_length": 0.0, "sum_prefill_kv_tokens": prefill_kv,
            "num_decode_requests": 1, "sum_decode_kv_tokens": decode_kv,
            "var_decode_kv_tokens": 0.0, "num_queued_prefill": queued_n,
            "sum_queued_prefill_tokens": queued, "var_queued_prefill_length": 0.0,
            "num_queued_decode": 0, "sum_queued_decode_kv_tokens": 0,
            "var_queued_decode_kv_tokens": 0.0}


def snap(now, fpms, count, *, ttft=None, itl=None, prefill_fpms=(), prefill_count=0):
    return {"now_ms": now, "decode_fpm_snapshots": list(fpms),
            "prefill_fpm_snapshots": list(prefill_fpms),
            "non_draining_decode_count": count, "non_draining_prefill_count": prefill_count,
            "traffic": {"avg_ttft_ms": ttft or 0.0, "ttft_count": int(ttft is not None),
                        "avg_itl_ms": itl or 0.0, "itl_count": int(itl is not None)}}


def load_policy(disagg=False, **cfg):
    cfg = PlannerConfig(kind="load", **cfg)
    return LoadPolicy(cfg, disaggregated=disagg, decode_kv_tokens=1000, prefill_kv_tokens=1000,
                      prefill_budget=100, ttft_ms=None, itl_ms=None)


def test_load_policy_scales_up_on_kv_usage_and_respects_bounds_and_cooldown():
    pol = load_policy(max_decode=3, cooldown_ms=1500.0)
    hot = [fpm(0, decode_kv=900), fpm(1, decode_kv=850)]      # usage 0.875 > 0.8
    d = pol.on_tick(snap(1000.0, hot, 2))
    assert d["target_decode"] == 3 and d["next_tick_ms"] == 2000.0
    assert pol.on_tick(snap(2000.0, hot, 3))["target_decode"] is None   # cooldown
    assert pol.on_tick(snap(3000.0, hot, 3))["target_decode"] is None   # at max_decode


def test_load_policy_scales_down_when_idle_and_up_on_queue_or_latency():
    pol = load_policy(min_decode=1, ttft_ms=200.0, itl_ms=20.0)
    cold = [fpm(0, decode_kv=100), fpm(1, decode_kv=50)]       # usage 0.075 < 0.3
    assert pol.on_tick(snap(1000.0, cold, 2, ttft=50.0, itl=5.0))["target_decode"] == 1
    pol = load_policy(ttft_ms=200.0)
    assert pol.on_tick(snap(1000.0, cold, 2, ttft=250.0))["target_decode"] == 3   # TTFT
    pol = load_policy()
    queued = [fpm(0, decode_kv=100, queued=250, queued_n=2)]    # > 2 x budget of 100
    assert pol.on_tick(snap(1000.0, queued, 1))["target_decode"] == 2
    pol = load_policy(itl_ms=20.0)
    assert pol.on_tick(snap(1000.0, cold, 2, itl=30.0))["target_decode"] == 3     # ITL


def test_load_policy_disaggregated_scales_each_pool():
    pol = load_policy(disagg=True, max_prefill=4)
    d = pol.on_tick(snap(1000.0, [fpm(0, decode_kv=900)], 1,
                         prefill_fpms=[fpm(0, queued=500, queued_n=3)], prefill_count=1))
    assert (d["target_prefill"], d["target_decode"]) == (2, 2)


def test_load_planner_runs_from_yaml_and_keeps_every_request(tmp_path):
    sc = simmodel.load_scenario(write(tmp_path, """\
        planner: {kind: load, interval_ms: 200, max_decode: 4, queued_prefill_tokens: 1500}
        """))
    res = simmodel.run(sc)
    assert (res.requests.terminal_status == "completed").all()
    assert res.lifecycle is not None


@pytest.mark.parametrize("planner,message", [
    # found and imported only when the run starts (loading a scenario runs no code)
    ('{kind: python, policy: "my_policy:nope"}',
     "planner.policy: 'my_policy' has no attribute 'nope'"),
    ('{kind: python, policy: "no_such_module_xyz:make"}',
     "planner.policy: 'no_such_module_xyz:make': no file no_such_module_xyz.py in"),
])
def test_bad_policy_found_at_run_start_is_one_line_exit_2(tmp_path, capsys, planner, message):
    (tmp_path / "my_policy.py").write_text("x = 1\n")
    path = write(tmp_path, f"planner: {planner}\n")
    sc = simmodel.load_scenario(path)
    with pytest.raises(UserError) as e:
        simmodel.run(sc)
    assert str(e.value).startswith(f"{path}: {message}")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and message in err
    assert not (tmp_path / "out").exists()
