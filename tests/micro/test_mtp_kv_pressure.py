"""Speculative decoding under KV pressure (engine/vllm_mtp.py): the drafts' KV is held
after admission, a request that cannot get it preempts (its prefill still costs), and the
blocks of rejected drafts go back at the pass end.

Two requests A and B of 60 prompt tokens (distinct prefixes) and 40 output tokens arrive
together on one worker of 10 blocks of 16 tokens (160 tokens: the decode term's capacity),
``aic_nextn`` 2.  Every expected time is summed pass by pass from the cost model; the
derivation is in each test.  (Checked against ai-dynamo-runtime 1.6.1, which gives the
same times to the nanosecond: 437.147189 / 675.607597 ms with rates (1, 1), 635.318321 /
956.053451 with rates (1, 0), 577.274118 / 897.766044 with rates (1, 0) and A's output 35.)
"""
from __future__ import annotations

import json

import pytest

import simmodel
from simmodel.engine.timing import decode_poly_ms, div_ns, duration_ns, prefill_poly_ms
from simmodel.scenario import scenario_from_dict

CAP = 10 * 16


def P(t: int) -> float:
    return div_ns(duration_ns(prefill_poly_ms(t)), 1.0) / 1e6


def D(active: int) -> float:
    return div_ns(duration_ns(decode_poly_ms(active, CAP)), 1.0) / 1e6


def run_pair(tmp_path, rates, out_a=40):
    rows = [{"timestamp": 0, "input_length": 60, "output_length": out, "hash_ids": [h],
             "session_id": name} for name, h, out in (("A", 1, out_a), ("B", 2, 40))]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = {"workload": {"trace": str(path)},
            "cluster": {"workers": 1, "engine": {
                "num_gpu_blocks": 10, "block_size": 16, "aic_nextn": len(rates),
                "aic_nextn_accept_rates": list(rates)}}}
    res = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path), source="micro"))
    df = res.requests.set_index("session_id")
    return df.loc["A"], df.loc["B"], res.passes


def test_drafts_hold_kv_so_the_newest_is_preempted_a_pass_earlier(tmp_path):
    # Bursts of 3 (rates 1, 1).  A request emitting this pass holds KV for its sequence
    # + 3 tokens.  Pass 1: both prompts, P(120) + D(60 + 60), 63 tokens -> 4 blocks each;
    # passes 2-6 at sequences 63..75 (D(2s)), 66..78 tokens -> 5 blocks each: the pool is
    # full.  Pass 7 at 78: A needs 81 tokens (6 blocks), so B (newest) is preempted and
    # the pass is A's alone, D(78).  (Without the 3 tokens held, 78 + 2 = 80 fits in 5
    # blocks and B would go a pass later.)  A then runs alone at 81..99; its last pass
    # emits 1 token (40 = 39 + 1).  B, back at 78 tokens, had 4 full blocks cached; A's
    # 7th block (at 96 + 3) evicted B's last one: 3 hit, one recomputed (MTP): 32 reused,
    # P(60 - 32) + D(78), then 81..99 alone.
    a, b, passes = run_pair(tmp_path, (1.0, 1.0))
    a_passes = ([P(120) + D(120)] + [D(2 * s) for s in range(63, 78, 3)] + [D(78)]
                + [D(s) for s in range(81, 100, 3)])
    assert a.e2e_latency_ms == pytest.approx(sum(a_passes), abs=1e-9)
    b_passes = a_passes + [P(28) + D(78)] + [D(s) for s in range(81, 100, 3)]
    assert b.e2e_latency_ms == pytest.approx(sum(b_passes), abs=1e-9)
    assert (b.admission_count, b.reused_input_tokens) == (2, 32)
    assert list(passes.kv_blocks_active[:7]) == [8, 10, 10, 10, 10, 10, 6]


