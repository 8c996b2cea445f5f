"""vLLM-style continuous-batching scheduler of one worker rank (reference §3.2).  Pure.

One forward pass, formed by ``schedule(now)`` and settled at its end (``settle``, which
calls this backend's ``finish``):

1. Running requests first, in admission order: each takes ``min(seq_len − computed,
   budget)`` tokens (1 for a decoder, the rest of the prompt for a chunking prefill).  KV
   blocks are grown to cover the granted tokens; when the pool cannot supply them the
   newest (lifo) or oldest (fifo) running request is preempted (blocks freed, computed
   reset, back to the *front* of waiting, tokens it was granted this pass refunded) until
   the growth succeeds or the victim is the request itself.
2. Unless this pass preempted, waiting requests are admitted strictly FCFS while
   ``running < max_num_seqs`` and budget remains: rejected if the prompt is
   ``>= max_model_len`` or needs more blocks than the pool has; admitted only if the
   blocks of its whole sequence minus its cached prefix fit in ``num_blocks − active``
   less the inactive blocks of that prefix (they become active when it is taken) --
   the whole sequence even when only a chunk is granted (otherwise admission stops:
   head-of-line); a prefix hit is capped so at least one token is computed.  Full
   blocks are cached as soon as they are scheduled, so a later request in the same pass
   can hit them; one whose hash is already cached stays a copy of its own (kv_cache.py).
   With speculative decoding (``aic_nextn``) every request that will emit then holds KV
   for its drafts too, preempting when it cannot (vllm_mtp.py).
3. Cost: ``prefill_ms`` over requests with prompt tokens in the pass (recomputed
   generated tokens are free) + ``decode_ms`` over requests that emit a token from an
   already computed prompt (their current length counts).  Requests finishing their
   first prefill emit their first token at the pass end but are not in the decode term.
4. At the pass end every request whose sequence is fully computed emits one token (a
   burst with speculative decoding, whose rejected drafts' blocks are freed); requests
   reaching their output length complete and release their blocks.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.api import PassPlan  # noqa: F401 (its former home: re-exported)
from simmodel.engine.base import SchedulerBase
from simmodel.engine.kv_cache import KvCache
from simmodel.engine.emit import emit
from simmodel.engine.request import DONE, RUNNING, WAITING, EngineRequest
from simmodel.engine.role import AGGREGATED, Role
from simmodel.engine.timing import TimingModel
from simmodel.engine.vllm_handoff import VllmHandoff
from simmodel.engine.vllm_mtp import VllmBursts
from simmodel.engine.vllm_runs import VllmDecodeRuns


class VllmScheduler(VllmHandoff, VllmDecodeRuns, VllmBursts, SchedulerBase):
    """Waiting queue, running list and KV cache of one rank, and the pass rules above."""

    def __init__(self, engine: EngineConfig, timing: TimingModel, *, record_events: bool = False,
                 role: str | Role = AGGREGATED, mtp_rng: np.random.Generator | None = None):
        super().__init__(engine, timing, role)
        self.max_batched = engine.max_num_batched_tokens
        self.lifo = engine.preemption_mode == "lifo"
        self.chunked = engine.enable_chunked_prefill
        self.kv = KvCache(self.num_blocks, self.bs, caching=self.caching,
                          record_events=record_events)
        # speculative decoding (aic_nextn): conditional draft acceptance rates
        self.mtp_rates = engine.accept_rates if self.role.decodes else ()
        self.mtp_rng = mtp_rng

    # -- queue ------------------------------------------------------------------------
    def cancel(self, req: EngineRequest) -> bool:
        """Drop a waiting or running request now (its blocks are released); the caller
        only cancels between passes.  False if it is no longer here."""
        if req.state == WAITING and req in self.waiting:
            self.waiting.remove(req)
        elif req.state == RUNNING:
            self.running.remove(req)
            self._release(req)
        else:
            return False
        req.state = DONE
        req.status = "cancelled"
        return True

    # -- KV helpers -------------------------------------------------------------------
    def _grow(self, r: EngineRequest, total_tokens: int, real_tokens: int = -1) -> bool:
        """Hold blocks for ``total_tokens`` of ``r`` and cache the full ones among its
        first ``real_tokens`` (default: all of them; fewer when the rest are drafts)."""
        bs = self.bs
        need = -(-total_tokens // bs) - (len(r.cached) + r.n_private)
        if need > 0:
            if not self.kv.allocate(need):
                return False
            r.n_private += need
        if self.caching:
            full = (total_tokens if real_tokens < 0 else real_tokens) // bs
            cached = r.cached
            if full > len(cached):
                new = r.seq.ensure(full)[len(cached):full]
                r.n_private -= len(new)               # these private blocks became cached
                cached.extend(self.kv.register_many(new))   # (copies of resident ones)
        return True

    def _release(self, r: EngineRequest) -> None:
        self.kv.release(r.cached, r.n_private)
        r.cached = []
        r.n_private = 0

    def free_completed(self, req: EngineRequest) -> None:
        """Its blocks go back to the pool (full ones stay cached, inactive)."""
        self._release(req)

    def choose_victim(self, candidates: Sequence[EngineRequest]) -> EngineRequest:
        """The newest running request (``lifo``) or the oldest (``fifo``)."""
        return candidates[-1] if self.lifo else candidates[0]

    def _preempt(self, v: EngineRequest, plan: PassPlan) -> int:
        """Preempt ``v``; returns the budget refunded (tokens it was granted this pass)."""
        self._release(v)
        v.computed = 0
        v.state = WAITING
        self.running.remove(v)
        self.waiting.appendleft(v)
        self.preemptions += 1
        refund = v.pass_take
        if refund:
            plan.entries[:] = [e for e in plan.entries if e[0] is not v]   # in place
            v.pass_take = 0
        return refund

    def rejects(self, r: EngineRequest) -> bool:
        """At its first admission: a prompt ``>= max_model_len`` or larger than the pool
        (as the reference), or whose whole sequence can never fit it (the KV of prompt +
        output - 1 tokens; refused before the run when known then, see
        ``simmodel.sim.check_schedulable``)."""
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            return True
        return -(-(r.prompt_len + max(r.max_output - 1, 0)) // self.bs) > self.num_blocks

    def _reject_head(self, plan: PassPlan) -> None:
        """Nothing runs and nothing is held, yet the queue head cannot be admitted: the
        pool and the budget will never be emptier, so it never can be (a preempted
        request whose recompute exceeds the budget with chunking off, a prompt built at
        run time...).  It is rejected, where the reference aborts the replay."""
        r = self.waiting.popleft()
        self._release(r)
        self._reject(r, plan)

    # -- one pass ---------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan:
        """Form the next batch at time ``now`` (mutates queues and KV)."""
        plan = PassPlan()
        entries = plan.entries
        budget, preempted = self._grant_running(plan)
        plan.preempted = preempted
        if not preempted:
            n = len(entries)
            if self.reservations_waiting is not None and self.reservations_waiting():
                budget = self._admit_transferred_behind(now, plan, budget)
            else:
                budget = self.admit_waiting(now, plan, budget)
                if self.role.receives_prompts and self.waiting and not self.running:
                    budget = self._admit_transferred_behind(now, plan, budget)
            plan.admitted = len(entries) - n
            if not (entries or plan.rejected or self.running or self.held) and self.waiting:
                self._reject_head(plan)
        victims = self._bursts(plan) if self.mtp_rates else ()
        self._cost(plan, victims)
        for r, _, _ in entries:
            r.pass_take = 0
        plan.kv_blocks_active = self.kv.active_blocks
        return plan

    def _grant_running(self, plan: PassPlan) -> tuple[int, bool]:
        """Step 1: running requests take their tokens, growing their KV (preempting when
        the pool cannot supply it).  Returns (the budget left, whether it preempted)."""
        entries = plan.entries
        budget = self.max_batched
        preempted = False
        running = self.running
        # Walk the live list by position, as the reference does: when a fifo victim
        # ahead of ``r`` leaves the list, the request right behind ``r`` slides into
        # the next position already visited and sits this pass out.
        bs, caching, kv = self.bs, self.caching, self.kv
        gated = not self.admit_prefill        # attention DP: no prefill work this step
        fast_ok = not self.mtp_rates          # (drafts: blocks follow vllm_mtp's rules)
        i = 0
        while i < len(running):
            r = running[i]
            comp = r.computed
            if gated and (r.seq_len - comp > 1 or not r.generated):
                i += 1                        # (a prompt's last token is prefill too)
                continue
            if fast_ok and r.seq_len - comp == 1 and budget > 0:
                # Decoder fast path: KV work only at a block boundary (a new block when
                # ``comp`` fills its blocks exactly, caching when ``comp + 1`` fills one).
                if comp % bs == 0:
                    fast = kv.allocate(1)     # (no block: the general path preempts)
                    if fast:
                        r.n_private += 1
                        if caching and bs == 1:
                            self._grow(r, comp + 1)
                else:
                    fast = not (caching and (comp + 1) % bs == 0)
                if fast:
                    entries.append((r, comp, 1))
                    r.pass_take = 1
                    r.computed = comp + 1
                    budget -= 1
                    i += 1
                    continue
            want = r.seq_len - comp
            if not self.chunked and want > budget:
                break
            take = want if want < budget else budget
            if take <= 0:
                break
            while not self._grow(r, r.computed + take):
                victim = self.choose_victim(running)
                budget += self._preempt(victim, plan)
                preempted = True
                if victim is r:
                    break
            if r.state != RUNNING:
                continue                      # r itself left: position i holds the next
            entries.append((r, r.computed, take))
            r.pass_take = take
            r.computed += take
            budget -= take
            i += 1
        return budget, preempted

    def admit_waiting(self, now: float, plan: PassPlan, budget: int) -> int:
        """Step 2: strict FCFS admission while ``max_num_seqs`` and the budget allow; a
        head that does not fit stops it (head-of-line)."""
        waiting, running = self.waiting, self.running
        while waiting and len(running) < self.max_seqs:
            r = waiting[0]
            if budget <= 0 and (r.admissions or r.transferred or not self.rejects(r)):
                break                          # (a head to reject goes even without budget)
            if r.transferred and r.admissions == 0:
                waiting.popleft()
                self._admit_transferred(r, now, plan)
                budget -= 1
                continue
            if r.admissions == 0 and self.rejects(r):
                if not self.admit_prefill:
                    break                      # attention DP: not a prefill step
                waiting.popleft()
                self._reject(r, plan)
                continue
            taken = self._admit_head(r, now, plan, budget)
            if taken is None:
                break
            budget -= taken
        return budget

    def _admit_head(self, r: EngineRequest, now: float, plan: PassPlan,
                    budget: int) -> int | None:
        """Admit the waiting head ``r`` if its whole sequence fits; the tokens it takes,
        or None (nothing changed) if it must wait."""
        kv, bs = self.kv, self.bs
        seq_len = r.seq_len
        hit_blocks = 0
        hashes = None
        if self.caching:
            cap = (seq_len - 1) // bs
            hashes = r.seq.ensure(seq_len // bs)
            hit_blocks = kv.lookup(hashes, cap)
            if hit_blocks and self.mtp_rates:
                hit_blocks -= 1            # speculative decoding recomputes the last
                                           # cached block (measured on the reference)
        hit_keys = kv.hit_keys(hashes[:hit_blocks]) if hit_blocks else []
        # Capacity for the whole sequence, not just this pass's chunk: its blocks
        # beyond the cached prefix must fit in what the pool can supply (free +
        # evictable, i.e. num_blocks - active) once the prefix is held -- inactive
        # prefix hits then become active, so they cannot also count as room for the
        # rest.  Otherwise wait (head-of-line), without touching the cache (no LRU
        # refresh of the prefix).  The chunk's blocks are then always available.
        need = -(-seq_len // bs) - hit_blocks
        avail = kv.available
        if need > avail or need > avail - self._inactive_hits(hit_keys):
            return None
        hit = hit_blocks * bs
        want = seq_len - hit
        if want > 1 and not self.admit_prefill:
            return None                    # attention DP: not a prefill step
        if not self.chunked and want > budget:
            return None
        take = want if want < budget else budget
        if not self._start(r, hit_keys, hit + take, plan):
            return None                    # (only with drafts: vllm_mtp._make_room)
        r.pass_take = take
        if r.admissions == 0:
            r.first_admit_ms = now
            r.first_reused = hit
        self.cache_hit_tokens += hit
        if hit > r.reused:
            r.reused = hit
        r.admissions += 1
        plan.entries.append((r, hit, take))
        return take

    def _start(self, r: EngineRequest, hit_keys, tokens: int, plan: PassPlan) -> bool:
        """Move the waiting head ``r`` into the running set, holding its cached prefix
        (the copies ``hit_keys``) and the blocks for its first ``tokens`` tokens; False
        (``r`` back at the head, holding nothing) if no room could be made for them."""
        for k in hit_keys:
            self.kv.acquire(k)
        r.cached = list(hit_keys)
        r.n_private = 0
        self.waiting.popleft()
        if not self._grow(r, tokens) and not self._make_room(r, tokens, plan):
            return False                   # (only with drafts: vllm_mtp._make_room)
        self.running.append(r)
        r.state = RUNNING
        r.computed = tokens
        return True

    def _admit_transferred_behind(self, now: float, plan: PassPlan, budget: int) -> int:
        """Decode role: admit the transferred requests, passing the others (this
        worker's own preempted requests).  Measured on the reference
        (``long_disagg_pending``, ``long_disagg_deferred_readmit``): while reservations
        wait on this rank (for its blocks, or deferred to its pass end), a preempted
        request is not re-admitted (the reservations get freed blocks first)
        and activated requests go in past it; otherwise the preempted head blocks them
        (strict FCFS) until it fits.  With nothing running they pass it too: a pool full
        of reservations could otherwise never drain."""
        running = self.running
        for r in list(self.waiting):
            if budget <= 0 or len(running) >= self.max_seqs:
                break
            if r.transferred and r.admissions == 0:
                self.waiting.remove(r)
                self._admit_transferred(r, now, plan)
                budget -= 1
        return budget

    def _admit_transferred(self, r: EngineRequest, now: float, plan: PassPlan) -> None:
        """Its prompt's KV is already here (reserved at the handoff): it joins the batch
        as a decoder of the prompt's length, taking one token of the budget."""
        self.running.append(r)
        r.state = RUNNING
        r.computed = r.seq_len
        r.pass_take = 1
        r.first_admit_ms = now
        r.admissions = 1
        plan.entries.append((r, r.seq_len - 1, 1))

    def _cost(self, plan: PassPlan, victims=()) -> None:
        """Step 3: P over the requests with prompt tokens (recomputed generated tokens
        are free; ``victims``, preempted for their drafts' KV, included: vllm_mtp.py), D
        over those emitting from an already computed prompt."""
        n = s_isl = s_pfx = n_dec = dec_tokens = committed = 0
        chunks = [] if self.composed else None      # (new, before) of each prompt entry
        for r, before, take in victims:
            if before < r.prompt_len and not r.transferred:
                upto = min(before + take, r.prompt_len)
                committed += take
                n += 1
                s_isl += upto
                s_pfx += before
                if chunks is not None:
                    chunks.append((upto - before, before))
        # with speculative decoding a request finishing its prompt also runs the decode step
        mtp = bool(self.mtp_rates)
        for r, before, take in plan.entries:
            after = before + take
            plen = r.prompt_len
            if before < plen and r.transferred:
                if r.admissions > 1:          # decode side, re-admitted after preemption:
                    committed += take         # counted (measured), not costed
            elif before < plen:
                committed += take             # recomputed generated tokens included
                n += 1
                s_isl += after if after < plen else plen
                s_pfx += before
                if chunks is not None:
                    chunks.append(((after if after < plen else plen) - before, before))
            if (r.generated or r.transferred or mtp) and after == r.seq_len:
                n_dec += 1
                dec_tokens += r.seq_len
        self._charge(plan, n, s_isl, s_pfx, n_dec, dec_tokens, committed, chunks)

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int,
               first_tokens: list) -> list[EngineRequest]:
        """Step 4: settle a pass at its end: emit tokens, complete requests.  Returns the
        requests that completed."""
        done: list = []
        mtp = bool(self.mtp_rates)
        self.committed_prefill_tokens += plan.committed_tokens
        for r, before, take in plan.entries:
            if r.computed != r.seq_len:
                continue                       # mid-prompt chunk: nothing to emit
            b = r.burst
            if b > 1:
                r.computed += b - 1            # the burst's KV was taken at scheduling
                r.burst = 1
            if emit(r, b, end_ms, pass_idx, first_tokens):
                self._end(r, end_ms, done)
            elif mtp:
                self._drop_drafts(r)           # rejected drafts' blocks go back
        if done:
            self._drop_finished()
        return done
