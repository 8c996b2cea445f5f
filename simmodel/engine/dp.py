"""Attention data parallelism (``dp_size > 1``, reference §2.5).  Pure.

A worker with ``dp_size`` ranks runs one scheduler and one KV pool per rank.  The ranks
advance in lock-step: at a pass start every rank forms its own batch (a rank with nothing
to do forms an empty one), the worker's pass lasts as long as the slowest rank's, and
every rank's tokens are stamped at that common end.  A request is placed on a rank by the
router (``EngineRequest.dp_rank``); the reported worker index is ``worker × dp + rank``.

``DpScheduler`` presents the ranks to the worker process as one scheduler (the interface
of ``VllmScheduler``).  Decode runs are not coalesced (``decode_run`` returns None).
"""
from __future__ import annotations

from simmodel.engine.scheduler import PassPlan


class _KvView:
    """The ranks' KV pools seen together (sums), for telemetry and KV events."""

    def __init__(self, ranks):
        self._kvs = [r.kv for r in ranks]

    @property
    def active_blocks(self) -> int:
        return sum(kv.active_blocks for kv in self._kvs)

    @property
    def inactive_blocks(self) -> int:
        return sum(kv.inactive_blocks for kv in self._kvs)

    @property
    def free(self) -> int:
        return sum(kv.free for kv in self._kvs)

    @property
    def num_blocks(self) -> int:
        return sum(kv.num_blocks for kv in self._kvs)

    def drain_events(self) -> list:
        out = []
        for kv in self._kvs:
            out.extend(kv.drain_events())
        return out


class DpScheduler:
    def __init__(self, ranks: list, prefill_schedule_interval: int = 1):
        self.ranks = ranks
        self.interval = prefill_schedule_interval
        self.step = 0
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
    @property
    def committed_prefill_tokens(self) -> int:
        return sum(r.committed_prefill_tokens for r in self.ranks)

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.ranks)

    @property
    def cache_hit_tokens(self) -> int:
        return sum(r.cache_hit_tokens for r in self.ranks)

    @property
    def mtp_emissions(self) -> int:
        return sum(r.mtp_emissions for r in self.ranks)

    @property
    def mtp_tokens(self) -> int:
        return sum(r.mtp_tokens for r in self.ranks)

    @property
    def held(self) -> int:
        return sum(r.held for r in self.ranks)

    def waiting_on_holds(self) -> bool:
        return any(r.waiting_on_holds() for r in self.ranks)

    # -- one lock-step pass -------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan:
        if self.interval > 1:
            # waiting requests are admitted (prefilled) only on every interval-th step, except
            # on a rank with nothing running (measured: it does not wait)
            on = self.step % self.interval == 0
            for r in self.ranks:
                r.admit_prefill = on or not r.running
        self.step += 1
        parts = [r.schedule(now) for r in self.ranks]
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
        return plan

    def finish(self, plan: PassPlan, end_ms: float, pass_idx: int) -> list:
        done = []
        for r, p in zip(self.ranks, plan.parts):
            if p.entries:
                done.extend(r.finish(p, end_ms, pass_idx))
                plan.first_tokens.extend(p.first_tokens)
        return done

    def decode_run(self, max_passes: int = 4096):
        return None
