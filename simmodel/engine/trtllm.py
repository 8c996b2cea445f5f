"""TRT-LLM scheduler of one worker rank: the vLLM core with GUARANTEED_NO_EVICT (§3.5).  Pure.

Everything about a pass is the vLLM scheduler's (``VllmScheduler``: running requests
first, then strict FCFS admission, chunked prefill, the same cost and prefix cache), except
admission, which reserves every request's KV to completion so that nothing is ever
preempted:

* A request's *footprint* is ``ceil((prompt + max_output) / block_size)`` blocks, its
  whole sequence at completion (the last emitted token counted too).  ``max_output`` is
  first clamped to the pool: ``max_output <= num_blocks * block_size - prompt``, so a lone
  request always fits; a prompt of ``num_blocks * block_size`` tokens or more is rejected
  (the pool acts as a ``max_model_len``).
* A running request still *owes* ``footprint - blocks it holds`` (prefix blocks it shares
  with other requests count as held).
* The waiting head is admitted only if ``footprint - cached prefix blocks`` plus what every
  running request still owes fits in what the pool can supply (``num_blocks - active``,
  free + evictable) once its prefix is held (minus its inactive prefix hits, as in vLLM).
  Otherwise admission stops for this pass (head-of-line), as do ``max_num_seqs`` and the
  chunking rules, as in vLLM.
* Hence a decode step can never lack a block: running requests' growth is covered by what
  they owe.  A pass that would need to preempt raises (the reference aborts the replay
  with "GUARANTEED_NO_EVICT required preemption").
* The prefix hit is not capped at ``(len - 1) // block_size`` blocks: a block-aligned prompt
  whose every block is cached computes nothing.  It joins the batch like a decoder whose
  prompt KV was transferred in: no prefill, its prompt length in the decode term, no
  budget, its first token at the pass end.
* Budget: admission goes on with the budget spent only for such fully cached prompts, and
  stops after the first one admitted with no budget left.  A head that must be rejected is
  rejected even with the budget spent.

While requests only decode, what running requests owe and what the pool can supply fall by
the same amount at every new block (an eviction of one of the head's inactive prefix hits
raises its need by as much as it lowers its inactive hits), so a head that does not fit
keeps not fitting until a request completes: a coalesced decode run may then cover the
passes even with requests waiting.
"""
from __future__ import annotations

from collections.abc import Sequence

from simmodel.config import EngineConfig
from simmodel.engine.api import PassPlan
from simmodel.engine.request import EngineRequest
from simmodel.engine.role import AGGREGATED, Role, role_of
from simmodel.engine.scheduler import VllmScheduler
from simmodel.engine.timing import TimingModel


class NoEvictViolation(RuntimeError):
    """A running request could not grow although its blocks were reserved at admission."""


