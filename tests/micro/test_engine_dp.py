"""Attention data parallelism (``dp_size > 1``, reference §2.5): lock-step ranks, round
robin over (worker, rank) slots, ``prefill_schedule_interval``, GPUs per worker, and an
SGLang rank's share of the scheduler's budgets.  Expected values are hand-derived; the
interval cases were also run on ai-dynamo-runtime 1.6.1 (same admission and first-token
times)."""
from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

import simmodel
from simmodel.cluster.kv_router import KvRouter
from simmodel.config import (ClusterConfig, EngineConfig, RouterConfig, RunConfig, Scenario,
                             TimingConfig, WorkloadConfig, SyntheticConfig)
from simmodel.engine.kv_cache import REMOVED, STORED
from simmodel.engine.request import EngineRequest
from simmodel.engine.timing import div_ns, duration_ns, prefill_poly_ms
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt

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


def p_ms(tokens):
    """The reference's prefill polynomial on its nanosecond clock (§2.1)."""
    return div_ns(duration_ns(prefill_poly_ms(tokens)), 1.0) / 1e6


def test_sglang_rank_chunks_at_its_share_of_chunked_prefill_size(tmp_path):
    # dp 2: a rank chunks at 8192 // 2 = 4096 tokens, so a lone 7000-token prompt prefills
    # in two passes, 4096 then 2904 new tokens (measured on 1.6.1: TTFT 149.900484 ms);
    # without DP it is one pass of 7000.
    rows = [row(0, 7000, 3, 10)]
    dp2 = by_arrival(simmodel.run(trace(tmp_path, rows, backend="sglang", dp_size=2,
                                        num_gpu_blocks=65536)))
    assert dp2.ttft_ms[0] == pytest.approx(p_ms(4096) + p_ms(2904), abs=1e-9)
    assert dp2.ttft_ms[0] == pytest.approx(149.900484, abs=1e-6)
    dp1 = by_arrival(simmodel.run(trace(tmp_path, rows, backend="sglang",
                                        num_gpu_blocks=65536)))
    assert dp1.ttft_ms[0] == pytest.approx(p_ms(7000), abs=1e-9)


def sglang_offset_case(tmp_path, conservativeness):
    # Fixed timing (10 ms a prefill pass, 1 ms a decode pass), one worker, dp 2, pools of
    # 10,000 one-token slots.  A (rank 0) 1000/4000 and X (rank 1) 100/2 prefill in [0, 10);
    # B (4000/3000, rank 0) arrives at 5.  At 10, rank 0's walk sees room 10000 - 1001
    # (A's prompt and first token, locked) = 8999 and the offset 3999 x new_token_ratio;
    # B needs 4000 + min(3000, 4096) = 7000 < 8999 - offset.
    rows = [row(0, 1000, 4000, 10), row(0, 100, 2, 20), row(5, 4000, 3000, 30)]
    from simmodel.config import SglangConfig
    sc = trace(tmp_path, rows, backend="sglang", dp_size=2, num_gpu_blocks=10000,
               timing_model=FIXED, sglang=SglangConfig(schedule_conservativeness=conservativeness))
    return by_arrival(simmodel.run(sc))


def test_sglang_rank_new_token_ratio_starts_at_three_tenths(tmp_path):
    # With DP the initial ratio is 0.7 x conservativeness x 0.3 = 0.21: offset 839.79,
    # 7000 < 8159.21, so B is admitted at 10 and its prefill pass ends at 20 (rank 1's
    # decode pass of 1 ms waits for it).
    b = sglang_offset_case(tmp_path, 1.0).iloc[2]
    assert (b.decode_worker_idx, b.first_admit_ms, b.first_token_ms) == (0, 10.0, 20.0)
    # conservativeness 1 / 0.3 puts it back at 0.7: offset 2799.3, 7000 > 6199.7, B waits
    b = sglang_offset_case(tmp_path, 1 / 0.3).iloc[2]
    assert b.first_admit_ms > 10.0


