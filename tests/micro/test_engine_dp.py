"""Attention data parallelism (``dp_size > 1``, reference §2.5): lock-step ranks, round
robin over (worker, rank) slots, ``prefill_schedule_interval``, GPUs per worker."""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.config import (ClusterConfig, EngineConfig, RunConfig, Scenario, TimingConfig,
                             WorkloadConfig, SyntheticConfig)
from simmodel.engine.timing import div_ns, duration_ns, prefill_poly_ms

FIXED = TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0)


def trace(tmp_path, rows, workers=1, **engine):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Scenario(workload=WorkloadConfig(trace=str(path), format="mooncake"),
                    cluster=ClusterConfig(workers=workers, engine=EngineConfig(**engine)))


def row(t, isl, osl, h):
    return {"timestamp": t, "input_length": isl, "output_length": osl,
            "hash_ids": list(range(h, h + -(-isl // 512)))}


def by_arrival(res):
    return res.requests.sort_values(["arrival_time_ms", "uid"]).reset_index(drop=True)


def test_ranks_advance_in_lock_step(tmp_path):
    # The reference's example: ranks get 1000+500 and 3000+100 prompt tokens; every
    # request's first token comes at the end of the slowest rank's pass, P(3100).
    rows = [row(0, 1000, 3, 10), row(0, 3000, 3, 20), row(0, 500, 3, 30), row(0, 100, 3, 40)]
    res = simmodel.run(trace(tmp_path, rows, dp_size=2))
    r = by_arrival(res)
    p3100 = div_ns(duration_ns(prefill_poly_ms(3100)), 1.0) / 1e6
    assert r.ttft_ms.tolist() == pytest.approx([p3100] * 4, abs=1e-9)
    assert r.decode_worker_idx.tolist() == [0, 1, 0, 1]        # ranks 0, 1, 0, 1


def test_round_robin_over_worker_rank_slots_and_gpus():
    sc = Scenario(
        workload=WorkloadConfig(synthetic=SyntheticConfig(
            requests=8, input_tokens=100, output_tokens=2, arrival_interval_ms=1.0)),
        cluster=ClusterConfig(workers=2, engine=EngineConfig(dp_size=2,
                                                             tensor_parallel_size=2)))
    res = simmodel.run(sc)
    # slots worker by worker within a rank: (w0,r0), (w1,r0), (w0,r1), (w1,r1); index w*dp+r
    assert by_arrival(res).decode_worker_idx.tolist() == [0, 2, 1, 3, 0, 2, 1, 3]
    s = res.summary
    assert s["decode_gpus_per_worker"] == 4
    assert s["gpu_hours"] == pytest.approx(s["decode_worker_seconds"] * 4 / 3600.0)


@pytest.mark.parametrize("coalesce", [True, False])
def test_an_idle_rank_waits_for_the_workers_pass(tmp_path, coalesce):
    # Fixed timing: a pass costs 10 ms with prompt work, +1 ms with decoders.  A (rank 0)
    # prefills in [0, 10); B arrives at 2 on rank 1 and waits for the worker's pass end;
    # at 10 rank 0 decodes (1 ms) while rank 1 prefills (10 ms): the pass ends at 20.
    rows = [row(0, 100, 5, 10), row(2, 100, 5, 20)]
    sc = trace(tmp_path, rows, dp_size=2, timing_model=FIXED)
    sc = Scenario(workload=sc.workload, cluster=sc.cluster,
                  run=RunConfig(coalesce_decode=coalesce))
    a, b = by_arrival(simmodel.run(sc)).itertuples()
    assert (a.first_token_ms, a.second_token_ms) == (10.0, 20.0)
    assert (b.first_admit_ms, b.first_token_ms) == (10.0, 20.0)


def test_prefill_schedule_interval(tmp_path):
    # interval 3: a rank with running requests admits waiting ones only on steps 0, 3, 6...
    # of the worker; a rank with nothing running admits at once.  Fixed timing as above.
    # step 0 [0,10): A prefills on rank 0.  B (0.5, rank 1, nothing running there) is
    # admitted at step 1 [10,20) (A decodes, B prefills: 10 ms).  C (15, rank 0, A
    # running) waits: step 2 [20,21) decode only; step 3 starts at 21 and admits C; on
    # rank 0 that pass has prompt work and a decoder (A): 10 + 1 ms, so C's first token at 32.
    rows = [row(0, 100, 50, 10), row(0.5, 100, 50, 20), row(15, 100, 5, 30)]
    res = simmodel.run(trace(tmp_path, rows, dp_size=2, timing_model=FIXED,
                             prefill_schedule_interval=3))
    a, b, c = by_arrival(res).itertuples()
    assert b.first_admit_ms == 10.0 and b.first_token_ms == 20.0
    assert c.decode_worker_idx == 0 and c.first_admit_ms == 21.0
    assert c.first_token_ms == 32.0


def test_dp_refused_where_not_supported(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workload: {synthetic: {requests: 2, input_tokens: 10, output_tokens: 2, "
                    "arrival_interval_ms: 1.0}}\n"
                    "cluster: {workers: 1, engine: {dp_size: 2}, router: {mode: kv}}\n")
    with pytest.raises(simmodel.UserError, match="dp_size: attention DP with router mode kv"):
        simmodel.run(simmodel.load_scenario(path))
