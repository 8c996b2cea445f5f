"""Smoke tier: every shipped sweep/search file in scenarios/sweeps/ loads and validates.

``load_spec`` builds and validates every point's scenario (and, for a search, both ends
of the range) without running anything, so this is fast; the full-trace sweeps
themselves are run by hand (scenarios/sweeps/README.md).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from simmodel import load_scenario
from simmodel.capacity import load_spec

SWEEPS = Path(__file__).resolve().parents[2] / "scenarios" / "sweeps"
BASE = (SWEEPS.parent / "mooncake_conversation.yaml").resolve()

#: file -> (kind, number of points: sweep configurations, or one per searched grid point).
EXPECTED = {
    "mooncake_layouts.yaml": ("sweep", 18),
    "mooncake_capacity.yaml": ("search", 2),
    "mooncake_load.yaml": ("search", 1),
    "mooncake_headroom.yaml": ("search", 2),
}

PATHS = sorted(SWEEPS.glob("*.yaml"))


def test_every_shipped_sweep_is_listed():
    assert {p.name for p in PATHS} == set(EXPECTED)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_shipped_sweep_loads(path):
    kind, count = EXPECTED[path.name]
    spec = load_spec(path)
    assert spec.kind == kind
    assert len(spec.points) == count
    assert load_spec(path, kind=kind).kind == kind      # also as its own subcommand reads it
    assert Path(spec.base) == BASE
    assert path.read_text(encoding="utf-8").startswith("#"), "start with what it answers"
    assert f"simmodel {kind} scenarios/sweeps/{path.name}" in path.read_text(encoding="utf-8")


def test_layouts_cover_agg_and_disagg_at_most_8_gpus():
    from simmodel.capacity.runner import gpus

    base = load_scenario(BASE)
    spec = load_spec(SWEEPS / "mooncake_layouts.yaml")
    assert spec.sla == {"ttft_ms": 2000, "itl_ms": 50, "e2e_ms": None}
    layouts = {p.label for p in spec.points}
    assert "agg" in layouts and len(layouts) > 2
    assert {p.scenario.cluster.router.mode for p in spec.points} == {"round_robin", "kv"}
    for p in spec.points:
        assert p.scenario.cluster.disaggregated == (p.label != "agg")
        assert gpus(p.scenario) <= 8
        if p.label != "agg":
            prefill, decode = p.scenario.cluster.prefill, p.scenario.cluster.decode
            assert p.label == f"{prefill.workers}p{decode.workers}d"
            assert prefill.engine == decode.engine == base.cluster.engine
            assert p.scenario.cluster.kv_transfer.bandwidth_gb_s == 25.0


def test_searches_vary_what_they_say():
    cap = load_spec(SWEEPS / "mooncake_capacity.yaml").search
    assert (cap.vary, cap.lo, cap.hi, cap.goal) == ("cluster.workers", 1, 32, "min")
    assert cap.target == {"p99_ttft_ms": {"max": 2000.0}}
    load = load_spec(SWEEPS / "mooncake_load.yaml")
    assert (load.search.vary, load.search.goal) == ("workload.arrival_speedup_ratio", "max")
    (point,) = load.points
    assert point.scenario.cluster.workers == 8
    assert point.scenario.cluster.router.mode == "kv"
