"""Requests that can never fit (docs/model.md, "Requests that can never run").

Refused before the run, one line naming the trace file and line (exit 2 in the CLI), when
sizes alone prove it and the reference aborts the replay on it; rejected at run time, the
rest of the run going on, when only the run can tell.  The reference (ai-dynamo-runtime
1.6.1) aborts with "effect-free zero-duration pass" on the 38,000 + 1,000 token example
with both backends.
"""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.cli import main
from simmodel.errors import UserError

BIG = 38_000          # on 600 blocks x 64 = 38,400 tokens: the prompt fits, + 1,000 not


def trace(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def row(ts, isl, osl, first_id, **extra):
    n = -(-isl // 512)
    return {"timestamp": ts, "input_length": isl, "output_length": osl,
            "hash_ids": list(range(first_id, first_id + n)), **extra}


def scenario(tmp_path, rows, cluster: str, fmt: str = "mooncake"):
    t = trace(tmp_path, rows)
    p = tmp_path / "s.yaml"
    p.write_text(f"workload: {{trace: {t.name}, format: {fmt}, trace_block_size: 512}}\n"
                 f"cluster: {cluster}\n")
    return str(p)


AGG = "{{workers: 1, engine: {{backend: {be}, num_gpu_blocks: 600, block_size: 64}}}}"
ROWS = [row(0, 1000, 10, 0), row(0, BIG, 1000, 100), row(10, 1000, 10, 200)]


def test_vllm_whole_sequence_refused_before_the_run(tmp_path, capsys):
    path = scenario(tmp_path, ROWS, AGG.format(be="vllm"))
    with pytest.raises(UserError) as e:
        simmodel.run(simmodel.load_scenario(path))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 't.jsonl'}:2: request 'request_2' needs 610 KV blocks")
    assert "can never complete" in msg
    assert main(["run", path]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_vllm_prompt_larger_than_pool_is_still_rejected_at_run_time(tmp_path):
    rows = [row(0, 1000, 10, 0), row(0, 38_401, 5, 100), row(10, 1000, 10, 200)]
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, AGG.format(be="vllm"))))
    st = res.requests.set_index("session_id").terminal_status
    assert list(st) == ["completed", "rejected", "completed"]


def test_sglang_rejected_at_run_time_and_the_run_goes_on(tmp_path):
    """SGLang: whether a prompt + its output reserve fits depends on the cache (a cached
    prefix shrinks what is charged), so it is found at run time: the head that cannot be
    admitted on an empty engine is rejected and the others complete."""
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, ROWS, AGG.format(be="sglang"))))
    r = res.requests.set_index("session_id")
    assert list(r.terminal_status) == ["completed", "rejected", "completed"]
    assert r.loc["request_2", "output_length"] == 0
    assert res.summary["completed_requests"] == 2


def test_sglang_cached_prefix_lets_it_fit(tmp_path):
    """The same 38,000-token prompt with its prefix cached by an earlier request with a
    short output fits: it is not refused up front."""
    rows = [row(0, BIG, 5, 100), row(10_000, BIG, 1000, 100)]
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, AGG.format(be="sglang"))))
    assert (res.requests.terminal_status == "completed").all()


def test_sglang_prompt_larger_than_pool_refused(tmp_path):
    rows = [row(0, 1000, 10, 0), row(0, 38_401, 5, 100)]
    with pytest.raises(UserError, match=r"t\.jsonl:2: request 'request_2' has 38401 prompt "
                                        r"tokens, more than the 38400 KV slots"):
        simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, AGG.format(be="sglang"))))


@pytest.mark.parametrize("be", ["vllm", "sglang"])
def test_huge_output_refused(tmp_path, be):
    rows = [row(0, 1000, 10, 0), row(0, 1000, 10**14, 10)]
    with pytest.raises(UserError, match=r"t\.jsonl:2: request 'request_2' has "
                                        r"100,000,000,000,000 output tokens, more than the "
                                        r"limit of 10,000,000 tokens per request"):
        simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, f"{{engine: {{backend: {be}}}}}")))


def test_disaggregated_prompt_filling_the_decode_pool(tmp_path):
    """vLLM: a prompt of exactly the decode pool's 100 x 64 tokens can be reserved and
    transferred but its first decoded token needs block 101: refused up front."""
    rows = [row(0, 1000, 10, 0), row(0, 6400, 20, 100), row(5, 1000, 10, 200)]
    pools = ("{{prefill: {{workers: 1, engine: {{backend: {be}, num_gpu_blocks: 1000, block_size: 64}}}}, "
             "decode: {{workers: 1, engine: {{backend: {be}, num_gpu_blocks: 100, block_size: 64}}}}}}")
    with pytest.raises(UserError, match=r"t\.jsonl:2: .* needs 101 KV blocks .* decode worker"):
        simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, pools.format(be="vllm"))))
    # SGLang decodes a lone request without a free slot: it completes
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, pools.format(be="sglang"))))
    assert (res.requests.terminal_status == "completed").all()
    # one output token needs no decode growth: fits
    rows[1] = row(0, 6400, 1, 100)
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, pools.format(be="vllm"))))
    assert (res.requests.terminal_status == "completed").all()


def test_vllm_recompute_over_the_budget_rejected_at_run_time(tmp_path):
    """Chunked prefill and caching off: B is preempted after some tokens, and its
    recompute (prompt + generated) is longer than max_num_batched_tokens, so it can never
    be admitted again.  Once A is done nothing runs: B is rejected, C completes."""
    rows = [row(0, 1000, 200, 0), row(0, 1000, 200, 10), row(5000, 500, 10, 20)]
    cluster = ("{workers: 1, engine: {num_gpu_blocks: 130, block_size: 16, "
               "max_num_batched_tokens: 1024, enable_chunked_prefill: false, "
               "enable_prefix_caching: false}}")
    res = simmodel.run(simmodel.load_scenario(scenario(tmp_path, rows, cluster)))
    r = res.requests.set_index("session_id")
    assert list(r.terminal_status) == ["completed", "rejected", "completed"]
    assert r.loc["request_2", "readmission_count"] == 0 and r.loc["request_2", "output_length"] > 24
    assert r.loc["request_2", "terminal_time_ms"] == pytest.approx(r.loc["request_1", "terminal_time_ms"])


def test_delta_prompt_built_at_release_rejected_at_run_time(tmp_path):
    """mooncake-delta: turn 2's prompt is turn 1's + its output + the delta, known only at
    release; its whole sequence exceeds the pool, so it is rejected then (vLLM)."""
    rows = [row(0, 1000, 10, 0, session_id="s"),
            row(0, 37_376, 1000, 100, session_id="s", delay=0),
            row(1, 1000, 10, 500, session_id="t")]
    res = simmodel.run(simmodel.load_scenario(
        scenario(tmp_path, rows, AGG.format(be="vllm"), fmt="mooncake-delta")))
    r = res.requests.set_index(["session_id", "turn_index"]).terminal_status
    assert r[("s", 0)] == "completed" and r[("s", 1)] == "rejected" and r[("t", 0)] == "completed"
