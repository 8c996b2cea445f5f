"""Attention data parallelism (``dp_size > 1``, reference §2.5).  Pure.

A worker with ``dp_size`` ranks runs one scheduler and one KV pool per rank.  The ranks
advance in lock-step: at a pass start every rank forms its own batch (a rank with nothing
to do forms an empty one), the worker's pass lasts as long as the slowest rank's, and
every rank's tokens are stamped at that common end.  A request is placed on a rank by the
router (``EngineRequest.dp_rank``); the reported worker index is ``worker × dp + rank``.

``DpScheduler`` presents the ranks (schedulers of any backend; an SGLang rank takes its
share of the budgets itself, ``simmodel.engine.sglang``) to the worker process as one
scheduler (the ``simmodel.engine.api.Scheduler`` interface).  A decode run is coalesced in
lock-step when every rank with work has one of its own (``decode_run``; with
``prefill_schedule_interval`` > 1 only while no request waits); a handoff step goes to
the request's rank.

``prefill_schedule_interval`` k > 1 (probed on the reference): in a step that is not a
multiple of k (the worker's step count), a rank schedules no work needing more than one
token -- neither a waiting head (admission stops there) nor a chunk of a running
request's prompt (skipped, even a last chunk of one token; decoders still run) -- unless
it has no decoding request (all its running requests are prefilling, or none runs), or it
was allowed prefill in the previous step and that step left requests waiting (the rank
keeps prefilling until its queue drains).  A waiting prompt needing one token (all but
its last token cached) is admitted in any step.  The step count restarts at 0 when a pass
(or a formation that only rejected) leaves the worker with no work; arrivals at that
pass end come after it.
"""
from __future__ import annotations

from operator import attrgetter, itemgetter

import numpy as np

from simmodel.engine.api import PassPlan, RunOutcome
from simmodel.engine.base import SchedulerBase


_time = itemgetter(0)


def _total(name: str, doc: str) -> property:
    """A read-only property: the sum of attribute ``name`` over ``self._parts``."""
    get = attrgetter(name)
    return property(lambda self: sum(get(p) for p in self._parts), doc=doc)


class _KvView:
    """The ranks' KV pools seen together (sums), for telemetry and KV events; an event
    carries its rank, ``(kind, hash, rank)`` (a KV router indexes each rank apart)."""

    def __init__(self, ranks):
        self._parts = [r.kv for r in ranks]

    active_blocks = _total("active_blocks", "KV blocks held by requests")
    inactive_blocks = _total("inactive_blocks", "cached blocks no request holds")
    free = _total("free", "blocks holding nothing")
    num_blocks = _total("num_blocks", "blocks in the pools")

    def drain_events(self) -> list:
        out = []
        for rank, kv in enumerate(self._parts):
            out.extend((kind, h, rank) for kind, h in kv.drain_events())
        return out