def test_prefill_schedule_interval_is_vllm_only():
    # the reference: "prefill_schedule_interval is supported only for backend=vllm"
    for backend in ("sglang", "trtllm"):
        with pytest.raises(simmodel.config.ConfigError, match="^prefill_schedule_interval"):
            EngineConfig(backend=backend, dp_size=2, prefill_schedule_interval=2)
    EngineConfig(backend="sglang", dp_size=2, prefill_schedule_interval=1)


# -- the KV router: every (worker, rank) a target of its own ------------------------------

class _Worker:
    """A stand-in worker for a router driven by hand."""

    def __init__(self, idx):
        self.idx, self.state, self.got = idx, "active", []

    def view(self):
        return self

    def submit(self, req):
        self.got.append(req)


class _Logged(KvRouter):
    def _choose(self, costs):
        i = super()._choose(costs)
        self.log.append((list(costs), i))
        return i


def kv_router(workers=1, dp=2):
    env = type("Env", (), {"now": 0.0})()
    ws = [_Worker(i) for i in range(workers)]
    r = _Logged(env, ws, RouterConfig(mode="kv"), block_size=64, max_num_batched_tokens=8192,
                rng=np.random.default_rng(0), dp=dp)
    r.log = []
    r.attach()
    return env, ws, r


def request(ids, tokens=2048):
    uid = next(_uids)
    return EngineRequest(uid, TokenSequence(Prompt(tuple(ids), 64, tokens), 64, uid), 5,
                         arrival_ms=0.0)


_uids = itertools.count()


def test_kv_router_costs_each_rank_apart():
    # 2048-token prompts, block 64 (§5.2's numbers): an idle rank costs 32 + 32 = 64.  A
    # goes to one of the two idle ranks; B (another prompt) then sees A's rank at
    # (2048 + 2048)/64 + 32 + 32 = 128 and the other at 64.
    env, ws, r = kv_router()
    a, b = request(range(100, 132)), request(range(200, 232))
    assert r.pick(a) == 0 and r.log[0][0] == [64.0, 64.0]
    assert r.pick(b) == 0
    assert r.log[1][0] == [128.0 if s == a.dp_rank else 64.0 for s in (0, 1)]
    assert b.dp_rank == 1 - a.dp_rank
    # A's prompt is cached on its rank (the events carry it); both finish; A's prompt
    # again costs 0 + 32 there and 64 on the other rank
    r.on_kv_events(0, [(1.0, STORED, h, a.dp_rank) for h in a.seq.ensure(32)])
    for q in (a, b):
        r.on_first_token(q)
        r.on_done(q)
    env.now = 2.0
    c = request(range(100, 132))
    r.pick(c)
    assert r.log[2][0] == [32.0 if s == a.dp_rank else 64.0 for s in (0, 1)]
    assert c.dp_rank == a.dp_rank


def test_kv_router_indexes_each_rank_from_its_own_events():
    # the same blocks stored on both ranks, then removed on rank 0 only: rank 1 keeps them
    env, ws, r = kv_router()
    p = request(range(300, 332))
    hashes = p.seq.ensure(32)
    r.on_kv_events(0, [(0.0, STORED, h, 0) for h in hashes]
                   + [(0.0, STORED, h, 1) for h in hashes]
                   + [(0.0, REMOVED, h, 0) for h in hashes])
    assert r.pick(p) == 0 and r.log[0] == ([64.0, 32.0], 1) and p.dp_rank == 1


