"""Speculative decoding (``aic_nextn``, reference §10) on a vLLM-core scheduler.  Pure.

Every request whose sequence is complete after a pass's tokens (a decoder, or a prompt's
last chunk) emits a *burst* of 1 + its leading accepted drafts (draft i accepted with
probability ``rates[i]`` once the earlier ones were), capped by its remaining output.
Measured on the reference (``ai-dynamo-runtime`` 1.6.1, per-request token times and KV
gauges of small hand-made traces, bs 16, 10 blocks):

* **Draft KV after admission.**  Once the running requests have taken their tokens and the
  waiting ones have been admitted, each such request in turn (batch order) holds KV for
  its sequence plus ``1 + aic_nextn`` tokens (never past its output): the new token's,
  the drafts', the bonus token's -- whatever is then accepted.  If the pool cannot supply it, a victim is
  preempted (newest with lifo, oldest with fifo) and the request tries again, until it
  succeeds or the victim is the request itself.  So under pressure a request just admitted
  is often its own victim: admitted, preempted, readmitted at the next pass.
* **A victim's prefill still costs.**  A request preempted here keeps its prompt tokens in
  the pass's prefill term (its tokens were scheduled), but it emits nothing and leaves the
  decode term.  (Preemptions while the running requests take their tokens refund them, as
  without drafts.)
* **Rejected drafts give their KV back.**  At the pass end a request keeps the blocks of
  its sequence (the emitted tokens) and frees the rest: with all drafts accepted it keeps
  everything, with rates (1, 0) the block taken for the rejected draft goes back to the
  pool.  Only full blocks of emitted tokens are cached, and not the block the burst's
  last token fills: that token's KV is computed by the next pass (as without drafts).
  So a request ending exactly on a block boundary leaves that block uncached (found by
  ``long_runs.py --shapes mtp_pressure --seeds 10``; fidelity case
  ``mtp_last_token_uncached``).

A request that is the pass's only entry and cannot hold its drafts even with every other
request preempted would be its own victim at every pass (the reference never finishes such
a run, and a pass left with no entry would take no time); it holds what the pool can give.
A mixin of ``VllmScheduler`` (engine/scheduler.py).
"""
from __future__ import annotations

from simmodel.engine.api import PassPlan
from simmodel.engine.request import RUNNING, EngineRequest


class VllmBursts:
    """``_bursts`` (at formation) and ``_drop_drafts`` (at the pass end)."""

    def _bursts(self, plan: PassPlan) -> list:
        """Draw every emitting entry's burst and hold its draft KV, preempting when the
        pool cannot supply it.  Returns the entries of the requests preempted here (their
        prefill still counts in the pass's cost)."""
        victims: list = []
        most = 1 + len(self.mtp_rates)
        for r, before, take in list(plan.entries):
            if r.state != RUNNING:
                continue                       # preempted by an earlier entry's drafts
            after = before + take
            if after != r.seq_len:
                r.burst = 1                    # mid-prompt chunk: nothing to emit
                continue
            b = self._draw_burst(r)
            left = r.max_output - r.generated
            while not self._grow(r, after + (most if most < left else left), after + b - 1):
                victim = self.choose_victim(self.running)
                if victim is r and len(plan.entries) == 1:
                    self._grow_to_fit(r, after, after + b - 1)
                    break
                victims.extend(e for e in plan.entries if e[0] is victim)
                self._preempt(victim, plan)
                plan.preempted = True
                if victim is r:
                    break
            r.burst = b
        for r, before, take in plan.entries:
            if before + take == r.seq_len:
                self.mtp_emissions += 1
                self.mtp_tokens += r.burst
        return victims

    def _draw_burst(self, r: EngineRequest) -> int:
        """1 + the leading accepted drafts, capped by ``r``'s remaining output."""
        b = 1
        rng = self.mtp_rng
        for rate in self.mtp_rates:
            if rate >= 1.0 or (rate > 0.0 and rng.random() < rate):
                b += 1
            else:
                break
        return min(b, r.max_output - r.generated)

    def _grow_to_fit(self, r: EngineRequest, after: int, real: int) -> None:
        """The lone request's fallback: as much of the lookahead as the pool can give."""
        tokens = after + len(self.mtp_rates)
        while tokens > after and not self._grow(r, tokens, min(real, tokens)):
            tokens -= 1

    def _inactive_hits(self, hit_keys) -> int:
        """The admission check's count of inactive prefix hits (they become active when
        taken, so they are no room for the rest).  With drafts, a later copy of a hash
        (keyed ``(hash, serial)``) does not count while another copy of its hash is held;
        the request still takes it, so the allocation may then fall one block short per
        such copy (``_make_room``).  Measured on the reference: ``long_runs.py --shapes
        mtp_pressure --seeds 12`` (fidelity case ``mtp_shadowed_copy``) and seed 38."""
        kv = self.kv
        n = kv.count_inactive(hit_keys)
        if n and self.mtp_rates and kv.copies and self.running:   # someone to preempt
            n -= kv.count_shadowed(hit_keys)
        return n

    def _make_room(self, r: EngineRequest, tokens: int, plan: PassPlan) -> bool:
        """Admission fell short (see ``_inactive_hits``): preempt running requests
        (newest with lifo) until ``r``'s first ``tokens`` tokens have their blocks.  If
        the batch empties first (the spared copy's holder was not running: a decode
        worker's reservation holds cached blocks too), ``r`` lets go of its prefix and
        goes back to the waiting head, and False is returned.  No measured case reaches
        that; it keeps the run going rather than stopping it."""
        while not self._grow(r, tokens):
            if not self.running:
                self._release(r)
                self.waiting.appendleft(r)
                return False
            self._preempt(self.choose_victim(self.running), plan)
            plan.preempted = True
        return True

    def _drop_drafts(self, r: EngineRequest) -> None:
        """Pass end: ``r`` keeps the blocks of its sequence; those taken for rejected
        drafts go back to the pool (they are private: only emitted tokens are cached)."""
        extra = r.n_blocks - -(-r.seq_len // self.bs)
        if extra > 0:
            r.n_private -= extra
            self.kv.release((), extra)
