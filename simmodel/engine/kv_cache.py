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
* Representation: ``refs`` maps every resident copy key to its refcount, or, for an
  inactive copy, to ``-s``, the serial of the release that made it inactive.  The LRU is
  a queue of releases, ``(-s, keys)`` oldest first, whose entries go stale (and are
  skipped) when the key is taken again or released later; so a release and a hit are one
  dict store per block rather than a move between two dicts.  Stale entries are dropped
  when they outnumber the live ones.
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

from collections import deque
from itertools import compress, repeat
from operator import eq, not_

STORED, REMOVED = 0, 1
_NOT_LAST = (1).__ne__      # a refcount, before a release: another request holds it too
_LESS_ONE = (-1).__add__
_NEGATIVE = (0).__gt__      # a ``refs`` value: the copy is inactive


class KvCache:
    min_stale = 4096                # stale LRU entries tolerated before a compaction, at least
    __slots__ = ("num_blocks", "block_size", "caching", "free", "private", "refs",
                 "n_inactive", "_lru", "_head", "_lru_len", "_release_serial",
                 "copies", "_serial", "record_events", "events")

    def __init__(self, num_blocks: int, block_size: int, *, caching: bool = True,
                 record_events: bool = False):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.free = num_blocks          # unallocated blocks
        self.private = 0                # allocated, not (yet) cached
        self.refs: dict = {}            # cached copy key -> refcount > 0, or -release serial
        self.n_inactive = 0             # copies with a negative ``refs`` value
        self._lru: deque = deque()      # (-serial, keys suffix-first) per release, oldest first
        self._head = 0                  # entries of ``_lru[0]`` already consumed
        self._lru_len = 0               # entries left in ``_lru``, stale ones included
        self._release_serial = 0
        self.copies: dict[int, list] = {}   # hash -> its resident copy keys, oldest first
        self._serial = 0                # (only for hashes that have a second copy)
        self.record_events = record_events
        self.events: list[tuple[int, int]] = []

    # -- queries ----------------------------------------------------------------------
    @property
    def active_blocks(self) -> int:
        return self.private + len(self.refs) - self.n_inactive

    @property
    def inactive_blocks(self) -> int:
        """Cached blocks no request holds (evictable, LRU)."""
        return self.n_inactive

    @property
    def available(self) -> int:
        """Blocks an allocation can obtain: free plus evictable."""
        return self.free + self.n_inactive

    def count_inactive(self, keys) -> int:
        """How many of the copies ``keys`` are inactive (in the LRU)."""
        return sum(map(_NEGATIVE, map(self.refs.get, keys, repeat(1))))

    def count_shadowed(self, keys) -> int:
        """How many of the copies ``keys`` are inactive later copies ``(hash, serial)``
        of a hash another copy of which is held (speculative decoding's admission)."""
        refs, copies = self.refs, self.copies
        return sum(1 for k in keys if type(k) is tuple and refs[k] < 0
                   and any(refs[c] > 0 for c in copies[k[0]]))

    def held(self) -> dict:
        """Copy key -> refcount of the copies live requests hold (tests, diagnostics)."""
        return {k: c for k, c in self.refs.items() if c > 0}

    def lru(self) -> list:
        """The inactive copies in eviction order, LRU head first (tests, diagnostics)."""
        refs, out, head = self.refs, [], self._head
        for tag, keys in self._lru:
            out.extend(k for k in keys[head:] if refs.get(k) == tag)
            head = 0
        return out

    def lookup(self, hashes: list[int], max_blocks: int) -> int:
        """Leading blocks of ``hashes`` resident in the cache (active or inactive)."""
        if not self.caching:
            return 0
        refs, copies = self.refs, self.copies
        n = 0
        limit = min(max_blocks, len(hashes))
        while n < limit:
            h = hashes[n]
            if h in refs or h in copies:
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
        c = refs[h]
        if c > 0:
            refs[h] = c + 1
        else:                           # leaves the LRU (its entry goes stale)
            refs[h] = 1
            self.n_inactive -= 1

    def allocate(self, n: int) -> bool:
        """Allocate ``n`` private blocks, evicting LRU blocks if needed; False if the
        pool cannot supply them (nothing is changed then)."""
        if n <= 0:
            return True
        if n > self.free + self.n_inactive:
            return False
        take = min(n, self.free)
        self.free -= take
        rest = n - take
        if rest:
            evicted = self._pop_lru(rest)
            if self.copies or self.record_events:
                self._evict(evicted)
        self.private += n
        return True

    def _pop_lru(self, n: int) -> list:
        """Remove the ``n`` (<= n_inactive) inactive copies at the LRU head; their keys."""
        refs, lru = self.refs, self._lru
        out: list = []
        self.n_inactive -= n
        while n:
            tag, keys = lru[0]
            head = self._head
            seg = keys[head:head + n]
            vals = list(map(refs.pop, seg, repeat(None)))     # one dict operation a block
            if vals.count(tag) == len(seg):           # no stale entry (the usual case)
                live = seg
            else:                                     # put the stale entries' keys back
                live = list(compress(seg, map(eq, vals, repeat(tag))))
                refs.update((k, v) for k, v in zip(seg, vals)
                            if v is not None and v != tag)
            out += live
            n -= len(live)
            self._lru_len -= len(seg)
            if head + len(seg) == len(keys):
                lru.popleft()
                self._head = 0
            else:
                self._head = head + len(seg)
        return out

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
        refs, copies = self.refs, self.copies
        self.private -= len(hashes)
        if refs.keys().isdisjoint(hashes) and (not copies or copies.keys().isdisjoint(hashes)):
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
        refs, copies = self.refs, self.copies
        rec = self.record_events
        keys = hashes
        for i, h in enumerate(hashes):
            if h in refs or h in copies:
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
        refs = self.refs
        rev = cached[::-1]
        counts = list(map(refs.__getitem__, rev))
        self._release_serial += 1
        tag = -self._release_serial
        if counts.count(1) == len(counts):
            last = rev                                # every one was its last holder
        else:
            shared = list(map(_NOT_LAST, counts))     # (the loop, in C)
            last = list(compress(rev, map(not_, shared)))
            refs.update(zip(compress(rev, shared), map(_LESS_ONE, compress(counts, shared))))
            if not last:
                return
        refs.update(zip(last, repeat(tag)))
        self._lru.append((tag, last))
        self.n_inactive += len(last)
        self._lru_len += len(last)
        if self._lru_len - self.n_inactive > max(self.min_stale, self.n_inactive):
            self._compact()

    def _compact(self) -> None:
        """Drop the LRU's stale entries (same order)."""
        refs, head, kept = self.refs, self._head, deque()
        for tag, keys in self._lru:
            live = [k for k in keys[head:] if refs.get(k) == tag]
            if live:
                kept.append((tag, live))
            head = 0
        self._lru, self._head, self._lru_len = kept, 0, self.n_inactive

    def drain_events(self) -> list[tuple[int, int]]:
        ev = self.events
        self.events = []
        return ev

    def check(self) -> None:
        """Invariant check (tests): every block is accounted for exactly once."""
        total = self.free + self.private + len(self.refs)
        assert total == self.num_blocks, (total, self.num_blocks)
        assert self.free >= 0 and self.private >= 0
        lru = self.lru()
        assert len(lru) == len(set(lru)) == self.n_inactive, (len(lru), self.n_inactive)
        assert sum(1 for c in self.refs.values() if c < 0) == self.n_inactive
        assert all(c != 0 for c in self.refs.values())
        resident = self.refs.keys()
        listed = {k for keys in self.copies.values() for k in keys}
        for h, keys in self.copies.items():
            assert keys and len(set(keys)) == len(keys) and keys != [h], (h, keys)
            assert all(k in resident and (k == h or k[0] == h) for k in keys), (h, keys)
        for k in resident:
            assert k in listed if type(k) is tuple else (k not in self.copies or k in listed)