def test_kv_router_run_places_groups_on_worker_rank_slots(tmp_path):
    # 2 workers x dp 2, four prompts of 9 trace blocks (4608 tokens) with distinct
    # prefixes at 0: a busy slot costs more than an idle one, so each takes its own slot
    # (index worker x 2 + rank); all prefill in one lock-step pass, TTFT P(4608).  At 1000
    # each group's follow-up (its 8-block prefix + a new block) finds its prefix (64
    # engine blocks) on its slot only, reuses 4096 tokens there and prefills 512: P(512).
    rows = ([row(0, 4608, 3, 1000 * g) for g in range(1, 5)]
            + [row(1000, 4608, 3, 1000 * g) for g in range(1, 5)])
    for r in rows[4:]:
        r["hash_ids"][-1] += 500
    sc = trace(tmp_path, rows, workers=2, dp_size=2, block_size=64)
    sc = Scenario(workload=sc.workload, cluster=dataclasses.replace(
        sc.cluster, router=RouterConfig(mode="kv")))
    df = by_arrival(simmodel.run(sc))
    first, follow = df.iloc[:4], df.iloc[4:]
    assert sorted(first.decode_worker_idx) == [0, 1, 2, 3]
    assert follow.decode_worker_idx.tolist() == first.decode_worker_idx.tolist()
    assert follow.reused_input_tokens.tolist() == [4096] * 4
    assert first.ttft_ms.tolist() == pytest.approx([p_ms(4608)] * 4, abs=1e-9)
    assert follow.ttft_ms.tolist() == pytest.approx([p_ms(512)] * 4, abs=1e-9)


def test_a_scenario_file_with_prefill_schedule_interval_on_sglang_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("workload: {synthetic: {requests: 2, input_tokens: 10, output_tokens: 2, "
                    "arrival_interval_ms: 1.0}}\n"
                    "cluster: {workers: 1, engine: {backend: sglang, dp_size: 2, "
                    "prefill_schedule_interval: 2}}\n")
    with pytest.raises(simmodel.UserError, match="prefill_schedule_interval: is supported "
                                                 "only for backend vllm"):
        simmodel.load_scenario(path)


# prefill_schedule_interval 3 on chunked prompts.  Fixed timing (10 ms with prompt work,
# +1 ms with decoders), a 2048-token budget.  A (rank 0) and B (rank 1) arrive at 0 and
# decode from 10 on, so step 0 is [0, 10) and step k >= 1 starts at 9 + k while only they
# run (1 ms passes).  The request under test reaches rank 0 during step 6 [15, 15+1).
# Each case: rows after A and B (rank 0, rank 1, rank 0...), then the last row's expected
# (first_admit_ms, first_token_ms).  Every case was also checked on ai-dynamo-runtime 1.6.1.
INTERVAL_CASES = {
    # Step 9 at 18 admits C: 2047 tokens (A decodes) in [18, 29).  A chunk continuation is
    # prefill too: steps 10, 11 (29, 30) skip it; step 12 at 31 [31, 42) takes 2047 more;
    # steps 13, 14 skip; step 15 at 44 takes the last 906: first token at 55.
    "a chunk continues only on prefill steps": ([(15.5, 5000)], (18.0, 55.0)),
    # C (2047 tokens) fills step 9's budget and E (rank 0) is left waiting, so step 10 at
    # 29 may prefill too: E takes 2046 (A and C decode) in [29, 40); its queue is now empty,
    # so step 11 at 40 skips E's last 954 tokens; step 12 at 41 [41, 52) takes them.
    "a prefill step that leaves requests waiting extends to the next step":
        ([(15.5, 2047), (15.55, 100), (15.6, 3000)], (29.0, 52.0)),
    # C's last prompt token is left for step 10; a prompt's last token is still prefill:
    # steps 10, 11 skip it, step 12 at 31 runs it [31, 42).
    "a last chunk of one token waits too": ([(15.5, 2048)], (18.0, 42.0)),
}


def run_interval3(tmp_path, rows):
    """The setting above: dp 2, interval 3, fixed timing, a 2048-token budget."""
    return simmodel.run(trace(tmp_path, rows, dp_size=2, timing_model=FIXED,
                              prefill_schedule_interval=3, max_num_batched_tokens=2048))


