"""SGLang disaggregated edges (destination reserved at arrival, spec section 6).

Fixed timing (prefill 10 ms per pass with prompt work, decode 1 ms per pass), zero-time
transfer: a lone request of 5 output tokens is prefilled 0-10, activated at 10, and its
first visible token ends the decode pass 10-11 (TTFT 11 ms); four more passes give E2E
15 ms.
"""
from __future__ import annotations

import simmodel


def run(write_trace, rows, *, decode_blocks=600, prefill_blocks=4000, max_model_len=None):
    t = write_trace(rows)
    mml = f", max_model_len: {max_model_len}" if max_model_len else ""
    eng = ("backend: sglang, timing_model: {type: fixed, prefill_ms: 10, decode_ms: 1}"
           f"{mml}")
    p = t.with_name("s.yaml")
    p.write_text(
        f"workload: {{trace: {t.name}, format: mooncake, trace_block_size: 512}}\n"
        f"cluster:\n"
        f"  prefill: {{workers: 1, engine: {{{eng}, num_gpu_blocks: {prefill_blocks}}}}}\n"
        f"  decode: {{workers: 1, engine: {{{eng}, num_gpu_blocks: {decode_blocks}"
        f"}}}}\n")
    return simmodel.run(simmodel.load_scenario(str(p)))


def row(ts, isl, osl, first_id):
    return {"timestamp": ts, "input_length": isl, "output_length": osl,
            "hash_ids": list(range(first_id, first_id + -(-isl // 512)))}


def test_a_prompt_at_max_model_len_is_rejected_before_its_destination_is_reserved(write_trace):
    # A (400 tokens >= max_model_len 300) would hold 400 of the decode pool's 600 slots
    # and B (200 + 5) could then never be reserved: before the fix A's reservation was
    # kept after its prefill was refused and B stayed incomplete.
    res = run(write_trace, [row(0, 400, 5, 0), row(0, 250, 5, 10)], max_model_len=300)
    r = res.requests.set_index("session_id")
    a, b = r.loc["request_1"], r.loc["request_2"]
    assert a.terminal_status == "rejected" and a.terminal_time_ms == 0.0
    assert a.destination_reserved_ms != a.destination_reserved_ms          # NaN: none
    assert b.terminal_status == "completed"
    assert b.destination_reserved_ms == 0.0
    assert (b.ttft_ms, b.e2e_latency_ms) == (11.0, 15.0)
    # 250 + 5 <= 300: not capped
    assert b.output_length == 5


def test_a_prefill_refused_at_run_time_gives_its_reservation_back(write_trace):
    # A (400 tokens) holds 400 of the decode pool's 600 slots from arrival; B (300) waits
    # for slots.  The prefill pool (400) holds A's prompt but not the one slot more of its
    # first token, so the prefill side rejects A at run time (time 0); its reservation is
    # given back and B is reserved then, and served as if alone.
    res = run(write_trace, [row(0, 400, 5, 0), row(0, 300, 5, 10)], prefill_blocks=400)
    r = res.requests.set_index("session_id")
    a, b = r.loc["request_1"], r.loc["request_2"]
    assert a.terminal_status == "rejected" and a.destination_reserved_ms == 0.0
    assert b.terminal_status == "completed" and b.destination_reserved_ms == 0.0
    assert (b.ttft_ms, b.e2e_latency_ms) == (11.0, 15.0)


class DrainDecode:
    """One tick at 100 ms: the decode pool to zero workers."""

    def initial_tick_ms(self):
        return 100.0

    def on_tick(self, snap):
        return {"target_prefill": None, "target_decode": 0, "next_tick_ms": None}


def test_a_request_arriving_while_its_decode_worker_starts_waits_for_it():
    # Request 1 (t=0) is served alone (TTFT 11, E2E 15).  The tick at 100 ms drains the
    # decode pool; request 2 arrives at 1000 ms to no decode worker: one starts (ready at
    # 1300 with startup 0.3 s), the destination is reserved then, so the prefill runs
    # 1300-1310 and the tokens come at 1311 ... 1315.  It used to raise RuntimeError.
    from simmodel.config import (ClusterConfig, EngineConfig, PoolConfig, Scenario,
                                 SyntheticConfig, TimingConfig, WorkloadConfig)
    fixed = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)

    def pool(startup):
        return PoolConfig(workers=1, engine=EngineConfig(backend="sglang", timing_model=fixed,
                                                         startup_time=startup))
    sc = Scenario(workload=WorkloadConfig(synthetic=SyntheticConfig(
        requests=2, input_tokens=200, output_tokens=5, arrival_interval_ms=1000.0)),
        cluster=ClusterConfig(prefill=pool(None), decode=pool(0.3)))
    res = simmodel.run(sc, scaling_policy=DrainDecode())
    r = res.requests.sort_values("arrival_time_ms")
    assert (r.terminal_status == "completed").all()
    assert r.destination_reserved_ms.tolist() == [0.0, 1300.0]
    assert r.ttft_ms.tolist() == [11.0, 311.0]
    assert r.e2e_latency_ms.tolist() == [15.0, 315.0]
