"""The KV-cache-aware router (reference §5.2) and its optional queue.

State, per worker ``w``:

* an **index** of the blocks cached on ``w``, fed *only* by the worker's KV events
  (``stored`` / ``removed``), which become visible at the pass end plus
  ``kv_event_lag_ms``;
* **active blocks**: the full prompt blocks of ``w``'s live requests, from routing until
  the request ends (deduplicated unless ``router_assume_kv_reuse`` is off);
* **active prefill tokens**: for each of ``w``'s requests whose prefill has not finished,
  its prompt minus the overlap it was routed with; dropped at its first token.

Cost of ``w`` for a request of ``isl`` tokens and ``n`` full prompt blocks, ``o`` of them
leading blocks found in ``w``'s index (block size ``bs``)::

    prefill = prefill_load_scale * max(0, (active_prefill_tokens + isl) / bs - credit * o)
    decode  = active_blocks + (blocks of the request not already active on w)
    cost    = prefill + decode + decode_active_request_weight * active_requests

The lowest cost wins; ties are broken with the seeded ``router_ties`` stream (the
reference breaks them without a seed).  With ``router_temperature`` T > 0 the choice is a
softmax over costs normalised to [min, max].

Queue (``router_queue_threshold`` f): a worker is busy when its active prefill tokens
exceed f x max_num_batched_tokens; a request waits in the queue when the queue is not
empty or every worker is busy, and the queue drains on every prefill completion, request
completion and topology change, best entry first (fcfs / lcfs / wspt).

Attention DP (``dp``): every (worker, rank) is a target of its own (measured: the
reference places requests of different prefixes on the ranks of one worker and each
follow-up on the rank holding its prefix): its own index, fed by its rank's events,
its own active blocks and prefill tokens, its own place in the cost comparison and the
busy test.  A view is kept per slot ``worker × dp + rank``; the chosen rank goes to the
request (``dp_rank``).

Pure bookkeeping; before each decision it reads every worker's current view
(``Worker.view``), by which a worker in a coalesced decode run has published the KV
events of every pass that already ended.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

from simmodel.config import RouterConfig
from simmodel.engine.kv_cache import STORED
from simmodel.engine.request import EngineRequest


class _WorkerView:
    __slots__ = ("index", "pending", "active", "active_sum", "prefill_tokens", "requests")

    def __init__(self):
        self.index: set[int] = set()
        self.pending: deque = deque()          # (visible_ms, kind, hash)
        self.active: dict[int, int] = {}       # hash -> live requests holding it
        self.active_sum = 0                    # Σ blocks, not deduplicated
        self.prefill_tokens = 0
        self.requests = 0


class KvRouter:
    """KV-aware placement (reference §5.2); offers ``routing.Router``."""

    needs_kv_events = True               # its view of each worker's cache is built from them

    def __init__(self, env, workers: list, cfg: RouterConfig, *, block_size: int,
                 max_num_batched_tokens: int, rng: np.random.Generator, dp: int = 1):
        self.env = env
        self.workers = workers
        self.dp = dp                           # attention DP: ranks (targets) per worker
        self.cfg = cfg
        self.bs = block_size
        self.rng = rng
        self.views: list[_WorkerView] = []
        self.lag = cfg.kv_event_lag_ms or 0.0
        self.busy_limit = (None if cfg.router_queue_threshold is None
                           else cfg.router_queue_threshold * max_num_batched_tokens)
        self.queue: list = []                  # heap of (-strict, -score, seq, request)
        self._seq = 0
        self._routed: dict[int, tuple] = {}    # uid -> (slot, hashes, prefill tokens left)
        self.waiting: deque = deque()          # requests that found no active worker
        self.traffic = None                    # planner's TrafficWindow (admissions)

    # -- wiring -----------------------------------------------------------------------
    def attach(self) -> None:
        """Called once the workers exist: a view per (worker, rank) slot."""
        self.views = [_WorkerView() for _ in range(len(self.workers) * self.dp)]

    def attach_new(self) -> None:
        """Views for workers added since (scaling): a new worker's index starts empty."""
        while len(self.views) < len(self.workers) * self.dp:
            self.views.append(_WorkerView())

    def observe_traffic(self, traffic) -> None:
        """Report each admission (its overlap and prompt blocks) to a planner's window."""
        self.traffic = traffic

    def on_kv_events(self, worker: int, events) -> None:
        """``events``: (pass end ms, kind, hash[, DP rank]) in time order; visible after
        the lag, in the view of the event's (worker, rank)."""
        lag, views, base = self.lag, self.views, worker * self.dp
        for t, kind, h, *rank in events:
            views[base + (rank[0] if rank else 0)].pending.append((t + lag, kind, h))

    # -- routing ----------------------------------------------------------------------
    def route(self, req: EngineRequest) -> None:
        if self.waiting:
            self.waiting.append(req)
            return
        if self.busy_limit is not None and (self.queue or self._all_busy()):
            self._enqueue(req)
            return
        self._place(req)

    def _place(self, req: EngineRequest) -> bool:
        i = self.pick(req)
        if i is None:
            self.waiting.append(req)           # no active worker: wait for one
            return False
        self.workers[i].submit(req)
        return True

    def pick(self, req: EngineRequest) -> int | None:
        """Choose an active worker (and rank, set on ``req``) for ``req`` and book it
        there (without submitting); None when no worker is active (scaling runs)."""
        now = self.env.now
        cands = self._active_slots()           # (first: a worker's view publishes its events)
        if len(self.views) < len(self.workers) * self.dp:
            self.attach_new()
        views = self.views
        for v in views:
            self._apply_events(v, now)
        if not cands:
            return None
        bs = self.bs
        hashes = req.seq.ensure(req.prompt_len // bs)[: req.prompt_len // bs]
        isl = req.prompt_len
        overlaps = [self._overlap(views[i], hashes) for i in cands]
        costs = self._costs(req, hashes, overlaps, [views[i] for i in cands])
        c = self._choose(costs)
        i = cands[c]
        v = views[i]
        cached = min(isl, overlaps[c] * bs)
        left = isl - cached if self.cfg.router_track_prefill_tokens else 0
        v.prefill_tokens += left
        v.requests += 1
        if self.cfg.router_track_active_blocks:
            for h in hashes:
                v.active[h] = v.active.get(h, 0) + 1
            v.active_sum += len(hashes)
        self._routed[req.uid] = (i, hashes, left)
        if self.traffic is not None:
            self.traffic.on_admission(overlaps[c], -(-isl // bs))
        worker, req.dp_rank = divmod(i, self.dp)
        return worker

    def _active_slots(self) -> list[int]:
        """The (worker, rank) slots of the active workers, worker by worker."""
        dp = self.dp
        return [w * dp + r for w, state in enumerate(x.view().state for x in self.workers)
                if state == "active" for r in range(dp)]

    def _apply_events(self, v: _WorkerView, now: float) -> None:
        pending, index = v.pending, v.index
        while pending and pending[0][0] <= now:
            _, kind, h = pending.popleft()
            if kind == STORED:
                index.add(h)
            else:
                index.discard(h)

    @staticmethod
    def _overlap(v: _WorkerView, hashes) -> int:
        index = v.index
        n = 0
        for h in hashes:
            if h not in index:
                break
            n += 1
        return n

    def _costs(self, req: EngineRequest, hashes, overlaps, views) -> list[float]:
        cfg, bs = self.cfg, self.bs
        isl = req.prompt_len
        nblocks = len(hashes)
        min_pt = min(v.prefill_tokens for v in views)
        costs = []
        for v, o in zip(views, overlaps):
            credit = cfg.overlap_score_credit * o
            if cfg.overlap_score_credit_decay > 0 and nblocks:
                excess = (v.prefill_tokens - min_pt) / bs
                credit /= 1.0 + cfg.overlap_score_credit_decay * excess / nblocks
            raw = (v.prefill_tokens + isl) / bs
            prefill = cfg.prefill_load_scale * max(0.0, raw - credit)
            if not cfg.router_track_active_blocks:
                decode = 0.0
            elif cfg.router_assume_kv_reuse:
                active = v.active
                decode = len(active) + sum(1 for h in hashes if h not in active)
            else:
                decode = v.active_sum + nblocks
            costs.append(prefill + decode + cfg.decode_active_request_weight * v.requests)
        return costs

    def _choose(self, costs: list[float]) -> int:
        lo = min(costs)
        T = self.cfg.router_temperature
        if T > 0:
            hi = max(costs)
            if hi == lo:
                return int(self.rng.integers(len(costs)))
            w = np.exp(-(np.asarray(costs) - lo) / ((hi - lo) * T))
            return int(self.rng.choice(len(costs), p=w / w.sum()))
        best = [i for i, c in enumerate(costs) if c == lo]
        if len(best) == 1:
            return best[0]
        return best[int(self.rng.integers(len(best)))]

    # -- lifecycle signals (never delayed) --------------------------------------------
    def on_first_token(self, req: EngineRequest) -> None:
        entry = self._routed.get(req.uid)
        if entry is None or not entry[2]:
            return
        w, hashes, left = entry
        self.views[w].prefill_tokens -= left
        self._routed[req.uid] = (w, hashes, 0)
        self._drain()

    def on_done(self, req: EngineRequest) -> None:
        if self._forget(req):
            self._drain()

    def worker_failed(self, idx: int, lost: list) -> None:
        """Worker ``idx`` failed with ``lost``: their load is gone, and so is its cache
        (each of its slots starts an empty view)."""
        for req in lost:
            self._forget(req)
        for s in range(idx * self.dp, (idx + 1) * self.dp):
            self.views[s] = _WorkerView()

    def withdraw(self, req: EngineRequest) -> bool:
        """Take ``req`` back if it waits here, for a worker or in the queue."""
        if req in self.waiting:
            self.waiting.remove(req)
            return True
        for i, entry in enumerate(self.queue):
            if entry[3] is req:
                self.queue[i] = self.queue[-1]
                self.queue.pop()
                heapq.heapify(self.queue)
                return True
        return False

    def _forget(self, req: EngineRequest) -> bool:
        """Drop ``req``'s load from its slot's view (False if it was not booked)."""
        entry = self._routed.pop(req.uid, None)
        if entry is None:
            return False
        w, hashes, left = entry
        v = self.views[w]
        v.prefill_tokens -= left
        v.requests -= 1
        if self.cfg.router_track_active_blocks:
            active = v.active
            for h in hashes:
                c = active[h] - 1
                if c:
                    active[h] = c
                else:
                    del active[h]
            v.active_sum -= len(hashes)
        return True

    # -- queue ------------------------------------------------------------------------
    def _all_busy(self) -> bool:
        views, dp = self.views, self.dp
        return all(views[i].prefill_tokens > self.busy_limit for i in range(len(views))
                   if self.workers[i // dp].state == "active")

    def _enqueue(self, req: EngineRequest) -> None:
        strict = getattr(_turn(req), "strict_priority", 0)
        heapq.heappush(self.queue, (-strict, -self._score(req), self._seq, req))
        self._seq += 1

    def _score(self, req: EngineRequest) -> float:
        """Higher is served first (ties FIFO).  The trace's ``priority`` is the bump, in
        seconds for fcfs/lcfs (the reference's exact mapping is not documented)."""
        policy = self.cfg.router_queue_policy
        bump = getattr(_turn(req), "priority", 0)
        arrival_s = req.arrival_ms / 1000.0
        if policy == "fcfs":
            return bump - arrival_s
        if policy == "lcfs":
            return bump + arrival_s
        hashes = req.seq.ensure(req.prompt_len // self.bs)[: req.prompt_len // self.bs]
        slots = self._active_slots()
        for v in self.views:
            self._apply_events(v, self.env.now)
        best = max((self._overlap(self.views[i], hashes) for i in slots), default=0) * self.bs
        return (1.0 + bump) / max(1, req.prompt_len - best)

    def _drain(self) -> None:
        if self.busy_limit is None:
            return
        while self.queue and not self._all_busy() and not self.waiting:
            _, _, _, req = heapq.heappop(self.queue)
            self._place(req)

    def queued(self) -> int:
        """Requests held here: in the queue, or waiting for an active worker."""
        return len(self.queue) + len(self.waiting)

    def topology_changed(self) -> None:
        """Workers joined or left (scaling): new views; release the requests that were
        waiting for an active worker, then the queue."""
        self.attach_new()
        while self.waiting:
            i = self.pick(self.waiting[0])
            if i is None:
                return                        # still no active worker
            self.workers[i].submit(self.waiting.popleft())
        self._drain()


def _turn(req: EngineRequest):
    """The workload turn behind a request (a disaggregated prefill part points at the
    logical request, which points at the turn)."""
    meta = req.meta
    return meta.meta if isinstance(meta, EngineRequest) else meta
