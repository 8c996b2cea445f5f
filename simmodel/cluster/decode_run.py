"""A coalesced decode run: the pass ends of a run of pure-decode passes that one timeout
covers (``Worker._decode_run``), and which of them are settled.  Pure arithmetic.

A run is formed when the batch cannot change until a request completes (the scheduler's
``decode_run``); it is cut short when the worker's inbox gets something at time ``t``:
the passes that started before ``t`` run to their end (:meth:`CoalescedRun.cut_at`).
"""
from __future__ import annotations

import numpy as np


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
