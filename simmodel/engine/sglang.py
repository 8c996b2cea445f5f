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
  (which refreshes the prefix's LRU time, *measured*, except when ``lpm`` serves a queue
  too long to sort: then nothing is refreshed, *measured*,
  ``long_sglang_lpm_failed_admission``) — only if its new slots can be
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
first visible token.  While reservations wait for a decode rank (for slots, or
for its pass ends) and requests run there, a retracted request is not re-admitted
(*measured*, ``long_disagg_sglang_retract``).

**Attention DP** (``dp_size`` > 1, *measured*): each rank chunks at
``chunked_prefill_size // dp_size`` tokens (``max_prefill_tokens`` is not divided) and
its ``init`` above is multiplied by 0.3 (as SGLang does with DP attention); the ranks
run in lock-step (``simmodel.engine.dp``), a prefill rank and a decode rank alike.

Event budget: none (pure); per pass O(running + admitted), the admission walk also
O(segments) per request looked at; per coalesced decode run O(running + passes).
"""
from __future__ import annotations

from collections.abc import Sequence

from simmodel.config import EngineConfig
from simmodel.engine.api import PassPlan
from simmodel.engine.base import SchedulerBase
from simmodel.engine.emit import emit
from simmodel.engine.lpm import cached_match, lpm_order
from simmodel.engine.radix_cache import RadixCache
from simmodel.engine.request import DONE, RUNNING, WAITING, EngineRequest
from simmodel.engine.role import AGGREGATED, Role
from simmodel.engine.sglang_kv import SglangLeases, _Lease  # noqa: F401 (_Lease: tests, lpm)
from simmodel.engine.sglang_decode import SglangDecode
from simmodel.engine.timing import TimingModel

class _Walk:
    """The admission walk's running totals: ``room`` (free + evictable as it starts),
    ``offset`` (reserved for the running and admitted requests' outputs), ``rem_input``,
    ``rem_chunk`` (module docstring); ``touch``: whether a hold refreshes LRU times."""

    __slots__ = ("room", "offset", "rem_input", "rem_chunk", "touch")


class SglangScheduler(SglangLeases, SglangDecode, SchedulerBase):
    """Waiting queue, running batch and radix KV pool of one rank, and the rules above
    (the ``simmodel.engine.api.Scheduler`` interface the worker process drives)."""

    lpm_full_recompute = False   # tests: LPM by the original full recompute (same results)

    def __init__(self, engine: EngineConfig, timing: TimingModel, *, record_events: bool = False,
                 role: str | Role = AGGREGATED):
        super().__init__(engine, timing, role)
        g = engine.sglang
        self.lpm = g.schedule_policy == "lpm"
        self.max_prefill = g.max_prefill_tokens
        dp = engine.dp_size                 # attention DP: the rank's share (module doc)
        self.chunk = g.chunked_prefill_size // dp
        self.clip = g.clip_max_new_tokens
        self.init_ratio = 0.7 * g.schedule_conservativeness * (0.3 if dp > 1 else 1.0)
        self.min_ratio = self.init_ratio * 0.14
        self.decay = (self.init_ratio - self.min_ratio) / 600
        self.ratio = self.init_ratio
        self.interval = engine.prefill_decode_interval
        self.forced_decode = 0
        self.kv = RadixCache(self.num_blocks, self.bs, caching=self.caching,
                             record_events=record_events)
        self._lease: dict[int, _Lease] = {}

    # -- queue and hooks --------------------------------------------------------------------
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

    def rejects(self, r: EngineRequest) -> bool:
        """A prompt ``>= max_model_len``, or one larger than the pool (which could never
        be held; refused before the run when known then)."""
        if self.max_model_len is not None and r.prompt_len >= self.max_model_len:
            return True
        return -(-r.prompt_len // self.bs) > self.num_blocks

    def free_completed(self, req: EngineRequest) -> None:
        """Its prompt and output join the tree; its private slots are freed."""
        self._release(req, cache=True)

    def choose_victim(self, candidates: Sequence[EngineRequest]) -> EngineRequest:
        """Retraction: the request with the fewest generated tokens (ties: running order;
        measured, the prompt length does not matter)."""
        return min(candidates, key=_generated)

    # -- one pass -----------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan:
        """Form the next pass at time ``now`` (mutates queues and the pool)."""
        plan = PassPlan()
        if self.role.receives_prompts and self.waiting:
            self._admit_transferred(now)
        if not (self.forced_decode > 0 and self.running) and not self._behind_reservations():
            self.admit_waiting(now, plan, self.max_prefill)
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
        self._reject(r, plan)

    def admit_waiting(self, now: float, plan: PassPlan, budget: int) -> int:
        """The admission walk (module docstring) with ``budget`` = ``max_prefill_tokens``;
        fills ``plan`` if a batch forms.  Returns the input budget left."""
        waiting = self.waiting
        if not waiting:
            return budget
        n_run = len(self.running)
        if n_run >= self.max_seqs:
            return budget
        walk = _Walk()
        walk.offset = self._reserved_offset()
        walk.rem_input = budget
        walk.rem_chunk = self.chunk
        walk.touch = True
        if self.lpm and self.caching:
            walk.touch = lpm_order(self)
            waiting = self.waiting
        entries = plan.entries
        kv = self.kv
        walk.room = kv.free_tokens + kv.evictable   # as the walk starts (locks below do not count)
        for r in waiting:                      # (stops at the first that fails)
            if n_run + len(entries) >= self.max_seqs:
                break
            if r.admissions == 0 and self.rejects(r):
                self._reject(r, plan)
                continue
            partial = self._admit_one(r, now, walk, entries)
            if partial is None or partial:
                break
        for r in plan.rejected:
            waiting.remove(r)
        # the admitted requests are now the head of the queue
        for _ in entries:
            waiting.popleft()
        plan.admitted = len(entries)
        return walk.rem_input

    def _reserved_offset(self) -> float:
        """Σ over running requests of min(output left, clip) × new_token_ratio."""
        clip = self.clip
        ratio = self.ratio
        offset = 0.0
        for r in self.running:
            left = r.max_output - r.generated
            offset += (left if left < clip else clip) * ratio
        return offset

    def _admit_one(self, r: EngineRequest, now: float, walk: _Walk, entries: list):
        """One step of the walk: admit ``r`` (its prefix matched, its chunk sized and
        charged) if it fits.  None if it does not (the walk stops); else whether its
        chunk is partial (the walk stops after it)."""
        bs = self.bs
        lease = self._get_lease(r)
        if r.computed:
            # a chunked prompt continues where it stopped (no new prefix match)
            hit, node, start = 0, lease.node, r.computed
        else:
            hit, node = self._match(r, lease)
            start = hit
        extend = r.seq_len - start
        partial = extend > walk.rem_chunk
        take = walk.rem_chunk // bs * bs if partial else extend
        if take <= 0:
            return None
        charged = -(-take // bs) * bs
        clip = self.clip
        left = r.max_output - r.generated
        out = 0 if partial else (left if left < clip else clip)
        if not (charged + out < walk.room - walk.offset
                and charged <= walk.rem_input and charged <= walk.rem_chunk):
            return None
        if not self._hold(r, lease, node, hit, start + take, walk.touch):
            return None
        walk.offset += charged + out
        walk.rem_input -= charged
        walk.rem_chunk -= charged
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
        return partial

    def _hold(self, r: EngineRequest, lease: _Lease, node, hit: int, upto: int,
              touch: bool) -> bool:
        """Hold ``r``'s prefix (``node``, ``hit`` tokens for a fresh request; ``touch``:
        refreshing its LRU times) and take the slots up to ``upto`` tokens at once
        (evicting: later requests match what is left); False (nothing held) if the new
        slots cannot then be had."""
        kv, bs = self.kv, self.bs
        fresh = r.computed == 0
        kv.lock(node, touch=touch)
        base = hit if fresh else lease.tree
        need = -(-(upto - base) // bs) * bs - (0 if fresh else self._slots(lease, lease.kv))
        if need > kv.free_tokens + kv.evictable:
            kv.unlock(node)
            return False
        if fresh:
            kv.free_private(self._slots(lease, lease.kv))
            kv.unlock(lease.node)
            lease.node, lease.tree, lease.kv = node, hit, hit
        else:
            kv.unlock(node)
        self._grow(lease, upto)
        return True

    def _cost(self, plan: PassPlan) -> None:
        """Duration: P over the prefill entries (integer-mean aggregation of §2.1) or D
        over the decoders; a prefill worker adds no D, a decode worker no P."""
        n = s_isl = s_pfx = n_dec = dec_tokens = committed = 0
        chunks = [] if self.composed else None      # (new, before) of each prompt entry
        for r, before, take in plan.entries:
            if r.state == RUNNING:
                n_dec += 1
                dec_tokens += r.seq_len
                continue
            committed += take
            n += 1
            s_isl += before + take            # recomputed generated tokens are charged too
            s_pfx += before
            if chunks is not None:
                chunks.append((take, before))
        self._charge(plan, n, s_isl, s_pfx, n_dec, dec_tokens, committed, chunks)

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int,
               first_tokens: list) -> list[EngineRequest]:
        """Settle a pass at its end: prompts computed in it are cached, their requests
        emit their first (or, after a retraction, next) token and join the running
        batch; decoders emit a token; requests reaching their output length complete
        (their tokens are cached, their slots released).  Returns the completed ones."""
        if not plan.num_prefill:
            return self._finish_decode(plan, end_ms, pass_idx, first_tokens)
        done: list = []
        self.committed_prefill_tokens += plan.committed_tokens
        promoted = []
        chunked = []
        mute = self._first_token_slots(plan)
        holds_source = self.role.holds_source
        for r, before, take in plan.entries:
            r.pass_take = 0
            lease = self._lease[r.uid]
            if r.state == WAITING:
                # a prefill: its computed tokens join the tree (a prefill worker's
                # finished prompt only when its source is released -- measured)
                if not (holds_source and r.computed == r.seq_len):
                    self._cache(r, lease, r.computed)
                if r.computed < r.seq_len:
                    chunked.append(r)          # mid-prompt chunk: back to the head
                    continue
                promoted.append(r)
                if id(r) in mute:
                    continue
            finished = emit(r, 1, end_ms, pass_idx, first_tokens)
            r.computed = r.seq_len
            if finished:
                self._end(r, end_ms, done)
        for r in reversed(chunked):
            self.waiting.appendleft(r)
        for r in promoted:
            if r.state != DONE:
                r.state = RUNNING
                self.running.append(r)
        if done:
            self._drop_finished()
        return done

    def _first_token_slots(self, plan: PassPlan) -> set:
        """The token a completed prompt emits needs a slot if the request goes on
        decoding; the slots are taken before any prompt is cached (measured: before
        duplicate prompt tokens return to the pool).  With none left (a re-admission
        whose locked prefix took the last evictable slots) it emits nothing now and
        decodes in a later pass: the ids of those requests."""
        mute = set()
        for r, before, take in plan.entries:
            if (r.state == WAITING and r.computed == r.seq_len
                    and r.generated + 1 < r.max_output):
                lease = self._lease[r.uid]
                if not self._grow(lease, lease.kv + 1):
                    mute.add(id(r))
        return mute

    def _finish_decode(self, plan: PassPlan, end_ms: float, pass_idx: int,
                       first_tokens: list) -> list:
        """``finish`` for a decode pass (the hot path: one token per running request)."""
        done: list = []
        for r, _, _ in plan.entries:
            finished = emit(r, 1, end_ms, pass_idx, first_tokens)   # decode role: may be
            r.computed = r.seq_len                                   # its first token
            if finished:
                self._complete(r, end_ms, done)
        if done:
            self._drop_finished()
        return done


def _generated(r: EngineRequest) -> int:
    return r.generated
