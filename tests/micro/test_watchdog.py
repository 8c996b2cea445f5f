"""The run loop's watchdog (simmodel.run_loop.Watchdog): a spinning run stops with one line.

A test-only SimPy process spins (zero-delay timeouts forever, or timeouts of 1e-9 ms); the
watchdog must stop the run with a ``UserError`` naming the cause and the process, in
``run_until`` (with and without a cut-off), in ``run_with_progress`` and from the CLI
(exit 2).  Legitimate runs whose simulated time stands still (zero-duration passes) or
crawls must not trip it.
"""
from __future__ import annotations

import pytest

import simmodel
from simmodel import finish, run_loop, sim
from simmodel.cli import main
from simmodel.errors import UserError
from simmodel.rng import Streams

SCENARIO = """name: wd
workload: {synthetic: {requests: 20, input_tokens: 300, output_tokens: 30, arrival_interval_ms: 5}}
cluster: {workers: 2}
"""


def spin(env):
    while True:
        yield env.timeout(0)


def creep(env):
    while True:
        yield env.timeout(1e-9)


@pytest.fixture
def scenario(tmp_path):
    p = tmp_path / "wd.yaml"
    p.write_text(SCENARIO)
    return simmodel.load_scenario(str(p)), str(p)


@pytest.mark.parametrize("proc, cause", [(spin, "stood still"), (creep, "advanced only")])
@pytest.mark.parametrize("until", [None, 1e9])
def test_spinning_process_is_stopped(scenario, proc, cause, until):
    cl = sim.build(scenario[0], Streams(0))
    cl.env.process(proc(cl.env))
    with pytest.raises(UserError) as e:
        sim.run_until(cl.env, until, sim.Watchdog(cl.env, cl, window=20_000))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("watchdog: 20,000 events")
    assert cause in msg and f"process {proc.__name__!r}" in msg


def test_spin_after_the_workload_is_stopped_with_progress_loop(scenario):
    """The workload completes, then only the spinner is left: run_with_progress (the
    stop_when / progress path) stops too."""
    cl = sim.build(scenario[0], Streams(0))

    def late_spin(env):
        yield env.timeout(10_000.0)
        yield from spin(env)
    cl.env.process(late_spin(cl.env))
    with pytest.raises(UserError, match="stood still at 10000 ms"):
        sim.run_with_progress(cl, None, None, watchdog=sim.Watchdog(cl.env, cl, window=20_000))
    assert cl.driver.ended == 20               # the workload itself finished


def test_cli_exit_2(scenario, monkeypatch, capsys):
    real_build = sim.build

    def build_with_spinner(*args, **kwargs):
        cl = real_build(*args, **kwargs)
        cl.env.process(spin(cl.env))
        return cl
    monkeypatch.setattr(sim, "build", build_with_spinner)
    monkeypatch.setattr(run_loop, "WATCHDOG_EVENTS", 10_000)
    assert main(["run", scenario[1]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "watchdog:" in err[0] and "'spin'" in err[0]


def test_zero_duration_passes_are_progress(tmp_path, monkeypatch):
    """Fixed timing of 0 ms: every pass ends at t=0, simulated time never moves, but
    passes complete and requests end, so even a small window does not fire."""
    p = tmp_path / "zero.yaml"
    p.write_text("workload: {synthetic: {requests: 300, input_tokens: 500, output_tokens: 50, "
                 "arrival_interval_ms: 0}}\n"
                 "cluster: {workers: 1, engine: {timing_model: {type: fixed, prefill_ms: 0, "
                 "decode_ms: 0}, max_num_seqs: 4}}\n")
    # a window of 50 + 10 per request and worker: just over the start-up burst (one
    # process start per session at t=0, before any request is released)
    monkeypatch.setattr(run_loop, "WATCHDOG_EVENTS", 50)
    res = simmodel.run(simmodel.load_scenario(str(p)))
    assert res.summary["completed_requests"] == 300
    assert res.summary["duration_ms"] == 0.0


def test_same_results_with_any_window(scenario):
    """Checking between windows does not change the run (the cut-off included)."""
    sc = scenario[0]
    frames = []
    for window in (500, 10_000_000):
        for until in (None, 60.0):
            cl = sim.build(sc, Streams(0))
            sim.run_until(cl.env, until, sim.Watchdog(cl.env, cl, window=window))
            frames.append((until, finish.collect(sc, cl, 0.0).requests, cl.env.now))
    a, b, c, d = frames
    assert a[1].equals(c[1]) and a[2] == c[2]
    assert b[1].equals(d[1]) and b[2] == d[2] == 60.0
