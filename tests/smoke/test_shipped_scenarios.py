"""Smoke tier: every shipped scenario loads and runs (its first simulated minute, so the
suite stays fast), and the tables it promises are there."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import simmodel

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenario_runs(path):
    sc = simmodel.load_scenario(path)
    cut = dataclasses.replace(sc.run, max_sim_time_ms=60_000.0)
    res = simmodel.run(dataclasses.replace(sc, run=cut))
    assert res.summary["completed_requests"] > 0
    done = res.requests[res.requests.terminal_status == "completed"]
    assert (done.ttft_ms <= done.e2e_latency_ms + 1e-9).all()
    # the lifecycle table: scaling runs, and runs with faults (docs/faults.md)
    assert (res.lifecycle is not None) == (sc.planner is not None or bool(sc.faults))
    assert (res.telemetry is not None) == (sc.telemetry is not None)


def test_there_are_shipped_scenarios():
    assert {"tiny", "mooncake_conversation", "autoscale_mooncake"} <= {p.stem for p in SCENARIOS}