@pytest.mark.parametrize("case", INTERVAL_CASES, ids=list(INTERVAL_CASES))
def test_prefill_schedule_interval_with_chunks(tmp_path, case):
    later, expected = INTERVAL_CASES[case]
    rows = [row(0, 100, 60, 10), row(0, 100, 60, 20)]
    rows += [row(t, isl, 5, 100 * (i + 1)) for i, (t, isl) in enumerate(later)]
    res = run_interval3(tmp_path, rows)
    last = by_arrival(res).iloc[-1]
    assert last.decode_worker_idx == 0
    assert (last.first_admit_ms, last.first_token_ms) == expected


def test_prefill_schedule_interval_one_token_prompt(tmp_path):
    # As above.  C (1025 tokens) shares A's two 512-token trace blocks, so all but its last
    # token is cached (16 blocks of 64): needing one token, it is admitted at step 7 (16),
    # not a prefill step; that pass has prompt work and A decoding: first token at 27.
    rows = [row(0, 1024, 60, 10), row(0, 100, 60, 20), row(15.5, 1025, 5, 10)]
    res = run_interval3(tmp_path, rows)
    c = by_arrival(res).iloc[-1]
    assert (c.reused_input_tokens, c.first_admit_ms, c.first_token_ms) == (1024, 16.0, 27.0)


def test_prefill_schedule_interval_rank_without_decoders(tmp_path):
    # A rank with no decoding request prefills in every step.  A (rank 0, 3 tokens) is done
    # at 12; B (rank 1) decodes on.  C reaches the idle rank 0 at 15.5 and is admitted at
    # step 7 (16); its chunks of 2048 run in steps 7, 8, 9 (10 ms each, B's 1 ms decode in
    # parallel): [16, 26), [26, 36), [36, 46) with the last 904 tokens.
    rows = [row(0, 100, 3, 10), row(0, 100, 60, 20), row(15.5, 5000, 5, 30)]
    res = run_interval3(tmp_path, rows)
    c = by_arrival(res).iloc[-1]
    assert (c.decode_worker_idx, c.first_admit_ms, c.first_token_ms) == (0, 16.0, 46.0)


RESTART_CASES = {
    # X and Y (100 tokens, 1 output token) end at 10 and the worker has no work: A and B,
    # arriving at that pass end, start a new busy period whose first step (0) is [10, 20).
    # A and B decode from 20 (step k at 19 + k); C reaches rank 0 at 25.5, waits through
    # steps 7 and 8 (26, 27) and is admitted at step 9 (28): first token at 28 + 11.
    "idle at a pass end": ([(0, 100, 1), (0, 100, 1)], 16384, 10, 25.5, (28.0, 39.0)),
    # The same, but the first formation (at 0) only rejects R (9000 tokens > 100 blocks
    # of 64): that leaves the worker with no work as well (C is on rank 1 here).
    "idle after a rejection": ([(0, 9000, 1)], 100, 10, 25.5, (28.0, 39.0)),
    # X and Y end at 10 while A and B (arrived at 5) wait: no restart, [10, 20) is step 1,
    # step k at 18 + k; C (20.5) is admitted at step 3 (21).
    "requests waiting at the pass end": ([(0, 100, 1), (0, 100, 1)], 16384, 5, 20.5,
                                         (21.0, 32.0)),
}


@pytest.mark.parametrize("case", RESTART_CASES, ids=list(RESTART_CASES))
def test_prefill_schedule_interval_steps_restart_when_the_worker_idles(tmp_path, case):
    first, blocks, t_ab, t_c, expected = RESTART_CASES[case]
    rows = [row(t, isl, osl, 100 * i) for i, (t, isl, osl) in enumerate(first)]
    rows += [row(t_ab, 100, 60, 10), row(t_ab, 100, 60, 20), row(t_c, 500, 5, 30)]
    res = simmodel.run(trace(tmp_path, rows, dp_size=2, timing_model=FIXED,
                             num_gpu_blocks=blocks, prefill_schedule_interval=3,
                             max_num_batched_tokens=2048))
    c = by_arrival(res).iloc[-1]
    assert (c.first_admit_ms, c.first_token_ms) == expected
