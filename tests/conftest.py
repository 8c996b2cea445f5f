"""Shared fixtures, and the test tiers.

The tiers are folders; every test in one carries the marker of its name (declared in
setup.cfg), so ``pytest -m unit`` equals ``pytest tests/unit``:

* ``unit`` -- pure code (engine, readers, config, metrics, comparisons); no simulation
  run.  ``pytest tests/unit`` takes well under 15 s.
* ``micro`` -- micro-scenarios whose times are computed by hand from the formulas.
* ``invariants`` -- hypothesis properties over generated workloads: nothing lost,
  TTFT <= E2E, KV within bounds, coalescing changes nothing.
* ``golden`` -- frozen small outputs; each test states where its file came from.
* ``smoke`` -- every shipped scenario, sweep and notebook runs; the CLI and the plots.
"""
from __future__ import annotations

import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
TIERS = ("unit", "micro", "invariants", "golden", "smoke")


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = pathlib.Path(str(item.path)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture
def repo() -> pathlib.Path:
    """The repository's root folder (scenarios/, benchmarks/, docs/ are below it)."""
    return REPO


@pytest.fixture
def write_trace(tmp_path):
    """``write_trace(rows, name="t.jsonl")``: a Mooncake JSONL trace of ``rows`` (dicts)
    in the test's folder; returns its path."""
    def write(rows, name: str = "t.jsonl") -> pathlib.Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    return write
