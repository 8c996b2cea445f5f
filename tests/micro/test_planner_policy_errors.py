"""A user's scaling policy that fails or returns nonsense, and the minimum tick interval:
one line naming the policy, the tick and its time; exit status 2; no result folder."""
from __future__ import annotations


import pytest

import simmodel
from simmodel.cli import main
from simmodel.config import ConfigError, PlannerConfig, TelemetryConfig
from simmodel.errors import UserError

SCENARIO = """\
workload:
  synthetic: {requests: 4, input_tokens: 200, output_tokens: 5, arrival_interval_ms: 100.0}
cluster:
  engine: {timing_model: {type: fixed, prefill_ms: 10.0, decode_ms: 1.0}}
planner: {kind: python, policy: "pol.py:make"}
"""

POLICY = """\
import math

class P:
    def initial_tick_ms(self):
        return {initial}

    def on_tick(self, snap):
        now = snap["now_ms"]
        return {body}

def make():
    return P()
"""


def write(tmp_path, body, initial="50.0"):
    (tmp_path / "pol.py").write_text(POLICY.format(initial=initial, body=body))
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


def run_cli(tmp_path, capsys, path):
    out = tmp_path / "out"
    code = main(["run", str(path), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    return code, err, out


def tick(value):
    return '{"target_prefill": None, "target_decode": %s, "next_tick_ms": now + 100.0}' % value


@pytest.mark.parametrize("body,message", [
    ("1 / 0", "on_tick() raised ZeroDivisionError: division by zero"),
    (tick("'lots'"), "target_decode is 'lots' (str); expected a whole number of workers"),
    ("[2, None]", "on_tick() returned [2, None] (list); expected a dict"),
    ("None", "on_tick() returned None (NoneType); expected a dict"),
    (tick("math.nan"), "target_decode is nan (float); expected a whole number"),
    (tick("math.inf"), "target_decode is inf (float); expected a whole number"),
    (tick("2.5"), "target_decode is 2.5 (float); expected a whole number"),
    (tick("True"), "target_decode is True (bool)"),
    (tick("-1"), "target_decode is -1; a worker count cannot be negative"),
    (tick("10**9"), "target_decode is 1,000,000,000; more than the limit of 100,000 workers "
                    "per pool"),
    ('{"target_prefill": -2, "target_decode": None, "next_tick_ms": None}',
     "target_prefill is -2; a worker count cannot be negative"),
    ('{"target_decode": 1, "next_tick_ms": "soon"}',
     "next_tick_ms is 'soon' (str); expected a number of ms"),
    ('{"target_decode": 1, "next_tick_ms": math.nan}', "next_tick_ms is nan (float)"),
    ('{"target_decode": 1, "next_tick_ms": now + 0.5}',
     "next_tick_ms=50.5 is only 0.5 ms after now; ticks must be at least 1 ms apart"),
])
def test_bad_on_tick_is_one_line_exit_2(tmp_path, capsys, body, message):
    code, err, out = run_cli(tmp_path, capsys, write(tmp_path, body))
    assert code == 2
    assert err == f"simmodel: error: planner policy pol.py:make: tick 0 at 50 ms: {message}" \
        + err[err.index(message) + len(message):]
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("initial,message", [
    ("1 / 0", "initial_tick_ms() raised ZeroDivisionError"),
    ("'soon'", "initial_tick_ms() is 'soon' (str); expected a number of ms"),
    ("math.nan", "initial_tick_ms() is nan (float)"),
    ("-5.0", "initial_tick_ms() returned -5.0; the first tick must be at 0 ms or later"),
])
def test_bad_initial_tick_is_one_line_exit_2(tmp_path, capsys, initial, message):
    code, err, out = run_cli(tmp_path, capsys, write(tmp_path, tick(1), initial=initial))
    assert code == 2 and err.startswith(f"simmodel: error: planner policy pol.py:make: "
                                        f"at start: {message}")
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists()


def test_the_failing_tick_is_named(tmp_path):
    # Ticks at 50, 150, 250: the third one fails.
    path = write(tmp_path, '1 / 0 if snap["tick_ordinal"] == 2 else ' + tick(1))
    with pytest.raises(UserError, match=r"^planner policy pol.py:make: tick 2 at 250 ms: "
                                        r"on_tick\(\) raised ZeroDivisionError"):
        simmodel.run(simmodel.load_scenario(path))


class Broken:
    def initial_tick_ms(self):
        return 50.0

    def on_tick(self, snap):
        raise RuntimeError("no\nnewlines")


def test_policy_object_from_python_is_named_by_its_class(tmp_path):
    sc = simmodel.load_scenario(write(tmp_path, tick(1)))
    with pytest.raises(UserError) as e:
        simmodel.run(sc, scaling_policy=Broken())
    assert str(e.value) == ("planner policy test_planner_policy_errors:Broken: tick 0 at "
                            "50 ms: on_tick() raised RuntimeError: no newlines")


@pytest.mark.parametrize("value", ["2.0", "np.int64(2)", "np.float64(2.0)"])
def test_whole_numbers_of_any_type_are_targets(tmp_path, value):
    (tmp_path / "pol.py").write_text("import numpy as np\n" + POLICY.format(
        initial="np.float64(50.0)", body='{"target_decode": %s, "next_tick_ms": None}' % value))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = simmodel.run(simmodel.load_scenario(tmp_path / "s.yaml"))
    assert res.lifecycle.worker.tolist() == [1]


def test_ticks_one_ms_apart_are_fine_and_not_later_than_now_ends_them(tmp_path):
    calls = []

    class Rec:
        def initial_tick_ms(self):
            return 0.3

        def on_tick(self, snap):
            calls.append(snap["now_ms"])
            now = snap["now_ms"]
            return {"next_tick_ms": now + 1.0 if len(calls) < 4 else now}
    simmodel.run(simmodel.load_scenario(write(tmp_path, tick(1))), scaling_policy=Rec())
    assert calls == pytest.approx([0.3, 1.3, 2.3, 3.3])


# -- the minimum interval of the built-in planners and of telemetry ----------------------
@pytest.mark.parametrize("section,message", [
    ("planner: {kind: load, interval_ms: 1.0e-6}",
     "planner.interval_ms: must be at least 1 ms (the minimum interval), got 1e-06"),
    ("telemetry: {interval_ms: 1.0e-6}",
     "telemetry.interval_ms: must be at least 1 ms (the minimum interval), got 1e-06"),
    ("telemetry: {interval_ms: 0.5}", "telemetry.interval_ms: must be at least 1 ms"),
])
def test_intervals_below_one_ms_are_refused(tmp_path, capsys, section, message):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace('planner: {kind: python, policy: "pol.py:make"}\n', "")
                    + section + "\n")
    with pytest.raises(UserError, match="^" + str(path) + ": " + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        simmodel.load_scenario(path)
    code, err, out = run_cli(tmp_path, capsys, path)
    assert code == 2 and err.count("\n") == 1 and not out.exists()


def test_interval_minimum_in_the_configs():
    assert PlannerConfig.MIN_INTERVAL_MS == 1.0
    PlannerConfig(kind="load", interval_ms=1.0)
    TelemetryConfig(interval_ms=1.0)
    for make in (lambda: PlannerConfig(kind="load", interval_ms=0.999),
                 lambda: TelemetryConfig(interval_ms=1e-6)):
        with pytest.raises(ConfigError, match="interval_ms: must be at least 1 ms"):
            make()
