"""Hand-calculation helpers shared by micro tests on 16-token blocks: the polynomial pass
costs on the reference's nanosecond grid (``P``, ``D``), trace rows of whole blocks, and
the comparison tolerance.  (Imported by the test modules next to it.)"""
from __future__ import annotations

import pytest

from simmodel.engine.timing import decode_poly_ms, duration_ns, prefill_poly_ms

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