class DpScheduler:
    """The ranks of one attention-DP worker in lock-step, as one ``Scheduler``."""

    def __init__(self, ranks: list, prefill_schedule_interval: int = 1):
        self.ranks = ranks
        self._parts = ranks
        self.interval = prefill_schedule_interval
        self.step = 0
        self._carry = [False] * len(ranks)   # prefill allowed last step, queue left waiting
        first = ranks[0]
        self.bs = first.bs
        self.num_blocks = first.num_blocks
        self.role = first.role
        self.kv = _KvView(ranks)

    # -- queues -----------------------------------------------------------------------------
    def enqueue(self, req) -> None:
        self.ranks[req.dp_rank].enqueue(req)

    def cancel(self, req) -> bool:
        return self.ranks[req.dp_rank].cancel(req)

    def has_work(self) -> bool:
        return any(r.has_work() for r in self.ranks)

    @property
    def waiting(self) -> list:
        return [q for r in self.ranks for q in r.waiting]

    @property
    def running(self) -> list:
        return [q for r in self.ranks for q in r.running]

    # -- counters ---------------------------------------------------------------------------
    committed_prefill_tokens = _total("committed_prefill_tokens", "over the ranks")
    preemptions = _total("preemptions", "over the ranks")
    cache_hit_tokens = _total("cache_hit_tokens", "over the ranks")
    mtp_emissions = _total("mtp_emissions", "over the ranks")
    mtp_tokens = _total("mtp_tokens", "over the ranks")
    held = _total("held", "held sources and reserved destinations over the ranks")

    def waiting_on_holds(self) -> bool:
        return any(r.waiting_on_holds() for r in self.ranks)

    # -- one lock-step pass -------------------------------------------------------------------
    def _gate_prefill(self) -> None:
        """``prefill_schedule_interval`` (measured on the reference, module doc): whether
        each rank may schedule prefill work needing more than one token in this step."""
        on = self.step % self.interval == 0
        for i, r in enumerate(self.ranks):
            decoding = any(q.generated and q.seq_len - q.computed <= 1 for q in r.running)
            r.admit_prefill = on or self._carry[i] or not decoding

    def schedule(self, now: float) -> PassPlan:
        if self.interval > 1:
            self._gate_prefill()
        self.step += 1
        parts = [r.schedule(now) for r in self.ranks]
        if self.interval > 1:
            for i, r in enumerate(self.ranks):
                self._carry[i] = r.admit_prefill and bool(r.waiting)
        plan = PassPlan()
        plan.parts = parts
        for p in parts:
            plan.entries.extend(p.entries)
            plan.rejected.extend(p.rejected)
            plan.prefill_tokens += p.prefill_tokens
            plan.num_prefill += p.num_prefill
            plan.num_decode += p.num_decode
            plan.decode_tokens += p.decode_tokens
            plan.kv_blocks_active += p.kv_blocks_active
            plan.admitted += p.admitted
            plan.preempted = plan.preempted or p.preempted
        # the worker's pass ends with its slowest rank
        plan.duration_ms = max((p.duration_ms for p in parts if p.entries), default=0.0)
        if not plan.entries and not self.has_work():
            self.step = 0            # (it only rejected: the worker is idle again)
        return plan

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int,
               first_tokens: list) -> list:
        """Each rank's ``finish`` of its part of ``plan``; the requests that ended."""
        done: list = []
        for r, p in zip(self.ranks, plan.parts):
            if p.entries:
                done.extend(r.finish(p, end_ms, pass_idx, first_tokens))
        if not self.has_work():
            self.step = 0            # idle: the step count restarts with the next pass
        return done

    settle = SchedulerBase.settle    # the ranks' KV events, then ``finish`` (as a rank's)

    # -- coalesced decode runs in lock-step ----------------------------------------------------
    def decode_run(self, max_passes: int = 4096):
        """A lock-step run: every rank with work has a decode run of its own (ranks with
        nothing to do form empty batches and do not count); the run lasts until the
        first completion on any rank, each pass as long as its slowest rank's.  With
        ``prefill_schedule_interval`` > 1 only while no rank has a request waiting (the
        gate then decides nothing; the run's passes count as steps)."""
        if self.interval > 1 and any(r.waiting for r in self.ranks):
            return None
        runs, total = [], 0
        for r in self.ranks:
            if r.has_work():
                run = r.decode_run(max_passes)
                if run is None:
                    return None
                runs.append(run[0])
                total += run[1]
        if not runs:
            return None
        k = min(len(d) for d in runs)
        if k < 2:
            return None
        durations = runs[0][:k].copy()
        for d in runs[1:]:
            np.maximum(durations, d[:k], out=durations)
        return durations, total

    def queue_shut(self) -> bool:
        return all(r.queue_shut() for r in self.ranks)

    def commit_decode_run(self, durations, total: int, m: int, start: float,
                          pass_idx0: int, record_events: bool) -> RunOutcome:
        """Each rank with work commits ``m`` passes at the lock-step pass ends; the pass-log
        rows are the ranks' sums (an idle rank's blocks included, as a pass's)."""
        outs, events, idle_blocks = [], [] if record_events else None, 0
        first_end = start + float(durations[0])
        for rank, r in enumerate(self.ranks):
            if not r.running:
                idle_blocks += r.kv.active_blocks
                if events is not None:   # (what its last pass left: with the first pass)
                    events.extend((first_end, kind, h, rank)
                                  for kind, h in r.kv.drain_events())
                continue
            own = sum(q.seq_len for q in r.running)
            out = r.commit_decode_run(durations, own, m, start, pass_idx0, record_events)
            outs.append(out)
            if events is not None and out.kv_events:
                events.extend((t, kind, h, rank) for t, kind, h in out.kv_events)
        if events:
            events.sort(key=_time)         # (stable: rank order within a pass end)
        self.step += m                     # (stepping counts a step a pass)
        if not self.has_work():
            self.step = 0
        first = outs[0]
        done = [q for o in outs for q in o.done]
        return RunOutcome(done, first.starts, first.stops, sum(o.num_decode for o in outs),
                          sum(o.decode_tokens for o in outs),
                          sum(o.kv_active for o in outs) + idle_blocks, events)

    # -- disaggregated handoff: the request's rank ----------------------------------------------
    def reserve(self, req) -> int | None:
        return self.ranks[req.dp_rank].reserve(req)

    def unreserve(self, req) -> None:
        self.ranks[req.dp_rank].unreserve(req)

    def activate(self, req) -> int:
        return self.ranks[req.dp_rank].activate(req)

    def release_source(self, req) -> None:
        self.ranks[req.dp_rank].release_source(req)
