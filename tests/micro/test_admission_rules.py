"""vLLM admission details found by comparing with the reference (see docs/model.md)."""
from __future__ import annotations

import json

import simmodel
from simmodel.config import ClusterConfig, EngineConfig, Scenario, TimingConfig, WorkloadConfig


def test_a_head_to_reject_goes_even_when_the_budget_is_spent(tmp_path):
    # (vLLM admission, found with the TRT-LLM work) A's 400-token prompt takes the whole
    # 100-token budget of every pass; B (600 tokens >= max_model_len 500) is rejected in
    # the first pass anyway, visible at its end (fixed timing: 10 ms), not after A's prefill.
    rows = [{"timestamp": 0, "input_length": 400, "output_length": 2, "hash_ids": [1]},
            {"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [2, 3]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    eng = EngineConfig(max_num_batched_tokens=100, max_model_len=500,
                       timing_model=TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0))
    sc = Scenario(workload=WorkloadConfig(trace=str(path), format="mooncake"),
                  cluster=ClusterConfig(workers=1, engine=eng))
    a, b = simmodel.run(sc).requests.sort_values("input_length").itertuples()
    assert b.terminal_status == "rejected" and b.terminal_time_ms == 10.0
    assert a.first_token_ms == 40.0
