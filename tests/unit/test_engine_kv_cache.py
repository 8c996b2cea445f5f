"""Unit tier: the paged KV cache of one rank (reference §4): pool, prefix cache, LRU, events."""
from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from simmodel.engine.kv_cache import REMOVED, STORED, KvCache


def holder(kv: KvCache, hashes: list[int]) -> list:
    """A request that computed ``len(hashes)`` full blocks: allocate, then cache them;
    the copies it holds."""
    assert kv.allocate(len(hashes))
    return [kv.register(h) for h in hashes]


# -- allocation and eviction -------------------------------------------------------------

def test_allocate_takes_free_blocks_first():
    kv = KvCache(4, 64)
    a = holder(kv, [1, 2])
    kv.release(a, 0)                          # 1, 2 inactive, 2 blocks free
    assert kv.allocate(2)
    assert kv.free == 0 and kv.private == 2
    assert kv.lru() == [2, 1]                 # nothing evicted
    kv.check()


def test_allocate_evicts_from_the_lru_head():
    kv = KvCache(4, 64, record_events=True)
    a = holder(kv, [1, 2])
    kv.release(a, 0)                          # LRU: 2 (leaf, oldest), 1
    kv.drain_events()
    assert kv.allocate(3)                     # 2 free + evict 2
    assert kv.lru() == [1]
    assert kv.events == [(REMOVED, 2)]
    assert kv.lookup([1, 2], 2) == 1          # the root survived
    kv.check()


def test_allocation_failure_changes_nothing():
    kv = KvCache(4, 64)
    a = holder(kv, [1, 2])
    kv.release(a, 0)
    assert kv.allocate(1)                     # 1 free left + 2 inactive
    before = (kv.free, kv.private, kv.held(), kv.lru())
    assert not kv.allocate(4)
    assert (kv.free, kv.private, kv.held(), kv.lru()) == before
    assert kv.allocate(0)
    kv.check()


def test_across_requests_the_oldest_release_is_evicted_first():
    kv = KvCache(4, 64)
    a = holder(kv, [10, 11])
    b = holder(kv, [20, 21])
    kv.release(a, 0)                          # a finished first
    kv.release(b, 0)
    assert kv.lru() == [11, 10, 21, 20]
    assert kv.allocate(3)
    assert kv.lru() == [20]


def test_release_is_suffix_first_and_frees_private_blocks():
    kv = KvCache(8, 64)
    cached = holder(kv, [1, 2, 3])
    assert kv.allocate(2)                     # two partial (private) blocks
    assert kv.active_blocks == 5
    kv.release(cached, 2)
    assert kv.lru() == [3, 2, 1]              # leaf oldest, root newest
    assert kv.free == 5 and kv.private == 0 and kv.active_blocks == 0
    assert kv.available == 8
    # eviction trims the prompt from the tail: after 2 evictions the prefix 1 remains
    assert kv.allocate(7)
    assert kv.lookup([1, 2, 3], 3) == 1
    kv.check()


def test_shared_block_stays_active_until_its_last_holder_releases():
    kv = KvCache(4, 64)
    a = holder(kv, [1, 2])
    kv.acquire(1)                             # b hits the first block of a
    b = [1]
    assert kv.held() == {1: 2, 2: 1}
    kv.release(a, 0)
    assert kv.held() == {1: 1} and kv.lru() == [2]
    assert kv.active_blocks == 1
    kv.release(b, 0)
    assert kv.held() == {} and kv.lru() == [2, 1]
    kv.check()


# -- register ------------------------------------------------------------------------------

def test_register_new_hash_caches_the_private_block():
    kv = KvCache(4, 64)
    assert kv.allocate(1)
    kv.register(7)
    assert kv.held() == {7: 1} and kv.private == 0 and kv.free == 3
    kv.check()


def test_register_of_an_active_hash_keeps_the_callers_block_as_a_copy():
    # (the reference, 1.6.1: two requests with the same 4-block prompt hold 4 + 2 blocks,
    # tests/micro/test_kv_block_copies.py)
    kv = KvCache(4, 64)
    holder(kv, [7])
    assert kv.allocate(1)                     # a second request computed the same block
    k = kv.register(7)
    assert k != 7 and kv.held() == {7: 1, k: 1} and kv.copies == {7: [7, k]}
    assert kv.private == 0 and kv.free == 2 and kv.active_blocks == 2
    assert kv.lookup([7], 1) == 1 and kv.hit_keys([7]) == [7]     # the oldest copy
    kv.check()


