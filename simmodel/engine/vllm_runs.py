"""Coalesced decode runs of the vLLM-core schedulers (vLLM, TRT-LLM).  Pure.

While every running request decodes one token per pass and nothing can join or leave the
batch before the first of them completes, the passes up to that completion are known
when the run starts: ``decode_run`` gives their durations (mutating nothing), and
``commit_decode_run`` applies the first ``m`` of them at once -- KV growth in the order
per-pass scheduling would do it, tokens, completions -- and returns what happened (a
``RunOutcome`` with the passes' pass-log rows).  A mixin of ``VllmScheduler``.

Event budget: none (pure); O(running + block boundaries crossed) per committed run.
"""
from __future__ import annotations

import numpy as np

from simmodel.engine.api import NO_RUN, RunOutcome


class VllmDecodeRuns:
    """``decode_run`` / ``commit_decode_run`` over a ``VllmScheduler``'s state."""

    def decode_run(self, max_passes: int = 4096) -> tuple[np.ndarray, int] | None:
        """If the batch cannot change until a request completes, return the pass
        durations of that run of pure-decode passes (numpy array, length >= 2) and the
        decoders' total length; else None.

        The batch is frozen when every running request is decoding (1 token per pass,
        all within the budget), nothing can be admitted (waiting queue empty,
        ``max_num_seqs`` reached, or ``waiting_blocked``), and the pool can supply every block the run needs
        (so nothing is preempted).  The run ends with the pass in which the first
        request completes.  Nothing is mutated: ``commit_decode_run`` applies passes.
        """
        running = self.running
        n = len(running)
        if n == 0 or n > self.max_batched or not self.queue_shut():
            return None
        if self.mtp_rates:
            return None                        # bursts vary pass by pass
        k, total = self._run_span(running, max_passes, decoding=True)
        if k < 2:
            return None
        bs = self.bs
        avail = self.kv.available
        # Blocks the run needs: a decoder at computed c grows to c + k tokens.  It holds
        # the blocks of its c tokens, so it needs at most ceil(k / bs) more: when that
        # fits for all of them, so does the exact sum.
        if n * -(-k // bs) > avail:
            need = 0
            for r in running:
                need += -(-(r.computed + k) // bs) - (len(r.cached) + r.n_private)
            if need > avail:
                return None
        return self._run_durations(n, total, k)

    def commit_decode_run(self, durations: np.ndarray, total: int, m: int, start: float,
                          pass_idx0: int, record_events: bool) -> RunOutcome:
        """Apply the first ``m`` passes of a run from ``decode_run`` (started at
        ``start``): KV growth in the order per-pass scheduling would do it, tokens,
        completions.  Returns what happened (pass-log rows, completions, KV events)."""
        if m == 0:
            return NO_RUN
        running = self.running
        ends = self._run_ends(start, durations, m)
        events = [] if record_events else None
        kv_active = self._grow_run(m, ends, events)
        for r in running:
            r.computed += m
        return self._run_outcome(running, m, pass_idx0, ends, total, kv_active, events)

    def _block_work(self, m: int) -> list:
        """(pass j, running order, computed at the run's start, request) wherever a
        decoder crosses a block boundary in the first ``m`` passes (a new block, or a
        full block to cache), in that order."""
        bs = self.bs
        work = []
        append = work.append
        for order, r in enumerate(self.running):
            c = r.computed
            j = (-c) % bs                      # first j with (c + j) % bs == 0: new block
            while j < m:
                append((j, order, c, r))
                j += bs
            j = (-(c + 1)) % bs                # first j with (c + j + 1) % bs == 0: block full
            while j < m:
                append((j, order, c, r))
                j += bs
        work.sort()                            # (by (j, order): those pairs are unique
        return work                            # but for one request's equal entries)

    def _grow_run(self, m: int, ends: np.ndarray, events: list | None) -> np.ndarray:
        """Grow the decoders' KV pass by pass; the active blocks after each pass (and the
        KV events, stamped with their pass end, into ``events``)."""
        work = self._block_work(m)
        kv_active = np.empty(m, dtype=np.int64)
        kv = self.kv
        last_j = 0
        grow = self._grow
        for j, _, c, r in work:
            if j != last_j:
                kv_active[last_j:j] = kv.active_blocks
                if events is not None:
                    for kind, h in kv.drain_events():
                        events.append((float(ends[last_j + 1]), kind, h))
                last_j = j
            grow(r, c + j + 1)
        kv_active[last_j:] = kv.active_blocks
        if events is not None:
            for kind, h in kv.drain_events():
                events.append((float(ends[last_j + 1]), kind, h))
        return kv_active
