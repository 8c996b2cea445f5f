"""SGLang's KV pool with a radix prefix cache (reference §3.4, §4), over runs of tokens.  Pure.

Model (the rules marked *measured* were pinned against ai-dynamo-runtime 1.6.1):

* A pool of ``num_pages × page_size`` token slots.  A slot is *free*, *private* to one
  request (computed but not in the tree: a prompt being prefilled, tokens decoded since
  its prompt was cached; whole pages), or holds a token of the **radix tree**.
* The tree stores token sequences; an edge is labelled with a run of tokens whose length
  is a multiple of ``page_size`` (a partial last page stays private).  A node is *locked*
  while a running request's cached prefix ends at or below it (``lock`` counts them);
  unlocked tree tokens are *evictable*.
* ``match`` finds the longest cached prefix of a sequence, page-aligned and capped by the
  caller.  A match that ends inside an edge splits it, so the prefix can be locked.
* ``insert`` adds a sequence's leading tokens; the part already present is reported so the
  caller can return its own duplicate slots to the free pool.
* ``evict(n)`` frees ``n`` slots (rounded up to pages) from unlocked **leaves**, least
  recently used first; a leaf longer than what is still needed only loses the tail of
  its label (*measured*: eviction is token-exact, not whole leaves).  A parent whose last
  child went becomes a leaf and competes with its own time.
* LRU times (a logical clock) are refreshed only by ``insert`` for the nodes it passes
  through entirely and the leaf it creates, and by ``lock(touch=True)``.  Lookups do not
  refresh, and a node cut in two keeps its time in both parts (*measured*).
* ``alloc(n)`` takes ``n`` free slots, evicting if needed; ``free_private(n)`` returns them.

Tokens are never materialised.  A sequence is a list of *segments* ``(key, base, count)``:
``base == -1`` is a run of ``count`` copies of token ``key`` (a Mooncake hash id repeated
512 times is one segment); ``base >= 0`` is ``count`` distinct tokens ``(key, base)``,
``(key, base+1)``, … (generated tokens, unique to their request; ``key < 0`` there, so the
two kinds never compare equal).  Pages (``page_size > 1``) are keyed by their canonical
content, so runs split at different places still compare equal.

Cost: ``match`` / ``insert`` are O(nodes on the path + segments of the sequence),
independent of the number of tokens (a 10,000-token Mooncake prompt is ~20 segments);
``lock`` / ``unlock`` O(path); eviction O(log L) per leaf touched (a lazy heap of
candidate leaves) plus O(1) per trim.  KV events (``record_events``), when asked for,
cost one hash per page stored or removed (block hashes from the request's
``TokenSequence``, the KV router's granularity).

Counters (in tokens): ``free_tokens``, ``private``, ``evictable`` (tree tokens with no
lock), ``protected`` (locked tree tokens); ``free_tokens + private + evictable +
protected == capacity`` always.  ``active_blocks``, ``inactive_blocks`` and ``free`` are
the same in pages, for telemetry.
"""
from __future__ import annotations

import heapq

STORED, REMOVED = 0, 1          # the same event kinds as simmodel.engine.kv_cache


class Node:
    """A radix tree node: edge label (segments) from its parent, children keyed by the
    first page of their label, lock count, LRU time, leaves ``insert`` attached (added)."""

    __slots__ = ("parent", "segs", "length", "children", "lock", "time", "depth", "alive",
                 "src", "added")

    def __init__(self, parent, segs: list, length: int, depth: int, time: int, src=None):
        self.parent = parent
        self.segs = segs                    # [(key, base, count)], total ``length`` tokens
        self.length = length
        self.children: dict = {}
        self.lock = 0
        self.time = time
        self.depth = depth                  # tokens from the root to the end of this node
        self.alive = True
        self.added = 0
        self.src = src                      # a TokenSequence holding these tokens at these
                                            # positions (block hashes for KV events)


def _take(segs: list, i: int, off: int, n: int) -> tuple[list, int, int]:
    """``n`` tokens of ``segs`` starting at segment ``i`` offset ``off`` -> (segments,
    next i, next off)."""
    out = []
    while n > 0:
        key, base, count = segs[i]
        rest = count - off
        k = rest if rest < n else n
        out.append((key, base if base < 0 else base + off, k))
        n -= k
        if k == rest:
            i, off = i + 1, 0
        else:
            off += k
    return out, i, off


def _advance(segs: list, i: int, off: int, n: int) -> tuple[int, int]:
    """Position ``n`` tokens after segment ``i`` offset ``off``."""
    while n:
        rest = segs[i][2] - off
        if n < rest:
            return i, off + n
        n -= rest
        i, off = i + 1, 0
    return i, off


