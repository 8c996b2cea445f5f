"""Unit tier: the SGLang radix prefix cache (``simmodel.engine.radix_cache``), pure.

Sequences are lists of segments: ``(token, -1, count)`` is ``count`` copies of ``token``;
``(key, base, count)`` with ``base >= 0`` is ``count`` distinct tokens (generated ones).
Every expected value follows from the module's rules (longest page-aligned prefix, LRU
leaves trimmed token by token, insert refreshes only what it passes through entirely);
``check()`` verifies the slot accounting after each scenario.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.engine.radix_cache import REMOVED, STORED, RadixCache
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Prompt


def run(tok: int, n: int):
    return (tok, -1, n)


def cache_with(kv: RadixCache, segs: list, length: int):
    """Compute ``length`` tokens of ``segs`` (in private pages) and insert them; the
    slots that did not join the tree (duplicates, a partial last page) go back."""
    page = kv.page
    slots = -(-length // page) * page
    assert kv.alloc(slots)
    already, node = kv.insert(segs, length)
    kv.free_private(slots - (length - length % page - already))
    return already, node


def test_match_finds_the_longest_prefix_across_runs_and_caps_it():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 100), run(2, 50)], 150)
    assert kv.match([run(1, 100), run(3, 10)], 109)[0] == 100
    assert kv.match([run(1, 60), run(1, 40), run(2, 80)], 179)[0] == 150   # runs split anywhere
    assert kv.match([run(1, 100), run(2, 50)], 149)[0] == 149          # capped (len - 1)
    assert kv.match([run(2, 10)], 9)[0] == 0
    kv.check()


def test_insert_reports_what_was_already_cached_and_shares_it():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 100)], 100)
    already, _ = cache_with(kv, [run(1, 100), run(4, 30)], 130)
    assert already == 100
    assert (kv.free_tokens, kv.evictable, kv.private) == (1000 - 130, 130, 0)
    kv.check()


def test_generated_tokens_of_different_requests_never_match():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 10), (-1, 0, 20)], 30)        # request 0: prompt + 20 outputs
    assert kv.match([run(1, 10), (-2, 0, 20)], 29)[0] == 10
    assert kv.match([run(1, 10), (-1, 0, 25)], 34)[0] == 30
    assert kv.match([run(1, 10), (-1, 5, 20)], 29)[0] == 10  # same request, other positions
    kv.check()


def test_pages_only_whole_pages_are_cached_and_matched():
    kv = RadixCache(100, page_size=16)                     # 1,600 slots
    cache_with(kv, [run(1, 40)], 40)                       # 2 pages cached, 8 tokens freed
    assert kv.evictable == 32 and kv.free_tokens == 1600 - 32
    assert kv.match([run(1, 8), run(1, 40)], 47)[0] == 32  # page keys ignore run splits
    assert kv.match([run(1, 30)], 29)[0] == 16             # limit rounded down to a page
    kv.check()


def test_eviction_trims_the_least_recently_used_leaf_token_by_token():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 100)], 100)                     # older
    cache_with(kv, [run(2, 100)], 100)                     # newer
    assert kv.evict(30) == 30
    assert kv.match([run(1, 100)], 100)[0] == 70           # the older lost its tail only
    assert kv.match([run(2, 100)], 100)[0] == 100
    assert kv.evict(80) == 80                              # rest of the older, then 10 more
    assert kv.match([run(1, 100)], 100)[0] == 0
    assert kv.match([run(2, 100)], 100)[0] == 90
    kv.check()


def test_a_parent_competes_once_its_children_are_gone():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 50), run(2, 50)], 100)          # t1: [0,100)
    cache_with(kv, [run(9, 100)], 100)                      # t2
    cache_with(kv, [run(1, 50), run(3, 50)], 100)           # splits [0,100) at 50; the head
    # [0,50) keeps t1 (only partly covered); the run-3 tail [50,100) is new (t3)
    assert kv.evict(50) == 50                               # the run-2 tail (t1)
    assert kv.evict(100) == 100                             # run 9 (t2): [0,50) is older but
    assert kv.match([run(1, 50), run(3, 50)], 100)[0] == 100   # still has a child
    assert kv.evict(60) == 60                               # the run-3 tail, then [0,50)
    assert kv.match([run(1, 50)], 50)[0] == 40
    kv.check()


def test_inserting_through_a_node_refreshes_it_a_lookup_does_not():
    kv = RadixCache(1000)
    cache_with(kv, [run(1, 100)], 100)                      # t1
    cache_with(kv, [run(2, 100)], 100)                      # t2
    kv.match([run(1, 100)], 100)                            # lookup: no refresh
    assert kv.evict(10) == 10
    assert kv.match([run(1, 100)], 100)[0] == 90
    cache_with(kv, [run(1, 90), run(5, 10)], 100)           # passes through [0,90): refresh
    assert kv.evict(10) == 10
    assert kv.match([run(2, 100)], 100)[0] == 90
    kv.check()


def test_locked_prefixes_are_not_evicted_and_allocation_can_fail():
    kv = RadixCache(300)
    _, node = cache_with(kv, [run(1, 200)], 200)
    kv.lock(node)
    assert (kv.evictable, kv.protected) == (0, 200)
    assert not kv.alloc(101)                                # 100 free, nothing evictable
    assert kv.free_tokens == 100                                   # unchanged
    kv.unlock(node)
    assert kv.alloc(150)                                    # evicts 50 of the prefix
    assert kv.match([run(1, 200)], 200)[0] == 150
    kv.check()


def test_events_name_pages_by_the_request_block_hashes():
    seq = TokenSequence(Prompt((7, 8), 32, 64), 16, uid=0)
    seq.ensure(4)
    kv = RadixCache(100, page_size=16, record_events=True)
    assert kv.alloc(64)
    kv.insert([run(7, 32), run(8, 32)], 64, seq)
    assert kv.drain_events() == [(STORED, h) for h in seq.hashes[:4]]
    kv.evict(20)                                            # rounded up to 2 pages
    assert kv.drain_events() == [(REMOVED, seq.hashes[2]), (REMOVED, seq.hashes[3])]
    kv.check()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(1, 3),
                          st.booleans()), min_size=1, max_size=25),
       st.sampled_from([1, 4]))
def test_random_operations_keep_every_slot_accounted_for(ops, page):
    """Insert / lock / unlock / evict in random order: the counters always add up to the
    pool and agree with the tree (``check``)."""
    kv = RadixCache(64, page_size=page)
    held = []
    for a, b, k, hold in ops:
        segs = [run(a, 8 * b), run(10 + k, 4 * k)]
        n = 8 * b + 4 * k
        hit, node = kv.match(segs, n)
        kv.lock(node)
        need = n - hit
        if kv.alloc(need):
            already, end = kv.insert(segs, n)
            # the new cached part left the private slots; the rest (duplicates of what
            # was cached, a partial last page) goes back
            kv.free_private(need - (n - n % page - already))
            kv.lock(end)
            kv.unlock(node)
            node = end
        if hold:
            held.append(node)
        else:
            kv.unlock(node)
        if len(held) > 2:
            kv.unlock(held.pop(0))
        kv.check()
        assert 0 <= kv.free_tokens <= kv.capacity
