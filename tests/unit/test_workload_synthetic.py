"""Unit tier: the synthetic workload generator (reference §7.5)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.config import SyntheticConfig, WorkloadConfig
from simmodel.rng import Streams
from simmodel.workload import Prompt, build_workload, generate_synthetic
from simmodel.workload.synthetic import round_half_away, shared_prefix_blocks


def gen(bs=64, seed=0, **kw):
    kw.setdefault("requests", 3)
    kw.setdefault("input_tokens", 100)
    kw.setdefault("output_tokens", 7)
    if "request_rate" not in kw:
        kw.setdefault("arrival_interval_ms", 7)
    return generate_synthetic(SyntheticConfig(**kw), engine_block_size=bs, streams=Streams(seed))


def first_turns(w):
    return [s.turns[0] for s in w.sessions]


def test_requests_are_one_turn_sessions_with_fresh_blocks():
    # isl 100, bs 64 -> ceil(100/64) = 2 blocks per request, ids from one counter
    w = gen()
    assert [s.session_id for s in w.sessions] == ["request_1", "request_2", "request_3"]
    assert all(len(s.turns) == 1 for s in w.sessions)
    ts = first_turns(w)
    assert [t.prompt for t in ts] == [Prompt((0, 1), 64, 100), Prompt((2, 3), 64, 100),
                                      Prompt((4, 5), 64, 100)]
    assert all(t.turn_index == 0 and t.output_length == 7 and t.session_id == s.session_id
               and t.delay_ms is None and t.output_token_ids is None
               for t, s in zip(ts, w.sessions))
    assert w.num_requests == 3


def test_exact_multiple_of_block_size():
    # isl 128, bs 64 -> exactly 2 blocks; isl 129 -> 3
    assert len(gen(input_tokens=128).sessions[0].turns[0].prompt.ids) == 2
    assert len(gen(input_tokens=129).sessions[0].turns[0].prompt.ids) == 3


def test_interval_arrivals():
    # arrival i = i * 7 ms, the first at 0
    assert [t.arrival_ms for t in first_turns(gen(requests=4))] == [0.0, 7.0, 14.0, 21.0]
    assert [t.arrival_ms for t in first_turns(gen(arrival_interval_ms=0))] == [0.0, 0.0, 0.0]
    assert all(type(t.arrival_ms) is float for t in first_turns(gen()))


def test_round_half_away_from_zero():
    # Rust f64::round, not Python's banker's rounding (round(2.5) == 2)
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, 4.4, 4.8, 0.0)] == [1, 2, 3, 4, 5, 0]
    assert round_half_away(-2.5) == -3
    assert round_half_away(0.49999999999999994) == 0   # floor(x + 0.5) would give 1


def test_shared_prefix_block_count():
    # isl 1000, bs 64, r 0.3: ceil(1000/64) = 16 blocks, round(4.8) = 5 shared = 320 tokens
    assert shared_prefix_blocks(1000, 64, 0.3) == 5
    # isl 640, bs 64, r 0.25: 10 blocks, 2.5 rounds to 3 (banker's rounding would say 2)
    assert shared_prefix_blocks(640, 64, 0.25) == 3


def test_shared_prefix_groups():
    w = gen(requests=50, input_tokens=1000, shared_prefix_ratio=0.3, num_prefix_groups=2)
    prompts = [t.prompt for t in first_turns(w)]
    assert all(len(p.ids) == 16 and p.run_len == 64 and p.length == 1000 for p in prompts)
    heads = [p.ids[:5] for p in prompts]
    # group j owns ids 5j .. 5j+4; both groups are used (all 50 in one group: p = 2^-49)
    assert set(heads) == {(0, 1, 2, 3, 4), (5, 6, 7, 8, 9)}
    # the 11 other blocks of each request are fresh: 50 x 11 distinct ids, none a group id
    tails = [i for p in prompts for i in p.ids[5:]]
    assert len(set(tails)) == 50 * 11 and min(tails) == 10
    # two members of one group share exactly 5 blocks = 320 tokens
    a, b = [p for p in prompts if p.ids[0] == 0][:2]
    shared = next(k for k in range(16) if a.ids[k] != b.ids[k])
    assert shared * 64 == 320
    assert w.meta["shared_prefix_blocks"] == 5


def test_group_choice_is_seeded_by_prefix_groups_stream():
    kw = dict(requests=40, input_tokens=1000, shared_prefix_ratio=0.3, num_prefix_groups=4)

    def heads(w):
        return [t.prompt.ids[0] for t in first_turns(w)]

    assert heads(gen(seed=1, **kw)) == heads(gen(seed=1, **kw))
    assert heads(gen(seed=1, **kw)) != heads(gen(seed=2, **kw))
    expected = Streams(1)["prefix_groups"].integers(0, 4, size=40)
    assert heads(gen(seed=1, **kw)) == (expected * 5).tolist()


@pytest.mark.parametrize("ratio, groups", [(0.3, 0), (0.0, 3)])
def test_no_sharing_without_both_ratio_and_groups(ratio, groups):
    w = gen(requests=5, input_tokens=1000, shared_prefix_ratio=ratio, num_prefix_groups=groups)
    ids = [i for t in first_turns(w) for i in t.prompt.ids]
    assert ids == list(range(5 * 16))


def test_poisson_arrivals_deterministic_per_seed():
    a = [t.arrival_ms for t in first_turns(gen(requests=100, request_rate=10.0, seed=42))]
    b = [t.arrival_ms for t in first_turns(gen(requests=100, request_rate=10.0, seed=42))]
    c = [t.arrival_ms for t in first_turns(gen(requests=100, request_rate=10.0, seed=43))]
    assert a == b and a != c
    assert a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:]))
    # exactly: 0, then the running sum of 99 exponential gaps of mean 1000/10 = 100 ms
    gaps = Streams(42)["arrivals"].exponential(100.0, size=99)
    assert np.allclose(a, np.concatenate(([0.0], np.cumsum(gaps))), rtol=0, atol=1e-9)


def test_poisson_mean_gap():
    # rate 50 req/s -> mean gap 20 ms; over 19,999 gaps the standard error is
    # 20 / sqrt(19999) = 0.14 ms, so 3 % (0.6 ms) is more than 4 standard errors.
    w = gen(requests=20_000, request_rate=50.0, seed=7)
    arrivals = np.array([t.arrival_ms for t in first_turns(w)])
    gaps = np.diff(arrivals)
    assert gaps.mean() == pytest.approx(20.0, rel=0.03)
    assert gaps.std() == pytest.approx(20.0, rel=0.05)    # exponential: std == mean
    assert w.num_requests == 20_000


def test_arrivals_do_not_depend_on_prefix_groups():
    # streams are independent: drawing group choices must not shift the arrival gaps
    plain = gen(requests=30, request_rate=5.0, seed=3)
    shared = gen(requests=30, request_rate=5.0, seed=3, input_tokens=1000,
                 shared_prefix_ratio=0.5, num_prefix_groups=3)
    assert ([t.arrival_ms for t in first_turns(plain)]
            == [t.arrival_ms for t in first_turns(shared)])


def test_single_poisson_request_arrives_at_zero():
    assert [t.arrival_ms for t in first_turns(gen(requests=1, request_rate=3.0))] == [0.0]


@settings(max_examples=60, deadline=None)
@given(isl=st.integers(1, 700), bs=st.integers(1, 80), ratio=st.floats(0, 1),
       groups=st.integers(0, 4), n=st.integers(1, 12), seed=st.integers(0, 2**32))
def test_prompt_shape_invariants(isl, bs, ratio, groups, n, seed):
    w = gen(bs=bs, seed=seed, requests=n, input_tokens=isl, shared_prefix_ratio=ratio,
            num_prefix_groups=groups)
    n_blocks = -(-isl // bs)
    k = shared_prefix_blocks(isl, bs, ratio) if ratio > 0 and groups > 0 else 0
    prompts = [t.prompt for t in first_turns(w)]
    assert all(len(p.ids) == n_blocks and p.length == isl and p.run_len == bs for p in prompts)
    # shared heads come from at most `groups` distinct tuples; tails never repeat
    assert len({p.ids[:k] for p in prompts}) <= max(groups, 1)
    tails = [i for p in prompts for i in p.ids[k:]]
    assert len(set(tails)) == len(tails)
    assert not set(tails) & {i for p in prompts for i in p.ids[:k]}


def test_bad_engine_block_size():
    with pytest.raises(ValueError, match="engine_block_size"):
        gen(bs=0)


def test_build_workload_dispatches_to_synthetic():
    # arrival_speedup_ratio does not apply to synthetic arrivals
    syn = SyntheticConfig(requests=2, input_tokens=50, output_tokens=5, arrival_interval_ms=10)
    cfg = WorkloadConfig(synthetic=syn, arrival_speedup_ratio=4)
    w = build_workload(cfg, engine_block_size=32, streams=Streams(0))
    assert [t.arrival_ms for t in first_turns(w)] == [0.0, 10.0]
    assert [t.prompt for t in first_turns(w)] == [Prompt((0, 1), 32, 50), Prompt((2, 3), 32, 50)]
