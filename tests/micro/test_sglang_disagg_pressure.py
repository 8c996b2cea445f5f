"""SGLang disaggregated: decode-side slot accounting under pressure (spec section 6).

Every expected value below is derived by hand from the rules; the derivations are in
each test's comments.  Common setup: 1 prefill + 1 decode worker, backend sglang (page
size 1, so slots = tokens), fixed timing (a prefill pass costs 10 ms, a decode pass
1 ms), zero-time KV transfers (an activation happens when the prefill pass ends, applied
at the decode worker's boundary at that instant), Mooncake rows of 512-token hash
blocks.

Rules exercised (measured on the reference, ai-dynamo-runtime 1.6.1):

* destination first: a request's prompt slots are reserved on the decode worker when
  it arrives (reusing the prompt prefix cached there), and only then is its prefill
  submitted; a reservation that arrives during a decode pass is tried at its end;
* at activation the transferred prompt joins the decode worker's radix tree: a later
  reservation can reuse it, and pages it duplicates (a prompt cached there since this
  request was reserved) go back to the pool at once;
* the decode worker tries one queued reservation per call into it -- a pass end, an
  activation, a new reservation -- so a pass end tries one plus one per destination
  activated at that boundary.  A reservation that did not fit is retried only when
  slots are freed (a completion, a retraction, a duplicate prompt as above), at the
  budget of the boundary where that happens; what is left waits for later calls, and
  an idle worker's leftovers wait for its next activation or reservation.
"""
from __future__ import annotations

import json

import simmodel

ENGINE = "backend: sglang, timing_model: {type: fixed, prefill_ms: 10, decode_ms: 1}"


def run(tmp_path, rows, *, decode_blocks, prefill_blocks=20000):
    t = tmp_path / "t.jsonl"
    t.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = tmp_path / "s.yaml"
    p.write_text(
        f"workload: {{trace: {t.name}, format: mooncake, trace_block_size: 512}}\n"
        "cluster:\n"
        f"  prefill: {{workers: 1, engine: {{{ENGINE}, num_gpu_blocks: {prefill_blocks}}}}}\n"
        f"  decode: {{workers: 1, engine: {{{ENGINE}, num_gpu_blocks: {decode_blocks}}}}}\n")
    res = simmodel.run(simmodel.load_scenario(str(p)))
    return res.requests.set_index("session_id")


