"""A coalesced decode run: the pass ends of a run of pure-decode passes that one timeout
covers (``Worker._decode_run``), and which of them are settled.  Pure arithmetic.

A run is formed when the batch cannot change until a request completes (the scheduler's
``decode_run``); it is cut short when the worker's inbox gets something at time ``t``:
the passes that started before ``t`` run to their end (:meth:`CoalescedRun.cut_at`),
unless nothing it got can change the batch before the run's end (``_run_stands``).
``WorkerDecodeRuns`` is the part of a ``Worker`` process that covers such runs.
"""
from __future__ import annotations

import numpy as np

from simmodel.cluster.inbox import WAKE
from simmodel.cluster.phases import Phase, event_at_time
from simmodel.engine import fpm


class CoalescedRun:
    """Passes ``0..n-1`` back to back from ``start``; ``done`` of them are settled."""

    __slots__ = ("durations", "total", "start", "ends", "done", "parts")

    def __init__(self, durations: np.ndarray, total: int, start: float, parts):
        self.durations = durations
        self.total = total                # the decoders' total length at the first pass
        self.start = start
        self.ends = np.add.accumulate(np.concatenate(([start], durations)))[1:]
        self.done = 0
        self.parts = parts                # forward-pass metrics parts (None: not kept)

    def __len__(self) -> int:
        return len(self.durations)

    def ended_by(self, t: float) -> int:
        """Passes ended at or before ``t``, leaving the last one to the worker's process."""
        return min(int(np.searchsorted(self.ends, t, side="right")), len(self.ends) - 1)

    def cut_at(self, t: float, formed_now: bool) -> int:
        """The passes that run when the inbox gets something at ``t``: those that started
        before ``t`` (pass ``j`` starts at ``ends[j-1]``, pass 0 at ``start``).  A run that
        began at ``t`` was formed before this arrival, as a stepped pass would have been:
        its first pass stands.  ``formed_now``: stepping pass by pass, the worker would
        already have formed its pass starting at ``t`` (its barrier comes before the one
        whose batch released this arrival), so that pass runs too."""
        n = len(self.durations)
        ends = self.ends
        m = 0 if t < self.start else min(n, int(np.searchsorted(ends, t)) + 1)
        if 0 < m < n and ends[m - 1] == t and formed_now:
            m += 1
        return m


class WorkerDecodeRuns:
    """A ``Worker``'s coalesced decode runs: run, cut, settle (mixin of ``Worker``)."""

    def _decode_run(self, durations, total):
        """Cover a run of pure-decode passes with one timeout, cut short by the inbox.

        The process waits for the run's last pass end or for its inbox, whichever comes
        first; requests that cannot join the batch before the run's end do not cut it
        (``_run_stands``).  Event budget: one ``PASS_END`` event for the run's end, one
        ``get`` per arrival mid-run, and, if one cuts the run, one ``PASS_END`` event for
        the end of the pass in flight at that moment.  An observer's ``view`` / ``gauges``
        settles the passes that already ended before the run is over (``_catch_up``).
        """
        env = self.env
        # (with forward-pass metrics every arrival cuts the run: the queue stays as here)
        parts = (([r.seq_len for r in self.sched.running],
                  fpm.queued(self.sched.waiting, self._inbound()))
                 if self.collect_fpm else None)
        run = self._run = CoalescedRun(durations, total, env.now, parts)
        end_ev = event_at_time(env, float(run.ends[-1]), Phase.PASS_END, self.rank)
        got = yield from self.inbox.wait(end_ev)
        while not end_ev.processed and self._run_stands(got):
            got = yield from self.inbox.wait(end_ev)
        m = len(durations)
        if not end_ev.processed:
            # the inbox got something at t: passes that started before t run to their end
            t = env.now
            m = run.cut_at(t, self.formation.passed(t, self.end_key))
            if m and run.ends[m - 1] > t:
                yield event_at_time(env, float(run.ends[m - 1]), Phase.PASS_END, self.rank)
        self._commit_run(m)
        self._run = None

    def _run_stands(self, got) -> bool:
        """The inbox got only requests (``got``: the first), none of which can join the
        batch before the run's completion (the scheduler's queue is shut), and no step is
        owed: stepping pass by pass would run the same passes, so the run goes on (it is
        not cut).  Not while forward-pass metrics are kept (they show each pass's queue)."""
        if got is WAKE or self.collect_fpm or WAKE in self.inbox.items:
            return False
        self._take()
        return not self.steps.pending() and self.sched.queue_shut()

    def _commit_run(self, upto: int) -> None:
        """Settle passes ``done..upto-1`` of the current decode run."""
        run = self._run
        durations, total, start, ends, done, parts = (run.durations, run.total, run.start,
                                                      run.ends, run.done, run.parts)
        k = upto - done
        if k <= 0:
            return
        sched = self.sched
        first = start if done == 0 else float(ends[done - 1])
        out = sched.commit_decode_run(durations[done:], total + len(sched.running) * done,
                                      k, first, len(self.passes), self.publishes)
        self.passes.add_run(out.starts, out.stops, out.num_decode, out.decode_tokens,
                            out.kv_active)
        run.done = upto
        if parts is not None and self.collect_fpm:
            lengths, queue = parts
            self.fpm_latest = fpm.snapshot(self.idx, float(durations[upto - 1]),
                                           fpm.decode_only(lengths, upto - 1), queue)
            self.fpm_latest_ms = float(ends[upto - 1])
            self.decode_forwards += len(lengths) * k
        if out.kv_events:
            self._publish(out.kv_events)
        for r in out.done:
            self._ended(r)

    def _catch_up(self) -> None:
        """Settle every pass of a decode run in flight that ended by now (its last pass
        is left to the process)."""
        run = self._run
        if run is not None:
            upto = run.ended_by(self.env.now)
            if upto > run.done:
                self._commit_run(upto)