def test_register_of_an_inactive_hash_leaves_the_cached_copy_in_the_lru():
    kv = KvCache(4, 64)
    kv.release(holder(kv, [7]), 0)
    assert kv.allocate(1)
    k = kv.register(7)
    assert kv.held() == {k: 1} and kv.lru() == [7]
    assert kv.private == 0 and kv.free == 2 and kv.available == 3
    kv.check()


def test_a_hit_takes_the_oldest_resident_copy():
    # (measured on the reference: with an inactive older copy and an active newer one, a
    # hit took the inactive one: its inactive gauge went down by one)
    kv = KvCache(8, 64)
    a = holder(kv, [7])
    kv.release(a, 0)                          # the first copy, inactive
    b = holder(kv, [7])                       # a second copy, held
    assert kv.hit_keys([7]) == [7] and kv.count_inactive(kv.hit_keys([7])) == 1
    kv.acquire(7)
    assert not kv.lru() and kv.held() == {7: 1, b[0]: 1}
    kv.check()


def test_copies_are_evicted_one_by_one_and_removed_with_the_last():
    kv = KvCache(3, 64, record_events=True)
    a = holder(kv, [7])
    b = holder(kv, [7])
    kv.release(a, 0)
    kv.release(b, 0)                          # LRU: 7 (a's), then b's copy
    assert kv.drain_events() == [(STORED, 7)]
    assert kv.allocate(2)                     # 1 free + evicts a's copy: 7 stays resident
    assert kv.events == [] and kv.lookup([7], 1) == 1
    assert kv.hit_keys([7]) == b and kv.copies == {7: b}
    kv.check()
    assert kv.allocate(1)                     # evicts the last copy
    assert kv.events == [(REMOVED, 7)] and kv.lookup([7], 1) == 0 and not kv.copies
    kv.check()


def test_register_many_has_register_semantics():
    def build(many: bool) -> KvCache:
        kv = KvCache(10, 64, record_events=True)
        a = holder(kv, [1, 2, 3])
        kv.release(a[2:], 0)                  # 3 inactive, 1 and 2 active
        assert kv.allocate(4)
        keys = (kv.register_many([1, 3, 4, 5]) if many
                else [kv.register(h) for h in (1, 3, 4, 5)])
        assert keys[2:] == [4, 5] and keys[0][0] == 1 and keys[1][0] == 3
        return kv
    one, many = build(False), build(True)
    for kv in (one, many):
        assert len(kv.held()) == 6 and kv.held()[1] == kv.held()[2] == 1
        assert kv.private == 0 and kv.free == 3 and kv.lru() == [3]
        kv.check()
    assert one.events == many.events == [(STORED, 1), (STORED, 2), (STORED, 3),
                                         (STORED, 4), (STORED, 5)]


# -- lookup ----------------------------------------------------------------------------------

def test_lookup_stops_at_the_first_miss():
    kv = KvCache(8, 64)
    a = holder(kv, [1, 2])
    b = holder(kv, [4])                       # 4 resident, 3 not
    kv.release(b, 0)                          # inactive blocks are hits too
    assert kv.lookup([1, 2, 3, 4], 4) == 2
    assert kv.lookup([4, 1, 2], 3) == 3
    assert kv.lookup([9, 1, 2], 3) == 0
    assert kv.lookup([1, 2], 10) == 2
    assert kv.lookup([1, 2, 4], 1) == 1       # capped by max_blocks
    assert kv.lookup([], 5) == 0
    # a lookup alone takes no references and does not touch the LRU
    assert kv.held() == {1: 1, 2: 1} and kv.lru() == [4]
    del a


def test_acquire_pulls_an_inactive_block_out_of_the_lru():
    kv = KvCache(8, 64)
    kv.release(holder(kv, [1, 2, 3]), 0)
    kv.acquire(3)
    assert kv.held() == {3: 1} and kv.lru() == [2, 1]
    kv.acquire(3)
    assert kv.held() == {3: 2}
    assert kv.count_inactive([1, 2, 3, 9]) == 2
    kv.check()


def test_no_prefix_caching_means_no_hits():
    kv = KvCache(8, 64, caching=False)
    assert kv.lookup([1, 2], 2) == 0


