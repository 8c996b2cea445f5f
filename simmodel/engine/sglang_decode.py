"""SGLang's decode side: one decode step, retraction, and coalesced decode runs.  Pure.

A decode step takes one slot per running request (a page when its private pages are
full); if they cannot be had from free + evictable, requests are retracted first
(module docstring of engine/sglang.py).

While no prefill can form and the pool can supply every slot the decoders need, the
decode steps up to the first completion are known when the run starts: ``decode_run``
gives their durations (mutating nothing) and ``commit_decode_run`` applies the first
``m`` of them at once -- slots taken pass by pass (evicting as per-pass scheduling
would), ``new_token_ratio`` decayed once per pass, tokens, completions -- and returns
what happened (a ``RunOutcome`` with the passes' pass-log rows).  The decode role's
admission of transferred requests is here too.  A mixin of ``SglangScheduler``
(engine/sglang.py).

Event budget: none (pure); O(running + passes) per committed run.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from simmodel.engine.api import NO_RUN, PassPlan, RunOutcome
from simmodel.engine.request import RUNNING, WAITING

RETRACT_DECODE_STEPS = 20    # in the new_token_ratio reset after a retraction


class SglangDecode:
    """Decode steps and coalesced runs over an ``SglangScheduler``'s state."""

    def _behind_reservations(self) -> bool:
        """Decode role, measured: while reservations wait for this rank (for blocks,
        or for its pass ends), a retracted request is not re-admitted, unless nothing
        runs."""
        return (self.reservations_waiting is not None and bool(self.running)
                and self.reservations_waiting())

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
        """Decode out of memory: retract victims (``choose_victim``) until the step fits
        or one request is left.  A victim's computed tokens are cached; it goes to the
        back of the queue and recomputes later.  ``new_token_ratio`` is reset."""
        order = list(self.running)
        retracted = self._victims(order)
        gone = {id(r) for r in retracted}
        for v in self.running:             # cached in running order (measured)
            if id(v) in gone:
                self._release(v, cache=True)
                v.computed = 0
                v.state = WAITING
                self.preemptions += 1
        self.running = order
        self.waiting.extend(retracted)
        plan.preempted = True
        decoded = sum(r.generated for r in self.running)
        max_new = sum(r.max_output for r in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (max_new + 1))

    def _victims(self, order: list) -> list:
        """Take victims (``choose_victim``) out of ``order`` until the step fits or one
        request is left; they are returned in the order chosen, the pool as it was.
        Their slots count as free while choosing: each one's private slots, and its
        prefix once no other request holds it (the same room as releasing them)."""
        kv, lease = self.kv, self._lease
        victims = []
        while len(order) > 1 and kv.free_tokens + kv.evictable < self._step_need(order):
            v = self.choose_victim(order)
            order.remove(v)
            victims.append(v)
            q = lease[v.uid]
            kv.unlock(q.node)
            kv.free_private(self._slots(q, q.kv))
        for v in victims:                  # (what was freed above: no eviction)
            q = lease[v.uid]
            kv.alloc(self._slots(q, q.kv))
            kv.lock(q.node)
        return victims

    def decode_run(self, max_passes: int = 4096) -> tuple[np.ndarray, int] | None:
        """If the batch cannot change until a request completes, the pass durations of
        that run of pure-decode passes (numpy array, length >= 2) and the decoders'
        total length; else None.

        Frozen means: no prefill can form (nothing waits, or the running batch is at
        ``max_num_seqs``), every running request has its first token, and the pool can
        supply every slot the run needs (so nothing is retracted).  The run ends with
        the pass in which the first request completes.  Nothing is mutated:
        ``commit_decode_run`` applies passes."""
        running = self.running
        n = len(running)
        if n == 0 or not self.role.decodes or not self.queue_shut():
            return None
        # a first token still to come (a transferred request that joined during a
        # prefill pass, a muted prompt) is emitted by a pass of its own
        if any(not r.generated for r in running):
            return None
        k, total = self._run_span(running, max_passes)
        if k < 2:
            return None
        lease = self._lease
        need = 0
        for r in running:
            q = lease[r.uid]
            need += self._slots(q, q.kv + k) - self._slots(q, q.kv)
        if need > self.kv.free_tokens + self.kv.evictable:
            return None
        return self._run_durations(n, total, k)

    def commit_decode_run(self, durations: np.ndarray, total: int, m: int, start: float,
                          pass_idx0: int, record_events: bool) -> RunOutcome:
        """Apply the first ``m`` passes of a run from ``decode_run`` (started at
        ``start``): slots taken pass by pass (evicting as per-pass scheduling would),
        ``new_token_ratio`` decayed once per pass, tokens, completions.  Returns what
        happened (pass-log rows, completions, KV events)."""
        if m == 0:
            return NO_RUN
        running = self.running
        ends = self._run_ends(start, durations, m)
        events = [] if record_events else None
        if events is not None:        # left by the last pass's settling: with the first
            first_end = float(ends[1])
            events.extend((first_end,) + ev for ev in self.kv.drain_events())
        kv_active = self._take_run_slots(m, ends, events)
        lease = self._lease
        for r in running:
            lease[r.uid].kv += m
        out = self._run_outcome(running, m, pass_idx0, ends, total, kv_active, events)
        for r in running:
            r.computed = r.seq_len
        # (what the completions cached is published with the next pass, as when
        # stepping: ``SchedulerBase.settle``)
        return out

    def _take_run_slots(self, m: int, ends: np.ndarray, events: list | None) -> np.ndarray:
        """Take the run's slots pass by pass and decay ``new_token_ratio``; the active
        blocks after each pass (and the KV events, stamped with their pass end)."""
        bs = self.bs
        kv = self.kv
        lease = self._lease
        # slots per pass: a page for each request whose private pages are full
        per_pass = np.zeros(m, dtype=np.int64)
        for r in self.running:
            q = lease[r.uid]
            j = (-(q.kv - q.tree)) % bs          # first pass j where it needs a page
            if j < m:
                per_pass[j::bs] += bs
        kv_active = np.empty(m, dtype=np.int64)
        ratio, decay, floor = self.ratio, self.decay, self.min_ratio
        for j in range(m):
            if per_pass[j]:
                kv.alloc(int(per_pass[j]))
                if events is not None:
                    for ev in kv.drain_events():
                        events.append((float(ends[j + 1]),) + ev)
            kv_active[j] = kv.active_blocks
            ratio = ratio - decay
            if ratio < floor:
                ratio = floor
        self.ratio = ratio
        self.forced_decode = max(0, self.forced_decode - m)
        return kv_active
