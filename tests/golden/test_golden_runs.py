"""Golden tier: per-request results of four fidelity cases, frozen.

Origin of ``data/*.csv``: written by simmodel at commit d8a7bae (2026-12-02) from
``benchmarks/scenarios/<name>.yaml``, in the same session in which
``python benchmarks/vs_dynamo.py`` found those four runs in agreement with the reference
(ai-dynamo-runtime 1.6.1) request by request: worst TTFT / E2E relative error 0 / 0
(prefix_handwritten, disagg_1p1d_busy), 1.1e-12 / 1.6e-13 (sglang_mooncake300),
7.5e-10 / 4.6e-10 (trtllm_prefix_handwritten), no status, token, reuse or worker
mismatch.  Floats were written with 17 significant digits.  A failure here means a
change altered results: if the change is meant to, re-check the case with vs_dynamo.py
before refreezing (and update this docstring).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simmodel

DATA = Path(__file__).resolve().parent / "data"
CASES = ("prefix_handwritten", "disagg_1p1d_busy", "sglang_mooncake300",
         "trtllm_prefix_handwritten")
FLOATS = ("arrival_time_ms", "ttft_ms", "e2e_latency_ms")


@pytest.mark.parametrize("name", CASES)
def test_a_fidelity_case_gives_its_frozen_requests(repo, name):
    frozen = pd.read_csv(DATA / f"{name}.csv")
    res = simmodel.run(simmodel.load_scenario(str(repo / "benchmarks" / "scenarios"
                                                   / f"{name}.yaml")))
    got = res.requests[list(frozen.columns)].reset_index(drop=True)
    assert len(got) == len(frozen)
    for col in frozen.columns:
        if col in FLOATS:
            np.testing.assert_allclose(got[col].to_numpy(float), frozen[col].to_numpy(float),
                                       rtol=1e-12, atol=0, err_msg=col)
        else:
            assert got[col].astype(str).tolist() == frozen[col].astype(str).tolist(), col
