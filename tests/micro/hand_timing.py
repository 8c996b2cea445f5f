"""Hand-calculation helpers shared by micro tests on 16-token blocks: the polynomial pass
costs on the reference's nanosecond grid (``P``, ``D``), trace rows of whole blocks, and
the comparison tolerance.  (Imported by the test modules next to it.)"""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.engine.timing import decode_poly_ms, duration_ns, prefill_poly_ms
from simmodel.scenario import scenario_from_dict

EXACT = 1e-9                   # ms; far below the 1e-6 ms grid, above float noise
BS = 16


def P(t: int) -> float:
    """Prefill part of a pass with ``t`` new tokens, ms on the ns grid."""
    return duration_ns(prefill_poly_ms(t)) / 1e6 if t > 0 else 0.0


def D(active: int, cap: int) -> float:
    """Decode part of a pass with ``active`` tokens in its decoders, ms on the ns grid."""
    return duration_ns(decode_poly_ms(active, cap)) / 1e6


def row(ts, hash_ids, out) -> dict:
    return {"timestamp": ts, "hash_ids": list(hash_ids), "output_length": out,
            "input_length": BS * len(hash_ids)}


def approx(x):
    return pytest.approx(x, abs=EXACT)


def run_one_worker(tmp_path, rows, engine: dict, coalesce: bool):
    """The Result of ``rows`` (trace rows of 16-token blocks) on one worker with block
    size 16 and the ``engine`` keys, decode runs coalesced or stepped pass by pass."""
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = {
        "workload": {"trace": str(path), "trace_block_size": BS},
        "cluster": {"workers": 1, "engine": {"block_size": BS, **engine}},
        "run": {"coalesce_decode": coalesce},
    }
    return simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="micro"))