class TrtllmScheduler(VllmScheduler):
    """``VllmScheduler`` with guaranteed-no-evict admission and no preemption."""

    def __init__(self, engine: EngineConfig, timing: TimingModel, *, record_events: bool = False,
                 role: str | Role = AGGREGATED, **kwargs):
        if role_of(role) is not AGGREGATED:
            raise ValueError("the trtllm backend has no disaggregated mode")
        super().__init__(engine, timing, record_events=record_events, role=role, **kwargs)
        self.pool_tokens = self.num_blocks * self.bs
        limit = self.pool_tokens
        if self.max_model_len is not None and self.max_model_len < limit:
            limit = self.max_model_len
        self.len_limit = limit          # prompts this long or longer are rejected

    # -- queue ------------------------------------------------------------------------
    def enqueue(self, req: EngineRequest) -> None:
        # max_output clamped to the pool (a no-op when max_model_len already cut more)
        room = self.pool_tokens - req.prompt_len
        if 0 < room < req.max_output:
            req.max_output = room
        super().enqueue(req)

    def rejects(self, r: EngineRequest) -> bool:
        """A prompt as long as the pool (or ``max_model_len``) or longer."""
        return r.prompt_len >= self.len_limit

    # -- reservations -----------------------------------------------------------------
    def footprint(self, r: EngineRequest) -> int:
        """Blocks ``r`` holds at completion: its whole sequence, last token included."""
        return -(-(r.prompt_len + r.max_output) // self.bs)

    def owed(self) -> int:
        """Blocks the running requests may still take before they complete."""
        bs = self.bs
        return sum(-(-(r.prompt_len + r.max_output) // bs) - len(r.cached) - r.n_private
                   for r in self.running)

    def _head_fits(self, r: EngineRequest, owed: int) -> tuple[bool, int, list]:
        """(does ``r`` fit now, its cached prefix blocks, their copies).  Pure."""
        kv = self.kv
        hit_blocks = 0
        hit_keys: list = []
        if self.caching:
            # every full block may hit, the last one of a block-aligned prompt included
            hashes = r.seq.ensure(r.seq_len // self.bs)
            hit_blocks = kv.lookup(hashes, len(hashes))
            if hit_blocks and self.mtp_rates:
                hit_blocks -= 1               # as VllmScheduler (not checked for trtllm)
            hit_keys = kv.hit_keys(hashes[:hit_blocks])
        need = self.footprint(r) - hit_blocks + owed
        avail = kv.available
        fits = need <= avail and need <= avail - kv.count_inactive(hit_keys)
        return fits, hit_blocks, hit_keys

    # -- admission --------------------------------------------------------------------
    def admit_waiting(self, now: float, plan: PassPlan, budget: int) -> int:
        """FCFS admission of heads whose footprint fits with what the running requests
        still owe (module doc); a head that does not fit stops it (head-of-line)."""
        waiting, running = self.waiting, self.running
        owed = self.owed() if waiting else 0
        spent = False                         # a request was admitted with no budget left
        while waiting and len(running) < self.max_seqs and not spent:
            r = waiting[0]
            if self.rejects(r):
                waiting.popleft()
                self._reject(r, plan)
                continue                      # (even with the budget spent)
            fits, hit_blocks, hit_keys = self._head_fits(r, owed)
            hit = hit_blocks * self.bs
            want = r.seq_len - hit
            if want and budget <= 0:
                break                         # a fully cached prompt needs no budget
            if not fits:
                break                         # head-of-line; the cache is left untouched
            if not self.chunked and want > budget:
                break
            take = want if want < budget else budget
            if not self._start(r, hit_keys, hit + take, plan):
                break                         # (only with drafts: vllm_mtp._make_room)
            if take:
                r.pass_take = take
                plan.entries.append((r, hit, take))
            else:
                # The whole prompt is cached: like a request whose prompt KV was
                # transferred in, it decodes in this pass (its prompt length in the
                # decode term, no prefill, no budget) and emits its first token.
                r.transferred = True
                plan.entries.append((r, hit, 0))
            r.first_admit_ms = now
            r.first_reused = hit
            r.reused = hit
            r.admissions = 1
            self.cache_hit_tokens += hit
            owed += self.footprint(r) - r.n_blocks
            spent = budget <= 0
            budget -= take
        return budget

    def choose_victim(self, candidates: Sequence[EngineRequest]) -> EngineRequest:
        """None may be chosen: guaranteed-no-evict reserved every running request's KV at
        admission, so a pass that needs a victim is a modelling error."""
        v = super().choose_victim(candidates)
        raise NoEvictViolation(
            f"request {v.session_id!r} turn {v.turn_index}: GUARANTEED_NO_EVICT would have "
            "to preempt; the admission reservation under-counted the KV demand")

    # -- coalesced decode runs --------------------------------------------------------
    def waiting_blocked(self) -> bool:
        """The head does not fit: that cannot change before a running request completes
        (module doc), so a decode run may be coalesced while requests wait."""
        head = self.waiting[0]
        return not (self.rejects(head) or self._head_fits(head, self.owed())[0])