# -- events ----------------------------------------------------------------------------------

def test_events_are_recorded_only_when_asked():
    for record in (False, True):
        kv = KvCache(4, 64, record_events=record)
        a = holder(kv, [1, 2])
        holder(kv, [1])                       # a copy of 1: no second Stored
        kv.release(a, 0)                      # LRU: 2, 1 (a's copy; the other is held)
        assert kv.allocate(3)                 # 1 free + evicts 2 and a's copy of 1
        if record:
            assert kv.drain_events() == [(STORED, 1), (STORED, 2), (REMOVED, 2)]
            assert kv.events == []
        else:
            assert kv.events == [] and kv.drain_events() == []
        kv.check()


def test_release_alone_emits_no_event():
    kv = KvCache(4, 64, record_events=True)
    a = holder(kv, [1, 2])
    kv.drain_events()
    kv.release(a, 0)
    assert kv.events == []


# -- invariants after random operation sequences --------------------------------------------

OPS = st.lists(
    st.one_of(
        # a request: its chain (prefix of one of a few roots), extra private blocks, and
        # how many of its last blocks it computes even if cached (copies, as the capped
        # last block of a fully cached prompt)
        st.tuples(st.just("admit"), st.integers(0, 2), st.integers(1, 6), st.integers(0, 2),
                  st.integers(0, 2)),
        st.tuples(st.just("grow"), st.integers(0, 7), st.integers(1, 3)),
        st.tuples(st.just("release"), st.integers(0, 7)),
    ),
    max_size=40,
)


class EagerCompaction(KvCache):
    min_stale = 0                             # drop stale LRU entries at every chance


def model_evict(lru: list, need: int, free_before: int) -> None:
    """The LRU as a plain list: an allocation of ``need`` evicts from its head what the
    free blocks do not cover."""
    if need > 0:
        del lru[:max(0, need - free_before)]


@settings(max_examples=300, deadline=None)
@given(st.integers(4, 16), OPS, st.booleans(), st.booleans())
def test_random_operations_keep_every_block_accounted_for(num_blocks, ops, record, eager):
    kv = (EagerCompaction if eager else KvCache)(num_blocks, 16, record_events=record)
    live: list[dict] = []                     # a request: {"chain", "cached", "private"}
    stored: set[int] = set()
    lru: list = []                            # the LRU order it must keep, head first
    for op in ops:
        if op[0] == "admit":
            _, root, length, extra_private, recompute = op
            chain = [hash(("chain", root, i)) for i in range(length)]
            hit = kv.lookup(chain, max(length - recompute, 0))
            need = length - hit + extra_private
            # as the scheduler does: the hits must not be counted as evictable
            keys = kv.hit_keys(chain[:hit])
            if need > kv.available - kv.count_inactive(keys):
                assert need > 0
                continue
            for k in keys:
                kv.acquire(k)
                if k in lru:
                    lru.remove(k)             # a hit takes an inactive copy out of the LRU
            model_evict(lru, need, kv.free)
            assert kv.allocate(need)
            keys += kv.register_many(chain[hit:])     # the computed blocks become cached
            live.append({"chain": chain, "cached": keys, "private": extra_private})
        elif op[0] == "grow" and live:
            r = live[op[1] % len(live)]
            if op[2] <= kv.available:
                model_evict(lru, op[2], kv.free)
            if kv.allocate(op[2]):
                r["private"] += op[2]
        elif op[0] == "release" and live:
            r = live.pop(op[1] % len(live))
            kv.release(r["cached"], r["private"])
            still = Counter(h for other in live for h in other["cached"])
            lru += [k for k in reversed(r["cached"]) if not still[k]]   # suffix first
        kv.check()
        assert kv.lru() == lru
        held = Counter(h for r in live for h in r["cached"])
        assert kv.held() == dict(held)
        assert kv.private == sum(r["private"] for r in live)
        assert kv.active_blocks == len(held) + kv.private <= num_blocks
        resident = {k if type(k) is int else k[0] for k in kv.refs}
        assert kv.available == num_blocks - kv.active_blocks
        assert all(h not in kv.lru() for h in held)
        if record:
            for kind, h in kv.drain_events():
                if kind == STORED:
                    assert h not in stored     # Stored once per residency
                    stored.add(h)
                else:
                    assert h in stored
                    stored.discard(h)
            assert stored == resident