def _first_key(segs: list, i: int, off: int, page: int):
    """Key of the page starting at segment ``i`` offset ``off`` (its canonical content)."""
    key, base, count = segs[i]
    if page == 1:
        return key if base < 0 else (key, base + off)
    if count - off >= page:                          # one segment covers the page
        return (key, -1, page) if base < 0 else (key, base + off, page)
    parts, _, _ = _take(segs, i, off, page)
    merged: list = []
    for k, b, c in parts:
        if merged:
            pk, pb, pc = merged[-1]
            if pk == k and ((pb < 0 and b < 0) or (pb >= 0 and b == pb + pc)):
                merged[-1] = (pk, pb, pc + c)
                continue
        merged.append((k, b, c))
    return merged[0] if len(merged) == 1 else tuple(merged)


def _common(edge: list, segs: list, i: int, off: int, limit: int) -> int:
    """Length of the common prefix of the label ``edge`` and ``segs`` from (i, off), at
    most ``limit`` tokens."""
    n = 0
    ei, eoff = 0, 0
    ne, ns = len(edge), len(segs)
    while n < limit and ei < ne and i < ns:
        ek, eb, ec = edge[ei]
        qk, qb, qc = segs[i]
        if ek != qk:
            break
        if eb >= 0 and eb + eoff != qb + off:
            break
        er, qr = ec - eoff, qc - off
        k = er if er < qr else qr
        if k > limit - n:
            k = limit - n
        n += k
        eoff += k
        off += k
        if eoff == ec:
            ei, eoff = ei + 1, 0
        if off == qc:
            i, off = i + 1, 0
    return n


def _split_label(segs: list, at: int) -> tuple[list, list]:
    head, i, off = _take(segs, 0, 0, at)
    tail = []
    if i < len(segs):
        key, base, count = segs[i]
        tail.append((key, base if base < 0 else base + off, count - off))
        tail.extend(segs[i + 1:])
    return head, tail


def _trim(segs: list, n: int) -> None:
    """Drop the last ``n`` tokens of a label, in place (fewer than it holds)."""
    while n:
        key, base, count = segs[-1]
        if count > n:
            segs[-1] = (key, base, count - n)
            return
        segs.pop()
        n -= count