def test_rejected_drafts_give_back_their_blocks_and_a_victims_prefill_costs(tmp_path):
    # Bursts of 2 (rates 1, 0) but KV held for 3 tokens, the rejected draft's block freed
    # at the pass end.  Pass 1: P(120) + D(120); passes 2-9 at 62..76 (D(2s)).  Pass 10
    # at 78: A needs 81 tokens, B is preempted (its 4 full blocks cached, its partial one
    # freed), D(78); A emits 2 (80 tokens) and keeps 5 blocks: 1 free, 4 cached.
    # Pass 11: B fits (5 blocks - 3 hit = 2 <= 1 free + 4 cached - 3 of them hit) and is
    # admitted (48 reused), but then A's 83 tokens need a 6th block: B is its victim
    # again, and its 12 prompt tokens still cost: P(12) + D(80).  A alone at 82..98 (at
    # 94 its 97 tokens take a 7th block, evicting one of B's, given back at the pass end);
    # A completes at 100 tokens.  Pass 21: B with 2 hit (32 reused), P(28) + D(78), then
    # 80..98 alone.
    a, b, passes = run_pair(tmp_path, (1.0, 0.0))
    a_passes = ([P(120) + D(120)] + [D(2 * s) for s in range(62, 77, 2)] + [D(78)]
                + [P(12) + D(80)] + [D(s) for s in range(82, 99, 2)])
    assert a.e2e_latency_ms == pytest.approx(sum(a_passes), abs=1e-9)
    b_passes = a_passes + [P(28) + D(78)] + [D(s) for s in range(80, 99, 2)]
    assert b.e2e_latency_ms == pytest.approx(sum(b_passes), abs=1e-9)
    assert (b.admission_count, b.reused_input_tokens) == (3, 48)
    # active blocks after each pass is formed: 4 + 4, then 5 + 5 held (pass 2) although
    # 4 + 4 remain after it (64 tokens each), ..., A's 6 alone in passes 10 and 11
    assert list(passes.kv_blocks_active[:3]) == [8, 10, 10]
    assert list(passes.kv_blocks_active[9:11]) == [6, 6]


def test_drafts_held_only_up_to_the_remaining_output(tmp_path):
    # As above with A's output 35: A's last pass (94 tokens, 1 token left) holds 95
    # tokens, 6 blocks, so nothing of B's is evicted (97 tokens would need a 7th).  B
    # comes back with its 4 full blocks cached: 3 hit (48 reused), P(12) + D(78).
    a, b, _ = run_pair(tmp_path, (1.0, 0.0), out_a=35)
    a_passes = ([P(120) + D(120)] + [D(2 * s) for s in range(62, 77, 2)] + [D(78)]
                + [P(12) + D(80)] + [D(s) for s in range(82, 95, 2)])
    assert a.e2e_latency_ms == pytest.approx(sum(a_passes), abs=1e-9)
    b_passes = a_passes + [P(12) + D(78)] + [D(s) for s in range(80, 99, 2)]
    assert b.e2e_latency_ms == pytest.approx(sum(b_passes), abs=1e-9)
    assert (b.admission_count, b.reused_input_tokens) == (3, 48)


def test_a_lone_request_short_of_draft_kv_holds_what_the_pool_gives(tmp_path):
    # 61 prompt tokens + 4 output on 4 blocks of 16 (64 tokens; the sequence's KV, 64
    # tokens, fits).  Pass 1: P(61) + D(61), 61 + 3 = 64 tokens held, 3 emitted.  Pass 2
    # at 64 tokens would hold 64 + 1 (1 token left): a 5th block that does not exist, and
    # it is the pass's only request: it keeps its 4 blocks and emits its last token, D(64).
    # (A decision: the reference never finishes this run, docs/model.md.)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 61, "output_length": 4,
                                "hash_ids": [1]}) + "\n")
    data = {"workload": {"trace": str(path)},
            "cluster": {"workers": 1, "engine": {
                "num_gpu_blocks": 4, "block_size": 16, "aic_nextn": 2,
                "aic_nextn_accept_rates": [1.0, 1.0]}}}
    r = simmodel.run(scenario_from_dict(data, base_dir=str(tmp_path),
                                        source="micro")).requests.iloc[0]
    def d64(active):                            # the decode term on this 64-token pool
        return div_ns(duration_ns(decode_poly_ms(active, 64)), 1.0) / 1e6
    assert (r.terminal_status, r.output_length, r.admission_count) == ("completed", 4, 1)
    assert r.e2e_latency_ms == pytest.approx(P(61) + d64(61) + d64(64), abs=1e-9)
