"""Paged KV cache of one scheduler (one DP rank): block pool, prefix cache, LRU.

Model (reference §4):

* ``num_blocks`` blocks.  A block is *private* (partial, or full but not yet hashed) or
  *cached*: full and keyed by its sequence hash.  A request that hits a resident hash
  shares its block; but a block a request *computes* stays its own even when its hash is
  already resident (the capped last block of a fully cached prompt, blocks past a hole in
  the prefix, a chunk another request computed meanwhile): the cache then holds several
  *copies* of one hash, each a physical block with its own refcount and LRU entry.  A hit
  takes the oldest resident copy.  (Measured on the reference, 1.6.1, with its KV gauges:
  two requests with the same 4-block prompt hold 4 + 2 blocks, not 4 + 1, and both copies
  of the recomputed block are cached, inactive, once they finish.)  A copy other than the
  first of its hash is keyed ``(hash, serial)``; ``copies`` lists, for each hash with such a
  copy, its resident copies oldest first.
* A cached block's reference count is the number of live requests holding it; with
  refcount 0 it is *inactive*: it stays hittable in an LRU list and is evicted from the
  LRU head (oldest release) when the free pool runs dry.
* A request releases its blocks suffix-first, so its leaf blocks become older LRU
  entries than its root blocks and eviction trims prompts from the tail.
* ``active_blocks`` = private blocks + cached blocks with refcount > 0; admission treats
  everything else (free + inactive) as available.
* Events: ``stored`` when a hash becomes resident, ``removed`` when its last copy is
  evicted; collected in ``events`` (only when ``record_events``) and drained by the worker
  at pass end.

With prefix caching off every block is private: no lookups, no hashes, no events.
Pure Python, no SimPy.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from itertools import compress, repeat
from operator import not_

STORED, REMOVED = 0, 1
_NOT_LAST = (1).__ne__      # a refcount, before a release: another request holds it too
_LESS_ONE = (-1).__add__


class KvCache:
    __slots__ = ("num_blocks", "block_size", "caching", "free", "private", "refs",
                 "inactive", "copies", "_serial", "record_events", "events")

    def __init__(self, num_blocks: int, block_size: int, *, caching: bool = True,
                 record_events: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.free = num_blocks          # unallocated blocks
        self.private = 0                # allocated, not (yet) cached
        self.refs: dict = {}            # cached copy key -> refcount > 0
        self.inactive: OrderedDict = OrderedDict()   # copy keys of refcount 0, LRU order
        self.copies: dict[int, list] = {}   # hash -> its resident copy keys, oldest first
        self._serial = 0                # (only for hashes that have a second copy)
        self.record_events = record_events
        self.events: list[tuple[int, int]] = []

    # -- queries ----------------------------------------------------------------------
    @property
    def active_blocks(self) -> int:
        return self.private + len(self.refs)

    @property
    def inactive_blocks(self) -> int:
        """Cached blocks no request holds (evictable, LRU)."""
        return len(self.inactive)

    @property
    def available(self) -> int:
        """Blocks an allocation can obtain: free plus evictable."""
        return self.free + len(self.inactive)

    def count_inactive(self, keys) -> int:
        """How many of the copies ``keys`` sit in the inactive LRU."""
        inactive = self.inactive
        return sum(1 for h in keys if h in inactive)

    def lookup(self, hashes: list[int], max_blocks: int) -> int:
        """Leading blocks of ``hashes`` resident in the cache (active or inactive)."""
        if not self.caching:
            return 0
        refs, inactive, copies = self.refs, self.inactive, self.copies
        n = 0
        limit = min(max_blocks, len(hashes))
        while n < limit:
            h = hashes[n]
            if h in refs or h in inactive or h in copies:
                n += 1
            else:
                break
        return n

    def hit_keys(self, hashes: list[int]) -> list:
        """The copies a hit on the resident ``hashes`` takes: the oldest of each."""
        copies = self.copies
        if not copies:
            return list(hashes)
        return [copies[h][0] if h in copies else h for h in hashes]

    # -- mutations --------------------------------------------------------------------
    def acquire(self, h: int) -> None:
        """Take a reference on resident cached block ``h`` (a prefix hit)."""
        refs = self.refs
        if h in refs:
            refs[h] += 1
        else:
            del self.inactive[h]
            refs[h] = 1

    def allocate(self, n: int) -> bool:
        """Allocate ``n`` private blocks, evicting LRU blocks if needed; False if the
        pool cannot supply them (nothing is changed then)."""
        if n <= 0:
            return True
        if n > self.free + len(self.inactive):
            return False
        take = min(n, self.free)
        self.free -= take
        rest = n - take
        if rest:
            # the ``rest`` copies at the LRU head leave (popped in C)
            evicted = map(self.inactive.popitem, repeat(False, rest))
            if self.copies or self.record_events:
                self._evict([k for k, _ in evicted])
            else:
                deque(evicted, 0)
        self.private += n
        return True

    def _evict(self, keys: list) -> None:
        """The copies ``keys`` left the cache: update ``copies``, record ``removed``."""
        copies = self.copies
        if copies:
            evicted = self._evicted
            keys = [k if type(k) is not tuple and k not in copies else evicted(k)
                    for k in keys]
        if self.record_events:
            self.events.extend([(REMOVED, h) for h in keys if h is not None])

    def _evicted(self, k):
        """Copy ``k`` left the cache: the hash whose last copy it was, or None."""
        if type(k) is not tuple and k not in self.copies:
            return k
        h = k[0] if type(k) is tuple else k
        keys = self.copies[h]
        keys.remove(k)
        if not keys:
            del self.copies[h]
            return h
        if keys == [h]:
            del self.copies[h]                # back to one copy under the plain key
        return None

    def register(self, h: int):
        """A private block of the caller became full with hash ``h``: cache it, held by
        the caller.  Returns its copy key: ``h``, or a new copy's key if ``h`` is already
        resident (the caller keeps its own block, see the module notes)."""
        return self.register_many([h])[0]

    def register_many(self, hashes: list[int]) -> list:
        """``register`` for several consecutive blocks, in order; returns their copy keys
        (``hashes`` itself when every one was new)."""
        refs, inactive, copies = self.refs, self.inactive, self.copies
        self.private -= len(hashes)
        if (refs.keys().isdisjoint(hashes) and inactive.keys().isdisjoint(hashes)
                and (not copies or copies.keys().isdisjoint(hashes))):
            n0 = len(refs)
            refs.update(zip(hashes, repeat(1)))       # every one new (the usual case)
            if len(refs) - n0 == len(hashes):
                if self.record_events:
                    self.events.extend(zip(repeat(STORED), hashes))
                return hashes
            for h in hashes:                          # a hash repeated within ``hashes``
                refs.pop(h, None)
        return self._register_each(hashes)

    def _register_each(self, hashes: list[int]) -> list:
        refs, inactive, copies = self.refs, self.inactive, self.copies
        rec = self.record_events
        keys = hashes
        for i, h in enumerate(hashes):
            if h in refs or h in inactive or h in copies:
                if keys is hashes:
                    keys = list(hashes)
                keys[i] = self._new_copy(h)
                continue
            refs[h] = 1
            if rec:
                self.events.append((STORED, h))
        return keys

    def _new_copy(self, h: int) -> tuple:
        """A further copy of the resident hash ``h``, held once."""
        self._serial += 1
        k = (h, self._serial)
        self.refs[k] = 1
        keys = self.copies.get(h)
        if keys is None:
            self.copies[h] = [h, k]           # (resident and not listed: the plain key)
        else:
            keys.append(k)
        return k

    def release(self, cached: list[int], n_private: int) -> None:
        """Drop a request's references: private blocks go back to the pool, cached ones
        suffix-first into the LRU when their refcount reaches 0."""
        self.private -= n_private
        self.free += n_private
        if not cached:
            return
        refs, inactive = self.refs, self.inactive
        rev = cached[::-1]
        counts = list(map(refs.pop, rev))         # (one lookup for a last holder)
        if counts.count(1) == len(counts):
            inactive.update(zip(rev, repeat(None)))   # every one was its last holder
            return
        shared = list(map(_NOT_LAST, counts))     # (the loop, in C)
        inactive.update(zip(compress(rev, map(not_, shared)), repeat(None)))
        refs.update(zip(compress(rev, shared), map(_LESS_ONE, compress(counts, shared))))

    def drain_events(self) -> list[tuple[int, int]]:
        ev = self.events
        self.events = []
        return ev

    def check(self) -> None:
        """Invariant check (tests): every block is accounted for exactly once."""
        total = self.free + self.private + len(self.refs) + len(self.inactive)
        assert total == self.num_blocks, (total, self.num_blocks)
        assert self.free >= 0 and self.private >= 0
        assert not (self.refs.keys() & self.inactive.keys())
        resident = self.refs.keys() | self.inactive.keys()
        listed = {k for keys in self.copies.values() for k in keys}
        for h, keys in self.copies.items():
            assert keys and len(set(keys)) == len(keys) and keys != [h], (h, keys)
            assert all(k in resident and (k == h or k[0] == h) for k in keys), (h, keys)
        for k in resident:
            assert k in listed if type(k) is tuple else (k not in self.copies or k in listed)
