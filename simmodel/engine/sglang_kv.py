"""SGLang's hold on the pool: a request's lease, and the disaggregated handoff.  Pure.

A request holds its cached prefix (a locked radix-tree node) and private pages for the
KV beyond it (``_Lease``).  Its computed tokens join the tree only when they are cached
(``_cache``: at a prefill pass end, at completion, at a retraction, or on a prefill
worker when its source is released).  The handoff methods are lease operations: a
decode worker reserves the prompt's slots (reusing its resident prefix), then activates
the request; a prefill worker releases the source once the transfer is over.  A mixin of
``SglangScheduler`` (engine/sglang.py), whose module docstring states the rules.
"""
from __future__ import annotations

from simmodel.engine.prompts import RunPrompt
from simmodel.engine.request import EngineRequest


class _Lease:
    """A request's hold on the pool: its cached prefix (``node``, locked, ``tree`` tokens,
    page-aligned) and its KV up to ``kv`` tokens (the part beyond ``tree`` in private
    pages); ``prompt_segs`` its prompt as segments; ``lpm``, ``head``: lookups cached by
    ``simmodel.engine.lpm``."""

    __slots__ = ("node", "tree", "kv", "prompt_segs", "lpm", "head")

    def __init__(self, root, prompt_segs):
        self.node = root
        self.tree = 0
        self.kv = 0
        self.prompt_segs = prompt_segs
        self.lpm = self.head = None


def _prompt_segments(prompt) -> list:
    if isinstance(prompt, RunPrompt):
        return [(tok, -1, c) for tok, c in prompt.runs if c > 0]
    out, left, run = [], prompt.length, prompt.run_len
    for tok in prompt.ids:
        if left <= 0:
            break
        c = run if run < left else left
        out.append((tok, -1, c))
        left -= c
    return out


class SglangLeases:
    """Leases of an ``SglangScheduler``'s requests (``_lease`` by uid) on its radix pool."""

    def _slots(self, lease: _Lease, kv_len: int) -> int:
        """Private slots (whole pages) a lease holds with KV up to ``kv_len`` tokens."""
        bs = self.bs
        return -(-(kv_len - lease.tree) // bs) * bs

    def _get_lease(self, r: EngineRequest) -> _Lease:
        lease = self._lease.get(r.uid)
        if lease is None:
            lease = _Lease(self.kv.root, _prompt_segments(r.seq.prompt))
            self._lease[r.uid] = lease
        return lease

    def _segs(self, r: EngineRequest, lease: _Lease) -> list:
        g = r.generated
        if not g:
            return lease.prompt_segs
        ids = r.seq.output_ids
        if ids is None:
            return lease.prompt_segs + [(-1 - r.uid, 0, g)]
        return lease.prompt_segs + [(t, -1, 1) for t in ids[:g]]

    def _grow(self, lease: _Lease, kv_len: int) -> bool:
        need = self._slots(lease, kv_len) - self._slots(lease, lease.kv)
        if need > 0 and not self.kv.alloc(need):
            return False
        lease.kv = kv_len
        return True

    def _cache(self, r: EngineRequest, lease: _Lease, upto: int) -> None:
        """Insert r's first ``upto`` computed tokens (whole pages) into the tree and move
        its lock to where they end."""
        if not self.caching:
            return
        kv = self.kv
        aligned = upto - upto % self.bs
        if aligned <= lease.tree:
            return
        already, node = kv.insert(self._segs(r, lease), aligned, r.seq)
        if already > lease.tree:
            kv.free_private(already - lease.tree)     # duplicates of cached tokens
        kv.lock(node)
        kv.unlock(lease.node)
        lease.node = node
        lease.tree = aligned

    def _release(self, r: EngineRequest, cache: bool) -> None:
        """Drop r's hold on the pool (caching its computed tokens first if ``cache``)."""
        lease = self._lease.pop(r.uid, None)
        if lease is None:
            return
        if cache:
            self._cache(r, lease, lease.kv)
        self.kv.free_private(self._slots(lease, lease.kv))
        self.kv.unlock(lease.node)

    # -- disaggregated handoff --------------------------------------------------------------
    def release_source(self, req: EngineRequest) -> None:
        """Prefill side: the transfer is over; the held prompt joins the tree (measured:
        not before) and its slots become evictable."""
        self._release(req, cache=True)
        self.held -= 1

    def reserve(self, req: EngineRequest) -> int | None:
        """Decode side: hold slots for ``req``'s whole prompt, reusing the cached prefix
        resident here.  Returns the prompt tokens that must be transferred (whole
        pages), or None if the pool cannot supply the slots yet (nothing changes)."""
        kv = self.kv
        lease = self._get_lease(req)
        plen = req.prompt_len
        hit, node = kv.match(lease.prompt_segs, plen)
        kv.lock(node)
        need = -(-(plen - hit) // self.bs) * self.bs
        if need > kv.free_tokens + kv.evictable:
            kv.unlock(node)
            del self._lease[req.uid]
            return None
        lease.node, lease.tree, lease.kv = node, hit, hit
        self._grow(lease, plen)
        self.held += 1
        return need

    def unreserve(self, req: EngineRequest) -> None:
        """Decode side: the prefill of a reserved request was rejected; its slots are
        freed (nothing was transferred into them, so nothing joins the tree)."""
        self._release(req, cache=False)
        self.held -= 1

    def activate(self, req: EngineRequest) -> int:
        """Decode side: the prompt's KV has arrived; the request decodes from the next
        pass on (it joins the running batch when that pass is formed).  Measured: the
        arrived prompt joins this worker's radix tree at once, so the pages it shares
        with prompts cached here since its reservation (another transferred prompt, a
        completed request) return to the pool.  Returns the slots so freed."""
        self.held -= 1
        req.transferred = True
        req.computed = req.seq_len
        lease = self._lease.get(req.uid)
        free_before = self.kv.free_tokens
        if lease is not None:
            self._cache(req, lease, lease.kv)
        self.enqueue(req)
        return self.kv.free_tokens - free_before
