"""SGLang-style scheduler of one worker rank (reference §3.4).  Pure.

Every rule below was checked request by request against ai-dynamo-runtime 1.6.1; those
marked *measured* go beyond (or against) the reference notes and SGLang's own code.

**Pass structure.**  A pass is either a prefill batch or a decode step, never both:
if a prefill batch forms, running requests stall for that pass.  First tokens (and,
after a retraction, the next token) come at the end of the prefill pass, which costs
``P`` only (recomputed generated tokens are charged too, *measured*); a decode step
costs ``D(Σ lengths)`` over every running request.  ``prefill_decode_interval`` k forces
k decode steps after each prefill batch.

**Prefill admission** (the walk, once per pass, over the waiting queue in order; it stops
at the first request that does not fit):

* ``room`` = free + evictable slots as the walk starts; ``offset`` = Σ over running
  requests of ``min(max_output − generated, clip_max_new_tokens) × new_token_ratio``;
  ``rem_input`` = ``max_prefill_tokens``, ``rem_chunk`` = ``chunked_prefill_size``.
* Cached prefix: the longest match, capped at ``len − 1``; a chunked prompt continues
  from what it computed, without a new match.  ``extend`` = length − start; more than
  ``rem_chunk`` → a partial chunk of ``⌊rem_chunk / page⌋`` pages.
* Admitted if ``charged + reserve < room − offset``, ``charged ≤ rem_input`` and
  ``charged ≤ rem_chunk`` (charged = the chunk in whole pages; reserve =
  ``min(max_output − generated, clip)``, 0 for a partial chunk), then — its prefix locked
  (which refreshes the prefix's LRU time, *measured*) — only if its new slots can be
  had from free + evictable; they are taken at once, evicting, so later requests of
  the same walk see what is left (*measured*).  ``offset`` grows by charged + reserve.
  At most ``max_num_seqs`` running.
* Policy ``lpm``: before the walk the queue is sorted by cached prefix, longest first
  (``simmodel.engine.lpm``, incremental); with ``fifo`` a chunked prompt keeps the head.
* A queue head that cannot be admitted although nothing runs and nothing is held can
  never be: it is rejected (the reference aborts the replay; docs/model.md).

**KV accounting** (slots = pages × page size): a prompt's computed tokens join the radix
tree at the end of its pass (not earlier: requests batched together do not share);
a request that goes on decoding takes one slot per emitted token (*measured*: its first
token's slot is taken at the prefill pass end, before that pass's prompts are cached);
completion caches prompt + output; a prefill worker's finished prompt is cached only
when its source is released (*measured*).

**Decode step.**  If the running requests' next slots do not fit in free + evictable,
retract the request with the fewest generated tokens (ties: running order, *measured*)
until they do or one is left; it is cached, goes to the back of the queue and
recomputes; ``new_token_ratio = min(1, (Σ generated + 20·n) / (Σ max_output + 1))`` over
the survivors.  Otherwise the ratio decays by ``(init − floor)/600`` (init = 0.7 ×
conservativeness, *not* capped at 1, *measured*; floor = 0.14 × init).

**Disaggregation** (destination first, reference §6): ``reserve`` holds the prompt's
slots on the decode worker at arrival, reusing its cached prefix; ``activate`` caches
the arrived prompt in the tree (freeing pages it duplicates, *measured*) and puts the
request straight into the running batch at the next pass, whose decode step emits the
first visible token.

Event budget: none (pure); per pass O(running + admitted), the admission walk also
O(segments) per request looked at; per coalesced decode run O(running + passes).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.lpm import cached_match, lpm_order
from simmodel.engine.radix_cache import RadixCache
from simmodel.engine.request import DONE, RUNNING, WAITING, EngineRequest
from simmodel.engine.emit import emit, emit_run
from simmodel.engine.scheduler import PassPlan
from simmodel.engine.timing import TimingModel, batch_new_tokens
from simmodel.workload.model import RunPrompt

RETRACT_DECODE_STEPS = 20    # in the new_token_ratio reset after a retraction


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


class SglangScheduler:
    """Waiting queue, running batch and radix KV pool of one rank, and the rules above
    (the interface of ``VllmScheduler`` that the worker process drives)."""

    lpm_full_recompute = False   # tests: LPM by the original full recompute (same results)

    def __init__(self, engine: EngineConfig, timing: TimingModel, *, record_events: bool = False,
                 role: str = "aggregated"):
        self.role = role
        self.bs = engine.effective_block_size
        self.num_blocks = engine.num_gpu_blocks
        self.max_seqs = engine.max_num_seqs
        self.caching = engine.enable_prefix_caching
        self.max_model_len = engine.max_model_len
        g = engine.sglang
        self.lpm = g.schedule_policy == "lpm"
        self.max_prefill = g.max_prefill_tokens
        self.chunk = g.chunked_prefill_size
        self.clip = g.clip_max_new_tokens
        self.init_ratio = 0.7 * g.schedule_conservativeness
        self.min_ratio = self.init_ratio * 0.14
        self.decay = (self.init_ratio - self.min_ratio) / 600
        self.ratio = self.init_ratio
        self.interval = engine.prefill_decode_interval
        self.forced_decode = 0
        self.timing = timing
        self.kv = RadixCache(self.num_blocks, self.bs, caching=self.caching,
                             record_events=record_events)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.committed_prefill_tokens = 0
        self.preemptions = 0
        self.cache_hit_tokens = 0
        self.admit_prefill = True
        self.held = 0
        self._lease: dict[int, _Lease] = {}

    # -- queue ------------------------------------------------------------------------
    def enqueue(self, req: EngineRequest) -> None:
        req.state = WAITING
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def cancel(self, req: EngineRequest) -> bool:
        if req.state == WAITING and req in self.waiting:
            self.waiting.remove(req)
            self._release(req, cache=False)
        elif req.state == RUNNING:
            self.running.remove(req)
            self._release(req, cache=True)
        else:
            return False
        req.state = DONE
        req.status = "cancelled"
        return True

    # -- tokens and leases ------------------------------------------------------------------
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

    # -- one pass -----------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan:
        """Form the next pass at time ``now`` (mutates queues and the pool)."""
        plan = PassPlan()
        if self.role == "decode" and self.waiting:
            self._admit_transferred(now)
        if not (self.forced_decode > 0 and self.running):
            self._prefill(now, plan)
        if plan.entries:
            if self.interval:
                self.forced_decode = self.interval
        else:
            self._decode(plan)
            if self.forced_decode:
                self.forced_decode -= 1
            if not (plan.entries or plan.rejected or self.running or self.held) and self.waiting:
                self._reject_head(plan)
        self._cost(plan)
        plan.kv_blocks_active = self.kv.active_blocks
        return plan

    def _admit_transferred(self, now: float) -> None:
        """Decode role: requests whose prompt KV arrived join the running batch (their
        slots were reserved at the handoff), in arrival order, up to max_num_seqs."""
        keep = deque()
        running = self.running
        for r in self.waiting:
            if r.transferred and r.admissions == 0 and len(running) < self.max_seqs:
                r.state = RUNNING
                r.first_admit_ms = now
                r.admissions = 1
                running.append(r)
            else:
                keep.append(r)
        self.waiting = keep

    def _rejects(self, r: EngineRequest) -> bool:
        """A prompt ``>= max_model_len``, or one larger than the pool (which could never
        be held; refused before the run when known then)."""
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            return True
        return -(-r.prompt_len // self.bs) > self.num_blocks

    def _match(self, r: EngineRequest, lease: _Lease) -> tuple:
        """The admission walk's lookup of a fresh request (the LPM memo, same result)."""
        if self.lpm_full_recompute:
            return self.kv.match(self._segs(r, lease), r.seq_len - 1)
        return cached_match(self, r, lease)

    def _reject_head(self, plan: PassPlan) -> None:
        """Nothing runs and nothing is held, yet the walk's first request does not fit:
        the pool will never be emptier, so it never will (its prompt plus the reserve
        for its output exceed the pool, or its chunk ``max_prefill_tokens``).  Rejected,
        its hold released (the reference aborts the replay)."""
        r = self.waiting.popleft()
        self._release(r, cache=False)
        r.computed = 0
        r.state = DONE
        r.status = "rejected"
        plan.rejected.append(r)

    def _prefill(self, now: float, plan: PassPlan) -> None:
        """The admission walk (module docstring); fills ``plan`` if a batch forms."""
        waiting = self.waiting
        if not waiting:
            return
        n_run = len(self.running)
        if n_run >= self.max_seqs:
            return
        kv = self.kv
        bs = self.bs
        clip = self.clip
        ratio = self.ratio
        offset = 0.0
        for r in self.running:
            left = r.max_output - r.generated
            offset += (left if left < clip else clip) * ratio
        rem_input = self.max_prefill
        rem_chunk = self.chunk
        if self.lpm and self.caching:
            lpm_order(self)
            waiting = self.waiting
        entries = plan.entries
        room = kv.free_tokens + kv.evictable          # as the walk starts (locks below do not count)
        for r in waiting:                      # (stops at the first that fails)
            if n_run + len(entries) >= self.max_seqs:
                break
            if r.admissions == 0 and self._rejects(r):
                r.state = DONE
                r.status = "rejected"
                plan.rejected.append(r)
                continue
            lease = self._get_lease(r)
            seq_len = r.seq_len
            if r.computed:
                # a chunked prompt continues where it stopped (no new prefix match)
                hit, node, start = 0, lease.node, r.computed
            else:
                hit, node = self._match(r, lease)
                start = hit
            extend = seq_len - start
            partial = extend > rem_chunk
            take = rem_chunk // bs * bs if partial else extend
            if take <= 0:
                break
            charged = -(-take // bs) * bs
            left = r.max_output - r.generated
            out = 0 if partial else (left if left < clip else clip)
            if not (charged + out < room - offset
                    and charged <= rem_input and charged <= rem_chunk):
                break
            # hold the prefix; the new slots must then still be obtainable
            fresh = r.computed == 0
            kv.lock(node, touch=True)
            base = hit if fresh else lease.tree
            need = -(-(start + take - base) // bs) * bs - (
                0 if fresh else self._slots(lease, lease.kv))
            if need > kv.free_tokens + kv.evictable:
                kv.unlock(node)
                break
            if fresh:
                kv.free_private(self._slots(lease, lease.kv))
                kv.unlock(lease.node)
                lease.node, lease.tree, lease.kv = node, hit, hit
            else:
                kv.unlock(node)
            # its slots are taken now (evicting): later requests match what is left
            self._grow(lease, start + take)
            offset += charged + out
            rem_input -= charged
            rem_chunk -= charged
            entries.append((r, start, take))
            if r.computed == 0:
                # a (re)admission, not the continuation of a chunked prompt
                if r.admissions == 0:
                    r.first_admit_ms = now
                    r.first_reused = hit
                if hit > r.reused:
                    r.reused = hit
                self.cache_hit_tokens += hit
                r.admissions += 1
            r.computed = start + take
            r.pass_take = take
            if partial:
                break
        for r in plan.rejected:
            waiting.remove(r)
        # the admitted requests are now the head of the queue
        for _ in entries:
            waiting.popleft()
        plan.admitted = len(entries)

    def _step_need(self, reqs) -> int:
        """Slots one decode step of ``reqs`` takes: a page for each request whose
        private pages are full."""
        bs = self.bs
        if bs == 1:
            return len(reqs)
        lease = self._lease
        n = 0
        for r in reqs:
            q = lease[r.uid]
            if (q.kv - q.tree) % bs == 0:
                n += 1
        return n * bs

    def _decode(self, plan: PassPlan) -> None:
        """A decode step of the whole running batch (retracting first if it does not
        fit)."""
        running = self.running
        if not running:
            return
        kv = self.kv
        if len(running) > 1 and kv.free_tokens + kv.evictable < self._step_need(running):
            self._retract(plan)
        else:
            self.ratio = max(self.ratio - self.decay, self.min_ratio)
        # one slot more for each (a page when its pages are full), taken at once; a
        # lone request may find none left and then goes without
        running = self.running
        grow = kv.alloc(self._step_need(running))
        lease = self._lease
        entries = plan.entries
        for r in running:
            if grow:
                lease[r.uid].kv += 1
            entries.append((r, r.seq_len - 1, 1))

    def _retract(self, plan: PassPlan) -> None:
        """Decode out of memory: retract the request with the fewest generated tokens
        (ties: running order; measured, the prompt length does not matter) until the
        step fits or one request is left.  Its computed tokens are cached; it goes to
        the back of the queue and recomputes later.  ``new_token_ratio`` is reset."""
        kv = self.kv
        order = deque(sorted(self.running, key=lambda r: r.generated))
        retracted = []
        while len(order) > 1 and kv.free_tokens + kv.evictable < self._step_need(order):
            v = order.popleft()
            self._release(v, cache=True)
            v.computed = 0
            v.state = WAITING
            retracted.append(v)
            self.preemptions += 1
        keep = {id(r) for r in order}
        self.running = [r for r in self.running if id(r) in keep]
        self.waiting.extend(retracted)
        plan.preempted = True
        decoded = sum(r.generated for r in self.running)
        max_new = sum(r.max_output for r in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (max_new + 1))

    def _cost(self, plan: PassPlan) -> None:
        """Duration: P over the prefill entries (integer-mean aggregation of §2.1) or D
        over the decoders; a prefill worker adds no D, a decode worker no P."""
        n = s_isl = s_pfx = n_dec = dec_tokens = committed = 0
        for r, before, take in plan.entries:
            if r.state == RUNNING:
                n_dec += 1
                dec_tokens += r.seq_len
                continue
            committed += take
            n += 1
            s_isl += before + take            # recomputed generated tokens are charged too
            s_pfx += before
        plan.num_prefill = n
        plan.num_decode = n_dec
        plan.decode_tokens = dec_tokens
        plan.committed_tokens = committed
        if n:
            plan.prefill_tokens = batch_new_tokens(n, s_isl, s_pfx)
        timing = self.timing
        role = self.role
        plan.duration_ms = ((timing.prefill_ms(n, s_isl, s_pfx) if role != "decode" else 0.0)
                            + (timing.decode_ms(n_dec, dec_tokens) if role != "prefill" else 0.0))

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int) -> list[EngineRequest]:
        """Settle a pass at its end: prompts computed in it are cached, their requests
        emit their first (or, after a retraction, next) token and join the running
        batch; decoders emit a token; requests reaching their output length complete
        (their tokens are cached, their slots released).  Returns the completed ones."""
        if not plan.num_prefill:
            return self._finish_decode(plan, end_ms, pass_idx)
        done = []
        self.committed_prefill_tokens += plan.committed_tokens
        promoted = []
        chunked = []
        # The token a completed prompt emits needs a slot if the request goes on
        # decoding; the slots are taken before any prompt is cached (measured: before
        # duplicate prompt tokens return to the pool).  With none left (a re-admission
        # whose locked prefix took the last evictable slots) it emits nothing now and
        # decodes in a later pass.
        mute = set()
        for r, before, take in plan.entries:
            if (r.state == WAITING and r.computed == r.seq_len
                    and r.generated + 1 < r.max_output):
                lease = self._lease[r.uid]
                if not self._grow(lease, lease.kv + 1):
                    mute.add(id(r))
        for r, before, take in plan.entries:
            r.pass_take = 0
            lease = self._lease[r.uid]
            if r.state == WAITING:
                # a prefill: its computed tokens join the tree (a prefill worker's
                # finished prompt only when its source is released -- measured)
                if not (self.role == "prefill" and r.computed == r.seq_len):
                    self._cache(r, lease, r.computed)
                if r.computed < r.seq_len:
                    chunked.append(r)          # mid-prompt chunk: back to the head
                    continue
                promoted.append(r)
                if id(r) in mute:
                    continue
            finished = emit(r, 1, end_ms, pass_idx, plan.first_tokens)
            r.computed = r.seq_len
            if finished:
                r.state = DONE
                r.terminal_ms = end_ms
                if self.role == "prefill":
                    r.status = "prefilled"
                    self.held += 1
                else:
                    r.status = "completed"
                    self._release(r, cache=True)
                done.append(r)
        for r in reversed(chunked):
            self.waiting.appendleft(r)
        for r in promoted:
            if r.state != DONE:
                r.state = RUNNING
                self.running.append(r)
        if done:
            self.running = [r for r in self.running if r.state == RUNNING]
        return done

    def _finish_decode(self, plan: PassPlan, end_ms: float, pass_idx: int) -> list:
        """``finish`` for a decode pass (the hot path: one token per running request)."""
        done = []
        first_tokens = plan.first_tokens
        for r, _, _ in plan.entries:
            finished = emit(r, 1, end_ms, pass_idx, first_tokens)   # decode role: may be
            r.computed = r.seq_len                                   # its first token
            if finished:
                r.state = DONE
                r.terminal_ms = end_ms
                r.status = "completed"
                self._release(r, cache=True)
                done.append(r)
        if done:
            self.running = [r for r in self.running if r.state == RUNNING]
        return done

    # -- disaggregated handoff --------------------------------------------------------------
    def release_source(self, r: EngineRequest) -> None:
        """Prefill side: the transfer is over; the held prompt joins the tree (measured:
        not before) and its slots become evictable."""
        self._release(r, cache=True)
        self.held -= 1

    def waiting_on_holds(self) -> bool:
        """Slots are held outside the running batch (sources awaiting their transfer,
        reserved destinations): an empty pass is not a dead end."""
        return self.held > 0

    def reserve(self, r: EngineRequest) -> int | None:
        """Decode side: hold slots for ``r``'s whole prompt, reusing the cached prefix
        resident here.  Returns the prompt tokens that must be transferred (whole
        pages), or None if the pool cannot supply the slots yet (nothing changes)."""
        kv = self.kv
        lease = self._get_lease(r)
        plen = r.prompt_len
        hit, node = kv.match(lease.prompt_segs, plen)
        kv.lock(node)
        need = -(-(plen - hit) // self.bs) * self.bs
        if need > kv.free_tokens + kv.evictable:
            kv.unlock(node)
            del self._lease[r.uid]
            return None
        lease.node, lease.tree, lease.kv = node, hit, hit
        self._grow(lease, plen)
        self.held += 1
        return need

    def unreserve(self, r: EngineRequest) -> None:
        """Decode side: the prefill of a reserved request was rejected; its slots are
        freed (nothing was transferred into them, so nothing joins the tree)."""
        self._release(r, cache=False)
        self.held -= 1

    def activate(self, r: EngineRequest) -> int:
        """Decode side: the prompt's KV has arrived; the request decodes from the next
        pass on (it joins the running batch when that pass is formed).  Measured: the
        arrived prompt joins this worker's radix tree at once, so the pages it shares
        with prompts cached here since its reservation (another transferred prompt, a
        completed request) return to the pool.  Returns the slots so freed."""
        self.held -= 1
        r.transferred = True
        r.computed = r.seq_len
        lease = self._lease.get(r.uid)
        free_before = self.kv.free_tokens
        if lease is not None:
            self._cache(r, lease, lease.kv)
        self.enqueue(r)
        return self.kv.free_tokens - free_before

    # -- coalesced decode runs ------------------------------------------------------------
    def decode_run(self, max_passes: int = 4096):
        """If the batch cannot change until a request completes, the pass durations of
        that run of pure-decode passes (numpy array, length >= 2) and the decoders'
        total length; else None.

        Frozen means: no prefill can form (nothing waits, or the running batch is at
        ``max_num_seqs``), and the pool can supply every slot the run needs (so
        nothing is retracted).  The run ends with the pass in which the first request
        completes.  Nothing is mutated: ``commit_decode_run`` applies passes."""
        running = self.running
        n = len(running)
        if n == 0 or self.role == "prefill" or (self.waiting and n < self.max_seqs):
            return None
        k = max_passes
        total = 0
        for r in running:
            left = r.max_output - r.generated
            if left < k:
                k = left
            total += r.seq_len
        if k < 2:
            return None
        lease = self._lease
        need = 0
        for r in running:
            q = lease[r.uid]
            need += self._slots(q, q.kv + k) - self._slots(q, q.kv)
        if need > self.kv.free_tokens + self.kv.evictable:
            return None
        active = total + n * np.arange(k, dtype=np.int64)
        return self.timing.decode_ms_array(n, active), total

    def commit_decode_run(self, durations, total: int, m: int, start: float,
                          pass_idx0: int, passes, kv_events: list | None) -> list:
        """Apply the first ``m`` passes of a run from ``decode_run`` (started at
        ``start``): slots taken pass by pass (evicting as per-pass scheduling would),
        ``new_token_ratio`` decayed once per pass, tokens, pass-log rows, completions.
        Returns the completed requests."""
        if m == 0:
            return []
        running = self.running
        n = len(running)
        bs = self.bs
        kv = self.kv
        lease = self._lease
        ends = np.add.accumulate(np.concatenate(([start], durations[:m])))
        # slots per pass: a page for each request whose private pages are full
        per_pass = np.zeros(m, dtype=np.int64)
        for r in running:
            q = lease[r.uid]
            j = (-(q.kv - q.tree)) % bs          # first pass j where it needs a page
            if j < m:
                per_pass[j::bs] += bs
        kv_active = np.empty(m, dtype=np.int64)
        ratio, decay, floor = self.ratio, self.decay, self.min_ratio
        for j in range(m):
            if per_pass[j]:
                kv.alloc(int(per_pass[j]))
                if kv_events is not None:
                    for ev in kv.drain_events():
                        kv_events.append((float(ends[j + 1]),) + ev)
            kv_active[j] = kv.active_blocks
            ratio = ratio - decay
            if ratio < floor:
                ratio = floor
        self.ratio = ratio
        self.forced_decode = max(0, self.forced_decode - m)
        for r in running:
            lease[r.uid].kv += m
        starts = ends[:-1]
        stops = ends[1:]
        first_end = float(stops[0])
        last_end = float(stops[-1])
        last_idx = pass_idx0 + m - 1
        passes.add_run(starts, stops, n, total + n * np.arange(m, dtype=np.int64), kv_active)
        done = []
        for r in running:
            finished = emit_run(r, m, pass_idx0, last_idx, first_end, last_end)
            r.computed = r.seq_len
            if finished:
                r.state = DONE
                r.status = "completed"
                r.terminal_ms = last_end
                self._release(r, cache=True)
                done.append(r)
        if done:
            self.running = [r for r in running if r.state == RUNNING]
            if kv_events is not None:
                for ev in kv.drain_events():
                    kv_events.append((last_end,) + ev)
        return done
