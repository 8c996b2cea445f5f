"""Paged KV cache of one scheduler (one DP rank): block pool, prefix cache, LRU.

Model (reference §4):

* ``num_blocks`` blocks.  A block is *private* (partial, or full but not yet hashed) or
  *cached*: full and keyed by its sequence hash.  Cached blocks are identified by their
  hash alone, so two sequences that produce the same full block share one block.
* A cached block's reference count is the number of live requests holding it; with
  refcount 0 it is *inactive*: it stays hittable in an LRU list and is evicted from the
  LRU head (oldest release) when the free pool runs dry.
* A request releases its blocks suffix-first, so its leaf blocks become older LRU
  entries than its root blocks and eviction trims prompts from the tail.
* ``active_blocks`` = private blocks + cached blocks with refcount > 0; admission treats
  everything else (free + inactive) as available.
* Events: ``stored`` when a hash is first cached, ``removed`` when the last copy is
  evicted; collected in ``events`` (only when ``record_events``) and drained by the worker
  at pass end.

With prefix caching off every block is private: no lookups, no hashes, no events.
Pure Python, no SimPy.
"""
from __future__ import annotations

from collections import OrderedDict

STORED, REMOVED = 0, 1


class KvCache:
    __slots__ = ("num_blocks", "block_size", "caching", "free", "private", "refs",
                 "inactive", "record_events", "events")

    def __init__(self, num_blocks: int, block_size: int, *, caching: bool = True,
                 record_events: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.free = num_blocks          # unallocated blocks
        self.private = 0                # allocated, not (yet) cached
        self.refs: dict[int, int] = {}  # cached hash -> refcount > 0
        self.inactive: OrderedDict[int, None] = OrderedDict()   # refcount 0, LRU order
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

    def count_inactive(self, hashes) -> int:
        """How many of ``hashes`` sit in the inactive LRU."""
        inactive = self.inactive
        return sum(1 for h in hashes if h in inactive)

    def lookup(self, hashes: list[int], max_blocks: int) -> int:
        """Leading blocks of ``hashes`` resident in the cache (active or inactive)."""
        if not self.caching:
            return 0
        refs, inactive = self.refs, self.inactive
        n = 0
        limit = min(max_blocks, len(hashes))
        while n < limit:
            h = hashes[n]
            if h in refs or h in inactive:
                n += 1
            else:
                break
        return n

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
            inactive = self.inactive
            rec = self.record_events
            for _ in range(rest):
                h, _ = inactive.popitem(last=False)
                if rec:
                    self.events.append((REMOVED, h))
        self.private += n
        return True

    def register(self, h: int) -> None:
        """A private block of the caller became full with hash ``h``: cache it.  If the
        hash is already resident the caller shares that block and its own returns to
        the free pool."""
        refs = self.refs
        if h in refs:
            refs[h] += 1
            self.private -= 1
            self.free += 1
        elif h in self.inactive:
            del self.inactive[h]
            refs[h] = 1
            self.private -= 1
            self.free += 1
        else:
            refs[h] = 1
            self.private -= 1
            if self.record_events:
                self.events.append((STORED, h))

    def register_many(self, hashes) -> None:
        """``register`` for several consecutive blocks (same semantics, in order)."""
        refs, inactive = self.refs, self.inactive
        rec = self.record_events
        for h in hashes:
            if h in refs:
                refs[h] += 1
                self.free += 1
            elif h in inactive:
                del inactive[h]
                refs[h] = 1
                self.free += 1
            else:
                refs[h] = 1
                if rec:
                    self.events.append((STORED, h))
        self.private -= len(hashes)

    def release(self, cached: list[int], n_private: int) -> None:
        """Drop a request's references: private blocks go back to the pool, cached ones
        suffix-first into the LRU when their refcount reaches 0."""
        self.private -= n_private
        self.free += n_private
        refs, inactive = self.refs, self.inactive
        for h in reversed(cached):
            c = refs[h] - 1
            if c:
                refs[h] = c
            else:
                del refs[h]
                inactive[h] = None

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