def row(ts, isl, osl, hashes):
    assert len(hashes) == -(-isl // 512)
    return {"timestamp": ts, "input_length": isl, "output_length": osl, "hash_ids": hashes}


def check(r, name, *, reserved, ttft, e2e, activated=None):
    q = r.loc[name]
    assert q.terminal_status == "completed", name
    assert q.destination_reserved_ms == reserved, (name, q.destination_reserved_ms)
    if activated is not None:
        assert q.destination_activated_ms == activated, (name, q.destination_activated_ms)
    assert abs(q.ttft_ms - ttft) < 1e-9, (name, q.ttft_ms)
    assert abs(q.e2e_latency_ms - e2e) < 1e-9, (name, q.e2e_latency_ms)


def test_a_later_reservation_reuses_a_running_requests_prompt(tmp_path):
    # Decode pool 1100.  Y (512 tokens, block 1, 100 out) arrives at 0: reserved at 0
    # (512 slots), prefilled 0-10, activated at 10 -- its prompt joins the decode tree --
    # tokens at 11, 12, ..., 110 (TTFT 11, E2E 110).
    # X (the same 512 tokens, 100 out) arrives at 20.5, mid-pass: tried at the pass end
    # 21 and reserved there reusing Y's cached prompt (0 new slots).  Prefill 21-31,
    # activated at 31 (the decode pass end of that instant), tokens 32..131:
    # TTFT 32 - 20.5 = 11.5, E2E 131 - 20.5 = 110.5.
    # Z (512 other tokens, 5 out) arrives at 25.5: tried at 26, where Y holds 512 + 16
    # slots (a slot per decode step 10-11 ... 25-26) and X none: 1100 - 528 = 572 >= 512,
    # reserved at 26.  The prefill worker is busy with X until 31: prefill 31-41,
    # activated at 41, tokens 42..46: TTFT 42 - 25.5 = 16.5, E2E 46 - 25.5 = 20.5.
    # (Peak: at 46, 512 + 36 (Y) + 15 (X) + 512 + 5 (Z) = 1080 <= 1100: no retraction.
    # Without the prompt in the tree X would hold 512 slots of its own, Z would wait for
    # Y's completion and X would be retracted.)
    r = run(tmp_path, [row(0, 512, 100, [1]), row(20.5, 512, 100, [1]),
                       row(25.5, 512, 5, [3])], decode_blocks=1100)
    check(r, "request_1", reserved=0.0, ttft=11.0, e2e=110.0)
    check(r, "request_2", reserved=21.0, activated=31.0, ttft=11.5, e2e=110.5)
    check(r, "request_3", reserved=26.0, activated=41.0, ttft=16.5, e2e=20.5)
    assert (r.readmission_count == 0).all()


def test_an_activated_duplicate_prompt_frees_slots_for_a_waiting_reservation(tmp_path):
    # Decode pool 1500.  A (512 tokens, block 1, 2 out) and B (the same prompt, 100 out)
    # arrive at 0 and are both reserved at once (the decode tree is still empty, so
    # 1024 slots; 476 free), prefilled together 0-10.
    # C (the same prompt, 100 out) arrives at 5: 512 > 476, it waits.
    # At 10 both are activated on the idle decode worker: A's prompt joins the tree, B's
    # duplicates it, so B's 512 slots return to the pool (988 free): C is retried by that
    # activation and reserved at 10 reusing the cached prompt.  Its prefill joins the
    # prefill batch formed at that instant: 10-20, activated at 20, tokens 21..120:
    # TTFT 21 - 5 = 16, E2E 120 - 5 = 115.
    # A: tokens at 11, 12 (E2E 12).  B: tokens 11..110 (E2E 110).
    # D (900 other tokens, 5 out) arrives at 13.5: tried at the pass end 14 with
    # 1500 - 512 (shared prompt) - 4 (B's slots) = 984 >= 900 obtainable (A's two token
    # slots are cached, evictable): reserved at 14.  Prefill worker busy with C until 20:
    # prefill 20-30, activated at 30, tokens 31..35: TTFT 17.5, E2E 21.5.
    # (Without the duplicate's slots coming back, C would wait for A's completion at 12
    # and D for B's at 110.)
    r = run(tmp_path, [row(0, 512, 2, [1]), row(0, 512, 100, [1]), row(5, 512, 100, [1]),
                       row(13.5, 900, 5, [7, 8])], decode_blocks=1500)
    check(r, "request_1", reserved=0.0, ttft=11.0, e2e=12.0)
    check(r, "request_2", reserved=0.0, ttft=11.0, e2e=110.0)
    check(r, "request_3", reserved=10.0, activated=20.0, ttft=16.0, e2e=115.0)
    check(r, "request_4", reserved=14.0, activated=30.0, ttft=17.5, e2e=21.5)


def test_freed_slots_serve_one_waiting_reservation_per_call(tmp_path):
    # Decode pool 2000.  A (1500 tokens, 1 out) is reserved at 0, prefilled 0-10,
    # activated at 10, and its only token ends the decode pass 10-11 (E2E 11).
    # B (1000 tokens, 5 out) arrives at 0.2 on the idle decode worker: 1000 > 500 free,
    # it waits; C (10 tokens, 5 out, 0.4) queues behind it.
    # At 11 A completes: its 1501 slots are cached (evictable) and that pass end tries
    # one reservation: B, reserved at 11.  C fits but the worker now has nothing to run,
    # so it waits for the next call into it.  B: prefill 11-21, activated at 21 on the
    # idle decode worker -- that activation is the call: C reserved at 21, its prefill in
    # the prefill batch formed at that instant (21-31).  B's tokens: 22..26 (TTFT 21.8,
    # E2E 25.8).  C: activated at 31, tokens 32..36: TTFT 31.6, E2E 35.6.
    r = run(tmp_path, [row(0, 1500, 1, [1, 2, 3]), row(0.2, 1000, 5, [5, 6]),
                       row(0.4, 10, 5, [9])], decode_blocks=2000)
    check(r, "request_1", reserved=0.0, ttft=11.0, e2e=11.0)
    check(r, "request_2", reserved=11.0, activated=21.0, ttft=21.8, e2e=25.8)
    check(r, "request_3", reserved=21.0, activated=31.0, ttft=31.6, e2e=35.6)


def test_a_completion_and_an_activation_at_one_pass_end_serve_two(tmp_path):
    # Decode pool 2000.  K (1000 tokens, 10 out): reserved at 0, prefilled 0-10,
    # activated at 10, tokens 11..20 (E2E 20).  R (700 tokens, 20 out) arrives at 1:
    # reserved at 1 (300 free left), prefilled 10-20 (the prefill worker was busy).
    # P1 (400 tokens, 5 out, at 2): 400 > 300, it waits; P2 (100, at 3) and P3 (100, at
    # 4) queue behind it.
    # Pass end 20: K completes (its 1010 slots become evictable) and R is activated
    # there: budget 1 + 1 = 2, so P1 and P2 are reserved at 20; P3 at the next pass end,
    # 21.  R: tokens 21..40 (TTFT 20, E2E 39).  P1 and P2: prefilled together 20-30,
    # activated at 30, tokens 31..35 (P1: TTFT 29, E2E 33; P2: 28, 32).  P3: the prefill
    # worker is busy until 30: prefill 30-40, activated at 40, tokens 41..45 (TTFT 37,
    # E2E 41).
    r = run(tmp_path, [row(0, 1000, 10, [1, 2]), row(1, 700, 20, [5, 6]),
                       row(2, 400, 5, [7]), row(3, 100, 5, [8]), row(4, 100, 5, [9])],
            decode_blocks=2000)
    check(r, "request_1", reserved=0.0, ttft=11.0, e2e=20.0)
    check(r, "request_2", reserved=1.0, activated=20.0, ttft=20.0, e2e=39.0)
    check(r, "request_3", reserved=20.0, activated=30.0, ttft=29.0, e2e=33.0)
    check(r, "request_4", reserved=20.0, activated=30.0, ttft=28.0, e2e=32.0)
    check(r, "request_5", reserved=21.0, activated=40.0, ttft=37.0, e2e=41.0)


def test_a_decode_retraction_frees_slots_for_a_waiting_reservation(tmp_path):
    # Decode pool 1100.  A (500 tokens, 200 out) is reserved at 0 and B (500 other
    # tokens, 200 out) at 0.1 (100 slots left); C (300 tokens, 5 out, at 0.2) waits.
    # Prefills: A 0-10, B 10-20; activations at 10 and 20.  Each decode step takes a slot
    # per running request: 10 steps of A alone (90 left at 20), then 2 per step, so the
    # step formed at 20 + j finds 90 - 2j: at 65 none.  B, with fewer tokens (45 against
    # A's 55), is retracted there; its 545 tokens are cached (evictable), which frees
    # slots like a completion: C is retried at the end of that pass, 66, and reserved.
    # C: prefill 66-76, activated at 76, tokens 77..81: TTFT 76.8, E2E 80.8.  A is not
    # affected: tokens 11..210.  (Before, C waited for A's completion at 210.)
    r = run(tmp_path, [row(0, 500, 200, [1]), row(0.1, 500, 200, [2]), row(0.2, 300, 5, [3])],
            decode_blocks=1100)
    check(r, "request_1", reserved=0.0, ttft=11.0, e2e=210.0)
    check(r, "request_3", reserved=66.0, activated=76.0, ttft=76.8, e2e=80.8)
    assert r.loc["request_2"].readmission_count == 1
    assert r.loc["request_2"].first_token_ms == 21.0
