"""Unit tier: token sequences and their chained block hashes (reference §4, §7.1).

Only equality semantics matter: equal token prefixes must give equal hash chains and any
difference must break the chain from the first differing block on.
"""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.engine.tokens import TokenSequence
from simmodel.workload import read_mooncake
from simmodel.workload.model import Prompt


def seq(ids, run_len=512, length=None, bs=64, uid=0, output_ids=None,
        hashed=True) -> TokenSequence:
    """A sequence with its full prompt blocks hashed (``hashed``), as the engine asks."""
    ids = tuple(ids)
    if length is None:
        length = len(ids) * run_len
    s = TokenSequence(Prompt(ids, run_len, length), bs, uid, output_ids)
    if hashed:
        s.ensure(length // bs)
    return s


def tokens_of(prompt: Prompt) -> list[int]:
    return [prompt.ids[i // prompt.run_len] for i in range(prompt.length)]


def common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_hashes_are_computed_on_demand_for_full_blocks_only():
    s = seq([0, 1], length=1000, hashed=False)
    assert s.hashes == []                                  # nothing hashed at creation
    assert len(s.ensure(1000 // 64)) == 1000 // 64
    assert len(seq([0, 1], length=1024).ensure(16)) == 16


def test_equal_prefixes_give_equal_chains():
    a = seq([0, 1, 2])
    b = seq([0, 1, 3])
    assert a.hashes[:16] == b.hashes[:16]                 # two shared trace blocks
    assert all(x != y for x, y in zip(a.hashes[16:], b.hashes[16:]))
    assert seq([0, 1, 2]).hashes == a.hashes              # deterministic


def test_a_different_first_block_breaks_the_whole_chain():
    a = seq([0, 1, 2])
    b = seq([9, 1, 2])                                    # same later content
    assert not set(a.hashes) & set(b.hashes)


def test_trace_blocks_of_512_are_rehashed_at_64():
    s = seq([0, 1], length=1000)
    assert len(s.hashes) == 15
    assert len(set(s.hashes)) == 15                       # chained: all distinct
    # same content, other engine block size: 1000 // 16 blocks
    assert len(seq([0, 1], length=1000, bs=16).hashes) == 62


def test_a_shared_first_trace_block_gives_eight_equal_engine_hashes(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"timestamp": 0, "hash_ids": [11, 12], "output_length": 1},
            {"timestamp": 0, "hash_ids": [11, 13], "output_length": 1}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = read_mooncake(str(path))
    a, b = (TokenSequence(s.turns[0].prompt, 64, i) for i, s in enumerate(w.sessions))
    a.ensure(16)
    b.ensure(16)
    assert len(a.hashes) == len(b.hashes) == 16
    assert a.hashes[:8] == b.hashes[:8]
    assert a.hashes[8] != b.hashes[8]


def test_run_length_not_a_multiple_of_the_block_size():
    # runs of 100 tokens, blocks of 64: tokens 0..199 are equal, so blocks 0..2 (0..191)
    a = seq([0, 1, 2], run_len=100)
    b = seq([0, 1, 3], run_len=100)
    assert len(a.hashes) == 300 // 64 == 4
    assert a.hashes[:3] == b.hashes[:3]
    assert a.hashes[3] != b.hashes[3]                     # block 3 = tokens 192..255


def test_equal_tokens_give_equal_hashes_whatever_the_run_layout():
    # 128 x token 3 then 128 x token 4, described three ways (fast and slow paths)
    a = seq([3, 4], run_len=128)
    b = seq([3, 3, 3, 3, 4, 4, 4, 4], run_len=32)
    c = seq([3] * 8 + [4] * 8, run_len=16, bs=64)
    assert a.hashes == b.hashes == c.hashes
    d = seq([3, 3, 4], run_len=100, length=256)           # 200 x 3: differs from block 2
    assert d.hashes[:2] == a.hashes[:2] and d.hashes[2:] != a.hashes[2:]


def test_truncated_last_trace_block_shares_up_to_the_shorter_length():
    long = seq([0, 1], length=1024)
    short = seq([0, 1], length=700)
    assert short.hashes == long.hashes[:700 // 64]


def test_ensure_extends_lazily_and_consistently():
    a = seq([0, 1], length=1000, uid=5)
    a.ensure(17)
    b = seq([0, 1], length=1000, uid=5)
    b.ensure(16)
    b.ensure(17)
    assert a.hashes == b.hashes and len(a.hashes) == 17
    assert a.ensure(3) is a.hashes and len(a.hashes) == 17   # never shrinks


def test_output_blocks_differ_between_requests():
    # same prompt, 1000 tokens: block 15 holds prompt 960..999 + outputs 0..23
    a = seq([0, 1], length=1000, uid=1)
    b = seq([0, 1], length=1000, uid=2)
    a.ensure(18)
    b.ensure(18)
    assert a.hashes[:15] == b.hashes[:15]
    assert all(x != y for x, y in zip(a.hashes[15:], b.hashes[15:]))
    # a block-aligned prompt: the first output block is pure output, still per request
    c = seq([0], length=512, uid=1)
    d = seq([0], length=512, uid=2)
    c.ensure(9)
    d.ensure(9)
    assert c.hashes[:8] == d.hashes[:8] and c.hashes[8] != d.hashes[8]


def test_explicit_output_token_ids_make_output_blocks_comparable():
    outs = tuple(range(100, 200))
    a = seq([0, 1], length=1000, uid=1, output_ids=outs)
    b = seq([0, 1], length=1000, uid=2, output_ids=outs)
    c = seq([0, 1], length=1000, uid=3, output_ids=(7,) + outs[1:])
    for s in (a, b, c):
        s.ensure(17)
    assert a.hashes == b.hashes
    assert c.hashes[:15] == a.hashes[:15] and c.hashes[15] != a.hashes[15]


def test_output_tokens_equal_to_prompt_tokens_hash_like_a_prompt():
    # a delta-style continuation: the generated ids equal the next prompt's tokens
    a = seq([0], run_len=64, length=64, uid=1, output_ids=(5,) * 64)
    b = seq([0, 5], run_len=64, length=128)
    a.ensure(2)
    assert a.hashes == b.hashes


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6),
       st.lists(st.integers(0, 3), min_size=1, max_size=6),
       st.sampled_from([16, 32, 48, 64, 100]),
       st.sampled_from([16, 32, 64, 128]),
       st.sampled_from([16, 32, 64]),
       st.integers(0, 15), st.integers(0, 15))
def test_chains_agree_exactly_on_full_blocks_of_the_common_token_prefix(
        ids_a, ids_b, run_a, run_b, bs, cut_a, cut_b):
    # two prompts with possibly different run layouts, truncated by a few tokens
    pa = Prompt(tuple(ids_a), run_a, max(1, len(ids_a) * run_a - cut_a))
    pb = Prompt(tuple(ids_b), run_b, max(1, len(ids_b) * run_b - cut_b))
    a, b = TokenSequence(pa, bs, 0), TokenSequence(pb, bs, 1)
    a.ensure(pa.length // bs)
    b.ensure(pb.length // bs)
    shared = common_prefix(tokens_of(pa), tokens_of(pb)) // bs
    n = min(len(a.hashes), len(b.hashes))
    for i in range(n):
        assert (a.hashes[i] == b.hashes[i]) == (i < shared)
