"""Write ``irregular.npz``: a made-up profile in the reference's NPZ layout for the
``table_timing_*`` fidelity cases (not a measurement).

It is shaped to exercise every rule of the reference's ``dynamo_profile`` provider:
non-uniform axes; a prefill curve whose first segment extends below 0 ms for tiny batches
(floor at 0 ms) and whose last point (6000 tokens) is below the 8192-token budget (linear
extrapolation above it); a decode grid that is not bilinear inside its cells, starts below
1 ms (floor at 1 ms) and stops at a mean context of 3000 tokens and 300,000 Σ context
tokens (extrapolation past both edges).

    python benchmarks/tables/make_irregular_npz.py      # rewrites irregular.npz here
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "irregular.npz"


def build() -> dict[str, np.ndarray]:
    prefill_isl = np.array([64.0, 300.0, 1000.0, 2500.0, 4000.0, 6000.0])
    prefill_ttft_ms = np.array([1.0, 12.0, 25.5, 61.25, 101.0, 170.3])
    kv = np.array([0.0, 4000.0, 20000.0, 60000.0, 150000.0, 300000.0])
    ctx = np.array([0.0, 500.0, 1300.0, 3000.0])
    # smooth trend + a fixed wiggle, so the grid is not bilinear within a cell
    xx, yy = np.meshgrid(kv, ctx, indexing="ij")
    wiggle = np.array([[0.0, 0.3, -0.2, 0.1, -0.4, 0.2][i] * [1.0, -1.0, 0.5, 2.0][j]
                       for i in range(len(kv)) for j in range(len(ctx))]).reshape(xx.shape)
    itl = 0.55 + 2.1e-4 * xx * (1.0 + yy / 4000.0) + 8e-4 * yy + wiggle
    itl[0, :] = [0.55, 0.62, 0.9, 1.7]        # short, nearly empty batches: under 1 ms
    return {"prefill_isl": prefill_isl, "prefill_ttft_ms": prefill_ttft_ms,
            "decode_active_kv_tokens": kv, "decode_context_length": ctx,
            "decode_itl": itl}


if __name__ == "__main__":
    np.savez(OUT, **build())
    print(f"wrote {OUT}")