class RadixCache:
    """The token pool and radix tree of one SGLang rank (see the module docstring)."""

    def __init__(self, num_pages: int, page_size: int = 1, *, caching: bool = True,
                 record_events: bool = False):
        self.num_blocks = num_pages
        self.page = page_size
        self.capacity = num_pages * page_size
        self.caching = caching
        self.free_tokens = self.capacity   # slots in no request and not in the tree
        self.private = 0
        self.evictable = 0
        self.protected = 0
        self._clock = 0
        self.root = Node(None, [], 0, 0, 0)
        self.root.lock = 1                 # never evicted
        self._heap: list = []              # (time, id, node) candidate leaves
        self.record_events = record_events
        self.events: list = []

    # -- telemetry views (pages) ------------------------------------------------------------
    @property
    def active_blocks(self) -> int:
        """Pages held by running requests (private + locked tree pages)."""
        return -(-(self.private + self.protected) // self.page)

    @property
    def inactive_blocks(self) -> int:
        """Cached pages no request holds (evictable, LRU)."""
        return self.evictable // self.page

    @property
    def free(self) -> int:
        """Free pages (telemetry; the worker's gauges read ``active_blocks``,
        ``inactive_blocks`` and ``free``)."""
        return self.free_tokens // self.page

    @property
    def available(self) -> int:
        """Tokens an allocation can obtain: free plus evictable."""
        return self.free_tokens + self.evictable

    # -- LRU bookkeeping --------------------------------------------------------------------
    def _touch(self, node: Node) -> None:
        self._clock += 1
        node.time = self._clock
        if node.lock == 0 and not node.children:
            heapq.heappush(self._heap, (node.time, id(node), node))

    def _offer(self, node: Node) -> None:
        """``node`` may have become an evictable leaf."""
        if node.lock == 0 and not node.children and node.alive:
            heapq.heappush(self._heap, (node.time, id(node), node))

    # -- lookup -----------------------------------------------------------------------------
    def match(self, segs: list, limit: int, touch: bool = False) -> tuple[int, Node]:
        """Longest cached prefix of ``segs`` of at most ``limit`` tokens, page-aligned:
        (tokens, node where it ends).  Splits the edge it ends in (so the node exists).
        ``touch`` refreshes the LRU times of the nodes passed through entirely (the
        scheduler never asks for it: lookups do not refresh in the reference)."""
        if not self.caching:
            return 0, self.root
        pos, node, _, _ = self._walk(segs, limit - limit % self.page, touch)
        return pos, node

    def _walk(self, segs: list, limit: int, touch: bool):
        """Follow ``segs`` down the tree for at most ``limit`` (page-aligned) tokens:
        (tokens matched, node where the match ends, position in ``segs`` after it).  The
        edge the match ends in is split so that node exists (both parts keep the LRU
        time); with ``touch`` the nodes passed through entirely are refreshed."""
        page = self.page
        node = self.root
        pos, i, off = 0, 0, 0
        while pos < limit:
            child = node.children.get(_first_key(segs, i, off, page))
            if child is None:
                break
            m = _common(child.segs, segs, i, off, min(child.length, limit - pos))
            m -= m % page
            if m == 0:
                break
            if m < child.length:
                node = self._split(child, m)
                pos += m
                i, off = _advance(segs, i, off, m)
                break
            if touch:
                self._touch(child)
            node = child
            pos += m
            i, off = _advance(segs, i, off, m)
        return pos, node, i, off

    def _split(self, child: Node, at: int) -> Node:
        """Cut ``child``'s label at ``at`` tokens: a new node takes the head."""
        head, tail = _split_label(child.segs, at)
        parent = child.parent
        new = Node(parent, head, at, child.depth - child.length + at, child.time, child.src)
        new.lock = child.lock
        parent.children[_first_key(head, 0, 0, self.page)] = new
        child.parent = new
        child.segs = tail
        child.length -= at
        new.children[_first_key(tail, 0, 0, self.page)] = child
        return new

    # -- locks ------------------------------------------------------------------------------
    def lock(self, node: Node, touch: bool = False) -> None:
        """Hold the path from ``node`` to the root (``touch``: refresh its LRU times)."""
        while node is not self.root:
            if node.lock == 0:
                self.evictable -= node.length
                self.protected += node.length
            node.lock += 1
            if touch:
                self._clock += 1
                node.time = self._clock
            node = node.parent

    def unlock(self, node: Node) -> None:
        """Release the path from ``node`` to the root (LRU times unchanged)."""
        while node is not self.root:
            node.lock -= 1
            if node.lock == 0:
                self.protected -= node.length
                self.evictable += node.length
                self._offer(node)
            node = node.parent

    # -- insertion --------------------------------------------------------------------------
    def insert(self, segs: list, length: int, src=None) -> tuple[int, Node]:
        """Cache the first ``length`` tokens of ``segs`` (page-aligned down); the caller's
        private slots for the new part move into the tree.  Returns (tokens that were
        already cached, the node where the sequence ends).  ``src``: the request's
        ``TokenSequence`` (its block hashes name the pages in KV events)."""
        page = self.page
        length -= length % page
        pos, node, i, off = self._walk(segs, length, True)
        already = pos
        if pos < length:
            label, _, _ = _take(segs, i, off, length - pos)
            self._clock += 1
            leaf = Node(node, label, length - pos, length, self._clock, src)
            node.children[_first_key(label, 0, 0, page)] = leaf
            node.added += 1
            self.private -= length - pos
            self.evictable += length - pos
            self._offer(leaf)
            if self.record_events and src is not None:
                for h in src.ensure(length // page)[pos // page:length // page]:
                    self.events.append((STORED, h))
            node = leaf
        return already, node

    # -- slots ------------------------------------------------------------------------------
    def alloc(self, n: int) -> bool:
        """Take ``n`` free slots for a request (evicting if needed); False if the pool
        cannot supply them (nothing changes then)."""
        if n <= 0:
            return True
        if n > self.free_tokens + self.evictable:
            return False
        if n > self.free_tokens:
            self.evict(n - self.free_tokens)
        self.free_tokens -= n
        self.private += n
        return True

    def free_private(self, n: int) -> None:
        """Return ``n`` private slots to the free pool."""
        self.private -= n
        self.free_tokens += n

    def evict(self, n: int) -> int:
        """Free at least ``n`` slots (rounded up to pages) by trimming unlocked leaves,
        least recently used first: a leaf longer than what is still needed loses only
        the tail of its label and stays; returns tokens freed."""
        heap = self._heap
        page = self.page
        n = -(-n // page) * page
        freed = 0
        while freed < n and heap:
            t, _, node = heap[0]
            if not node.alive or node.lock or node.children or node.time != t:
                heapq.heappop(heap)
                continue
            need = n - freed
            end = node.depth // page            # (pages [end - k/page, end) go)
            if node.length > need:
                _trim(node.segs, need)
                node.length -= need
                node.depth -= need
                k = need
            else:
                heapq.heappop(heap)
                parent = node.parent
                del parent.children[_first_key(node.segs, 0, 0, page)]
                node.alive = False
                k = node.length
                if parent is not self.root:
                    self._offer(parent)
            freed += k
            self.evictable -= k
            self.free_tokens += k
            if self.record_events and node.src is not None:
                for h in node.src.ensure(end)[end - k // page:end]:
                    self.events.append((REMOVED, h))
        return freed

    def drain_events(self) -> list:
        """The ``(kind, block hash)`` events since the last call (the worker publishes
        them at the pass end)."""
        ev = self.events
        self.events = []
        return ev

    def check(self) -> None:
        """Invariant check (tests): every slot accounted for once; tree sizes add up."""
        assert self.free_tokens + self.private + self.evictable + self.protected == self.capacity
        assert min(self.free_tokens, self.private, self.evictable, self.protected) >= 0
        ev = pr = 0
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            assert n.alive and n.length > 0 and n.length % self.page == 0
            assert sum(c for _, _, c in n.segs) == n.length
            if n.lock:
                pr += n.length
            else:
                ev += n.length
            for c in n.children.values():
                assert c.parent is n and c.lock <= n.lock
            stack.extend(n.children.values())
        assert (ev, pr) == (self.evictable, self.protected)
