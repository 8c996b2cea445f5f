"""A recomputed block that is already cached is a copy of its own (issue 14, found by
benchmarks/long_runs.py; docs/model.md, "KV cache").

The reference (1.6.1) does not share a block that a request computes when its hash is
already resident: the request keeps its own block.  That is one more active block than a
shared one, which decides whether a later head fits.  Measured on the reference with this
very traces (run through ``benchmarks/vs_dynamo.py``'s reference job, fixed timing):
below, A 10 / 22, B 21 / 33, C 33 / 34 ms (first / last token), where simmodel shared the
block before and gave A 10 / 32, C 32 / 33; and F reusing 128 tokens, not 192.
"""
from __future__ import annotations

import json

import simmodel
from simmodel.config import ClusterConfig, EngineConfig, Scenario, TimingConfig, WorkloadConfig
from simmodel.engine.kv_cache import KvCache


def run(tmp_path, rows, blocks):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    eng = EngineConfig(block_size=64, num_gpu_blocks=blocks,
                       timing_model=TimingConfig(type="fixed", prefill_ms=10.0, decode_ms=1.0))
    sc = Scenario(workload=WorkloadConfig(trace=str(path), format="mooncake",
                                          trace_block_size=64),
                  cluster=ClusterConfig(workers=1, engine=eng))
    return {r.session_id: (r.first_token_ms, r.last_token_ms, r.reused_input_tokens)
            for r in simmodel.run(sc).requests.itertuples()}


def test_a_recomputed_cached_block_is_not_shared(tmp_path):
    # 11 blocks of 64 tokens, trace blocks of 64; fixed timing: 10 ms a pass with prompt
    # work, + 1 ms if a request decodes.
    #  pass 1 [0, 10): A's 256-token prompt, 4 full blocks h1..h4.  A's token 1 at 10.
    #  pass 2 [10, 21): A decodes (block 5); B (same prompt, arrived at 5) hits h1..h3
    #    (capped at 3 blocks so that a token is computed) and computes block 4 itself:
    #    its own copy of h4.  Active: A 5 + B 1 = 6.  B's token 1 at 21.
    #  pass 3 [21, 22): B's first decode needs its 5th block: active 7, so C (arrived at
    #    15, 320 tokens = 5 blocks) does not fit the 4 left and waits.  Decode only: 1 ms.
    #    A's token 3 at 22: A completes, freeing its decode block (h4 stays cached).
    #  pass 4 [22, 33): C admitted (5 <= 11 - 5), prefill + B's decode; B ends at 33.
    #  pass 5 [33, 34): C's decode, its last token.
    # Had B shared A's h4, active would be 6 after pass 3's growth and C would have been
    # admitted at 21 (first token 32, A's last token 32).
    rows = [{"timestamp": 0, "input_length": 256, "output_length": 3, "hash_ids": [1, 2, 3, 4],
             "session_id": "A"},
            {"timestamp": 5, "input_length": 256, "output_length": 3, "hash_ids": [1, 2, 3, 4],
             "session_id": "B"},
            {"timestamp": 15, "input_length": 320, "output_length": 2,
             "hash_ids": [21, 22, 23, 24, 25], "session_id": "C"}]
    assert run(tmp_path, rows, 11) == {"A": (10.0, 22.0, 0), "B": (21.0, 33.0, 192),
                                       "C": (33.0, 34.0, 0)}


def test_the_cached_block_a_copy_duplicates_stays_in_the_lru(tmp_path):
    # 12 blocks; every request has one output token, so it ends with its prefill pass.
    #  D (0-10): 202 tokens, full blocks h31 h32 h33 + a partial one; released suffix
    #    first, LRU: h33 h32 h31.   A (20-30): h1..h4; LRU: h33 h32 h31 h4 h3 h2 h1.
    #  B (40-50): A's prompt, hits h1..h3 and computes its own copy of h4; A's h4 stays
    #    in the LRU.  LRU after B: h33 h32 h31 h4(A) h4(B) h3 h2 h1: 8 blocks, 4 free.
    #  E (60-70): 5 new blocks: the 4 free ones and the LRU head, h33.
    #  F (80-90): D's prompt again finds h31 h32 only: 128 tokens reused.
    # Had B revived A's h4 (and freed its own block), 5 blocks would have been free, h33
    # would have survived and F would have reused 192 tokens.
    rows = [{"timestamp": 0, "input_length": 202, "output_length": 1,
             "hash_ids": [31, 32, 33, 34], "session_id": "D"},
            {"timestamp": 20, "input_length": 256, "output_length": 1,
             "hash_ids": [1, 2, 3, 4], "session_id": "A"},
            {"timestamp": 40, "input_length": 256, "output_length": 1,
             "hash_ids": [1, 2, 3, 4], "session_id": "B"},
            {"timestamp": 60, "input_length": 320, "output_length": 1,
             "hash_ids": [41, 42, 43, 44, 45], "session_id": "E"},
            {"timestamp": 80, "input_length": 202, "output_length": 1,
             "hash_ids": [31, 32, 33, 34], "session_id": "F"}]
    got = run(tmp_path, rows, 12)
    assert got["B"] == (50.0, 50.0, 192)
    assert got["F"] == (90.0, 90.0, 128)


def test_a_later_inactive_copy_of_a_held_hash_is_shadowed():
    # Speculative decoding's admission check (engine/vllm_mtp.py, _inactive_hits; fidelity
    # cases mtp_shadowed_copy and mtp_inactive_plain_copy): an inactive later copy
    # (hash, serial) of a hash another copy of which is held is not counted as inactive;
    # the first, plain-keyed copy always is.  Three requests compute the same block 7.
    kv = KvCache(10, 64)
    keys = []
    for _ in range(3):
        assert kv.allocate(1)
        keys.append(kv.register_many([7])[0])
    plain, first_copy, second_copy = keys
    assert plain == 7 and type(first_copy) is tuple and type(second_copy) is tuple
    kv.release([plain], 0)
    kv.release([first_copy], 0)                 # second_copy still held
    assert kv.count_inactive(keys) == 2
    assert kv.count_shadowed([first_copy]) == 1
    assert kv.count_shadowed([plain]) == 0      # the plain copy is never shadowed
    kv.release([second_copy], 0)                # no copy held any more
    assert kv.count_shadowed(keys) == 0
