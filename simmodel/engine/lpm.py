"""SGLang's longest-prefix-match queue order (``schedule_policy: lpm``, reference §3.4).  Pure.

Before every admission walk the waiting queue is sorted by each request's cached prefix in
the radix tree, longest first, stably.  A request with at most ``IN_BATCH_THRESHOLD``
cached tokens whose prompt shares at least that many tokens with an earlier waiting request
goes last (SGLang's in-batch prefix check: computing one lets the other hit the cache).
With more than ``LPM_MAX_QUEUE`` waiting requests the queue keeps its order, and then the
admission walk's holds refresh no LRU times (*measured*: with a sorted queue, and with
``fifo``, they do; ``long_sglang_lpm_failed_admission``).  A chunked
prompt in progress is sorted like the others (measured: its computed chunks are its
cached prefix).  Lookups never refresh LRU times.

**Incremental.**  Recomputing every waiting request's match before every pass costs
O(waiting × segments) per pass, so a long queue held back by a full pool made runs about
quadratic.  Here a request's match (its length and the node where it ends) is kept on its
lease and reused while it is provably unchanged:

* the request's own sequence is the same (``generated`` unchanged; it only changes while
  the request runs);
* the end node is still alive (eviction only trims or removes *leaves*, so every node
  above a live end node is intact); if it was trimmed, the match now ends at its new
  depth (a trimmed node is a leaf, fully matched before);
* no leaf was attached to the end node since (``Node.added``), or none of the new ones
  starts with the request's next page: only such a child could extend the match
  (splits keep a node's first page, so they never do).

Then a fresh ``match`` would walk down to the same existing node and stop there, without
splitting anything (nodes are never merged), so skipping it changes nothing: the tree,
its LRU times and the order are exactly those of the full recompute
(``SglangScheduler.lpm_full_recompute`` keeps that path for tests).  The admission
walk takes its matches from the same memo (``cached_match``), with either policy.

The in-batch check asks whether the longest page-aligned prefix of a request present among
the earlier low-hit requests' prompts (each cut at ``len − 1``) reaches 32 tokens, i.e.
whether some earlier one has the same first ``⌈32 / page⌉ · page`` tokens and both are
that long: a set of those prefixes replaces the temporary radix tree.

Cost per walk: O(waiting) checks plus O(segments) per request whose match went stale;
O(segments of the first 32 tokens) per low-hit request for the in-batch check.
"""
from __future__ import annotations

from collections import deque

from simmodel.engine.radix_cache import RadixCache, _first_key

LPM_MAX_QUEUE = 128          # longer queues are served in arrival order
IN_BATCH_THRESHOLD = 32      # tokens (SGLang's in-batch prefix caching check)
INF = float("inf")


def lpm_order(sched) -> bool:
    """Sort ``sched.waiting`` (an ``SglangScheduler``'s queue) longest cached prefix
    first, as described in the module docstring.  False when the queue is too long to
    sort (it keeps its order, and the walk's holds then refresh no LRU times)."""
    waiting = sched.waiting
    if len(waiting) > LPM_MAX_QUEUE:
        return False
    if sched.lpm_full_recompute:
        keys = _keys_full(sched, waiting)
    else:
        keys = _keys_incremental(sched, waiting)
    keys.sort()
    sched.waiting = deque([r for _, _, r in keys])
    return True


def cached_match(sched, r, lease) -> tuple:
    """``sched.kv.match`` of waiting request ``r``'s sequence (capped at ``len − 1``):
    (tokens, end node), from ``lease.lpm`` while it is provably unchanged (module
    docstring), else matched again and remembered.  Identical to a fresh match, side
    effects (edge splits) included."""
    kv = sched.kv
    if not kv.caching:
        return 0, kv.root
    g = r.generated
    memo = lease.lpm
    if memo is not None and memo[0] == g:
        _, hit, node, added, at = memo
        if node.alive:
            if node.added == added:
                if node.depth < hit:           # a trimmed leaf: the match ends earlier
                    hit = node.depth
                    lease.lpm = (g, hit, node, added, None)
                return hit, node
            if at is not None and node.depth == hit and not _goes_on(sched, r, lease, at):
                lease.lpm = (g, hit, node, node.added, at)   # new leaves, none of r's
                return hit, node
    limit = r.seq_len - 1
    hit, node, i, off = kv._walk(sched._segs(r, lease), limit - limit % kv.page, False)
    lease.lpm = (g, hit, node, node.added, (hit, i, off))
    return hit, node


def _goes_on(sched, r, lease, at) -> bool:
    """Whether the end node of r's remembered match (``at``: its length and position in
    r's segments) now has a child starting with r's next page (what the walk looks up
    there)."""
    hit, i, off = at
    limit = r.seq_len - 1
    if hit >= limit - limit % sched.bs:
        return False                       # the match is at its cap
    node = lease.lpm[2]
    return _first_key(sched._segs(r, lease), i, off, sched.bs) in node.children


def _head(sched, r, lease, span: int):
    """Canonical content of r's first ``span`` tokens if its lookup limit reaches that
    far (else None), remembered per sequence."""
    g = r.generated
    memo = lease.head
    if memo is not None and memo[0] == g:
        return memo[1]
    lim = r.seq_len - 1
    head = (_first_key(sched._segs(r, lease), 0, 0, span)
            if lim - lim % sched.bs >= span else None)
    lease.head = (g, head)
    return head


def _keys_incremental(sched, waiting) -> list:
    span = -(-IN_BATCH_THRESHOLD // sched.bs) * sched.bs   # tokens the in-batch check sees
    leases = sched._lease
    seen = set()
    keys = []
    for i, r in enumerate(waiting):
        lease = leases.get(r.uid) or sched._get_lease(r)
        memo = lease.lpm
        # (``cached_match`` inlined for its common case: a hot loop, once per pass)
        if (memo is not None and memo[0] == r.generated and memo[2].alive
                and memo[2].added == memo[3] and memo[2].depth == memo[1]):
            hit = memo[1]
        else:
            hit, _ = cached_match(sched, r, lease)
        if hit <= IN_BATCH_THRESHOLD:
            head = _head(sched, r, lease, span)
            if head is not None:
                if head in seen:
                    keys.append((INF, i, r))
                    continue
                seen.add(head)
        keys.append((-hit, i, r))
    return keys


def _keys_full(sched, waiting) -> list:
    """The original full recompute: every match again, a temporary tree of the low-hit
    prompts for the in-batch check (kept to check the incremental path against)."""
    kv = sched.kv
    temp = RadixCache(1 << 60, sched.bs)
    keys = []
    for i, r in enumerate(waiting):
        segs = sched._segs(r, sched._get_lease(r))
        hit, _ = kv.match(segs, r.seq_len - 1, touch=False)
        key = -hit
        if hit <= IN_BATCH_THRESHOLD:
            shared, _ = temp.match(segs, r.seq_len - 1, touch=False)
            if shared >= IN_BATCH_THRESHOLD:
                key = float("inf")
            else:
                temp.free_tokens -= r.seq_len - 1
                temp.private += r.seq_len - 1
                temp.insert(segs, r.seq_len - 1)
        keys.append((key, i, r))
    return keys
