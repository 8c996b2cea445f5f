"""What the three scheduler backends share, and the hooks each of them implements.  Pure.

``SchedulerBase`` holds a rank's queue, running batch, counters and handoff holds, and the
steps every backend takes the same way:

* **cost**: a pass pays ``prefill_ms`` over its prompt work if the role prefills, plus
  ``decode_ms`` over its decoders if the role decodes (``_charge``);
* **settle**: a request whose sequence is computed emits its token(s) at the pass end; one
  reaching its output length completes (its KV released by the backend's rule), or, on a
  prefill worker, is held as the source of its KV transfer (``_end``);
* **coalesced commit**: the pass ends of a run of pure-decode passes, their pass-log rows
  and the completions at the run's last pass (``_run_ends``, ``_run_outcome``).

Hooks (public, documented here, implemented by every backend; no backend overrides a
private method of another):

* ``admit_waiting(now, plan, budget)``: which waiting requests join this pass;
* ``choose_victim(candidates)``: which running request gives up its KV when the pass
  cannot grow (``NoEvictViolation`` for TRT-LLM's guaranteed-no-evict);
* ``rejects(req)``: whether a request can never be served here;
* ``free_completed(req)``: what becomes of a completed request's KV;
* ``finish(plan, end_ms, pass_idx, first_tokens)``: a pass's emissions and completions by
  the backend's rules (``settle`` wraps it into a ``PassOutcome``);
* ``waiting_blocked()``: whether the waiting queue is shut until a completion although
  the batch has room (so a decode run may be coalesced while requests wait;
  ``queue_shut`` adds the other reasons).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from simmodel.config import EngineConfig
from simmodel.engine.api import PassOutcome, PassPlan, RunOutcome
from simmodel.engine.clock import batch_new_tokens
from simmodel.engine.emit import emit_run
from simmodel.engine.request import DONE, RUNNING, WAITING, EngineRequest
from simmodel.engine.role import Role, role_of
from simmodel.engine.timing import TimingModel


class SchedulerBase:
    """A rank's queues and counters, the shared pass steps, and the backend hooks."""

    def __init__(self, engine: EngineConfig, timing: TimingModel, role: str | Role):
        self.role = role_of(role)
        self.bs = engine.effective_block_size
        self.num_blocks = engine.num_gpu_blocks
        self.max_seqs = engine.max_num_seqs
        self.caching = engine.enable_prefix_caching
        self.max_model_len = engine.max_model_len
        self.timing = timing
        # the timing model costs a pass from its composition (_charge's ``chunks``)
        self.composed = getattr(timing, "composed", False)
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.committed_prefill_tokens = 0
        self.preemptions = 0
        self.cache_hit_tokens = 0              # prompt tokens served by the prefix cache
        self.admit_prefill = True              # attention DP: prefill_schedule_interval
        self.held = 0                          # held sources / reserved destinations
        self.mtp_emissions = 0                 # speculative decoding: request-passes that
        self.mtp_tokens = 0                    # emitted tokens, and those tokens
        # decode role: callable() -> reservations wait for this rank (set by the
        # cluster's handoff; vLLM: _admit_transferred_behind, SGLang: _behind_reservations)
        self.reservations_waiting = None

    # -- hooks ---------------------------------------------------------------------------
    def admit_waiting(self, now: float, plan: PassPlan, budget: int) -> int:
        """Admit waiting requests into ``plan`` (at time ``now``, ``budget`` tokens left
        in the pass); returns the budget left."""
        raise NotImplementedError

    def choose_victim(self, candidates: Sequence[EngineRequest]) -> EngineRequest:
        """The request among ``candidates`` (running, in running order) that gives up its
        KV so that the pass can grow."""
        raise NotImplementedError

    def rejects(self, req: EngineRequest) -> bool:
        """At its first admission: ``req`` can never be served by this rank."""
        raise NotImplementedError

    def free_completed(self, req: EngineRequest) -> None:
        """Release the KV of ``req``, which completed (cached or not: the backend's rule)."""
        raise NotImplementedError

    def waiting_blocked(self) -> bool:
        """Requests wait and the batch has room, yet none can join it before a running
        request completes (so a run of decode passes may still be coalesced)."""
        return False

    def queue_shut(self) -> bool:
        """No waiting request can join the batch before a running one completes: none
        waits, ``max_num_seqs`` is reached, or ``waiting_blocked``."""
        return not self.waiting or len(self.running) >= self.max_seqs or self.waiting_blocked()

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int,
               first_tokens: list) -> list[EngineRequest]:
        """Emit the tokens of ``plan`` at its end (first tokens appended to
        ``first_tokens``) and complete requests; returns the requests that ended."""
        raise NotImplementedError

    def settle(self, plan: PassPlan, end_ms: float, pass_idx: int,
               record_events: bool) -> PassOutcome:
        # (the pass's events are those of its formation: what settling changes is
        # published with the next pass, as the reference publishes it)
        events = self.kv.drain_events() if record_events else None
        first: list = []
        ended = self.finish(plan, end_ms, pass_idx, first)
        return PassOutcome(tuple(ended), tuple(first), tuple(plan.rejected),
                           plan.preempted, events)

    # -- queue -----------------------------------------------------------------------------
    def enqueue(self, req: EngineRequest) -> None:
        req.state = WAITING
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def waiting_on_holds(self) -> bool:
        """Blocks are held outside the running batch (sources awaiting their transfer,
        destinations awaiting activation): a request that fits nowhere now may fit once
        they move on, so an empty batch is not a dead end."""
        return self.held > 0

    def _reject(self, req: EngineRequest, plan: PassPlan) -> None:
        """``req`` leaves as rejected (its terminal time: the pass end, set by the worker)."""
        req.state = DONE
        req.status = "rejected"
        plan.rejected.append(req)

    # -- cost ------------------------------------------------------------------------------
    def _charge(self, plan: PassPlan, n: int, s_isl: int, s_pfx: int, n_dec: int,
                dec_tokens: int, committed: int, chunks: list | None = None) -> None:
        """Fill ``plan``'s counts and duration: P over ``n`` prompt entries (Σ lengths after
        the pass ``s_isl``, Σ computed before ``s_pfx``) if the role prefills, plus D over
        ``n_dec`` decoders of ``dec_tokens`` tokens if it decodes.  A composed timing
        model (``self.composed``) costs the whole pass from ``chunks``, the entries'
        (new tokens, computed before), and the decoders, each part if the role has it."""
        if n:
            plan.prefill_tokens = batch_new_tokens(n, s_isl, s_pfx)
        plan.committed_tokens = committed      # counted when the pass completes
        plan.num_prefill = n
        plan.num_decode = n_dec
        plan.decode_tokens = dec_tokens
        timing = self.timing
        role = self.role
        if chunks is not None:
            plan.duration_ms = timing.pass_ms(chunks if role.prefills else (),
                                              n_dec if role.decodes else 0, dec_tokens)
            return
        plan.duration_ms = ((timing.prefill_ms(n, s_isl, s_pfx) if role.prefills else 0.0)
                            + (timing.decode_ms(n_dec, dec_tokens) if role.decodes else 0.0))

    # -- settle ----------------------------------------------------------------------------
    def _end(self, req: EngineRequest, end_ms: float, done: list) -> None:
        """``req`` reached its output length at ``end_ms``: it completes, or on a prefill
        worker it is held as the source of its KV transfer."""
        if self.role.holds_source:
            req.state = DONE
            req.terminal_ms = end_ms
            req.status = "prefilled"           # source held until the transfer ends
            self.held += 1
            done.append(req)
        else:
            self._complete(req, end_ms, done)

    def _complete(self, req: EngineRequest, end_ms: float, done: list) -> None:
        req.state = DONE
        req.terminal_ms = end_ms
        req.status = "completed"
        self.free_completed(req)
        done.append(req)

    def _drop_finished(self) -> None:
        """Completed requests leave the running batch."""
        self.running = [r for r in self.running if r.state == RUNNING]

    # -- coalesced decode runs ---------------------------------------------------------------
    @staticmethod
    def _run_span(running: list, max_passes: int, decoding: bool = False) -> tuple[int, int]:
        """(passes until the first of ``running`` completes, at most ``max_passes``; the
        decoders' total length); with ``decoding``, (0, 0) unless every one of them
        decodes (has a token out and all but its newest computed)."""
        k = max_passes
        total = 0
        for r in running:
            if decoding and (not r.generated or r.computed != r.seq_len - 1):
                return 0, 0
            left = r.max_output - r.generated
            if left < k:
                k = left
            total += r.seq_len
        return k, total

    def _run_durations(self, n: int, total: int, k: int) -> tuple[np.ndarray, int]:
        """``decode_run``'s answer: ``k`` passes of ``n`` decoders of ``total`` tokens."""
        active = total + n * np.arange(k, dtype=np.int64)
        return self.timing.decode_ms_array(n, active), total

    @staticmethod
    def _run_ends(start: float, durations: np.ndarray, m: int) -> np.ndarray:
        """The run's start and its first ``m`` pass ends."""
        return np.add.accumulate(np.concatenate(([start], durations[:m])))

    def _run_outcome(self, running: list, m: int, pass_idx0: int, ends: np.ndarray,
                     total: int, kv_active: np.ndarray, events: list | None) -> RunOutcome:
        """Every decoder of ``running`` emits one token per pass of the ``m`` passes ending
        at ``ends[1:]``; those reaching their output length complete at the last one."""
        n = len(running)
        starts = ends[:-1]
        stops = ends[1:]
        first_end = float(stops[0])
        last_end = float(stops[-1])
        last_idx = pass_idx0 + m - 1
        done: list = []
        for r in emit_run(running, m, pass_idx0, last_idx, first_end, last_end):
            self._complete(r, last_end, done)
        if done:
            self._drop_finished()
        return RunOutcome(done, starts, stops, n, total + n * np.arange(m, dtype=np.int64),
                          kv_active, events)
