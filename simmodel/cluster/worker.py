"""An aggregated worker as a SimPy process: one forward pass at a time.

The worker owns a pure scheduler (``simmodel.engine.api.Scheduler``) and drives it in
simulated time:

    idle ──(its inbox gets a request)──► barrier ──► schedule ──► pass ──► settle ─┐
      ▲                                     ▲                                      │
      └──────────── no work ────────────────┴──────────── work left ───────────────┘

* Work reaches a worker through its ``Inbox`` (a ``simpy.Store``, ``cluster.inbox``);
  handoff steps owed between passes are its ``BoundarySteps`` (``cluster.steps``).
* The pass duration is fixed when the pass starts (from the batch formed then); requests
  submitted during a pass wait for its end (reference §3.1).
* Event budget: one ``PASS_END`` event per forward pass, plus one ``LATE``
  barrier event only when something else is scheduled at the same instant (so that
  same-time arrivals join the batch), plus one wake-up event per idle period.  No event
  per token or per request inside a pass.
* Completed and rejected requests (both at the pass end) go to ``on_done`` callbacks (sessions,
  routers) at the pass end.
* Observers read a worker through :meth:`Worker.view` and :meth:`Worker.gauges`, which
  are current at any instant: a coalesced decode run in flight first settles the passes
  that ended by now (and its subscribers hear of them).  No observer settles anything.
"""
from __future__ import annotations

import math

import simpy

from simmodel.cluster.decode_run import WorkerDecodeRuns
from simmodel.cluster.inbox import Inbox
from simmodel.cluster.phases import BatchFormation, Phase, event_at, order, worker_rank
from simmodel.cluster.steps import BoundarySteps
from simmodel.cluster.worker_readings import WorkerReadings
from simmodel.engine import fpm
from simmodel.engine.api import Scheduler
from simmodel.engine.request import EngineRequest
from simmodel.errors import UserError
from simmodel.metrics.passlog import PassLog


class Worker(WorkerDecodeRuns, WorkerReadings):
    """One aggregated worker (one DP rank): a scheduler, its pass log, its process.
    ``cluster.roles`` has the two roles of a disaggregated cluster."""

    pool = "agg"                          # agg | prefill | decode
    #: Woken from idle, batch after the events of this phase.
    wake_phase = Phase.LATE

    def __init__(self, env: simpy.Environment, idx: int, scheduler: Scheduler,
                 record_events: bool = False, coalesce: bool = True, *,
                 formation: BatchFormation | None = None, inbound=None, on_retract=None):
        self.env = env
        self.idx = idx
        self.formation = formation if formation is not None else BatchFormation()
        self.state = "active"             # starting | active | draining | removed
        self.created_ms = 0.0
        self.removed_ms = None
        self.inbound = inbound            # callable() -> handoffs bound here, not activated
        self.on_retract = on_retract      # callable(worker) when a pass retracts (frees slots)
        self.rank = worker_rank(self.pool, idx)   # its place among one instant's pass ends
        self.end_key = order(Phase.PASS_END, self.rank)
        self.sched = scheduler
        self.inbox = Inbox(env, scheduler.enqueue)
        self._take = self.inbox.take      # move what was routed here into the scheduler
        self.passes = PassLog()
        self.record_events = record_events
        self.coalesce = coalesce
        # observers (``subscribe``) of ended requests, first tokens and KV events
        self._on_done, self._on_first_token, self._on_kv_events = [], [], []
        self._on_drained: list = []
        self.publishes = record_events        # KV events are kept or someone listens
        self._run = None                      # decode run in flight (see _decode_run)
        self.kv_events: list[tuple] = []  # (time_ms, kind, hash)
        self.idle_between_passes = True   # no pass in flight right now
        # handoff steps owed between passes (disaggregated handoff)
        self.steps = BoundarySteps(lambda: self.idle_between_passes, self._take, self._wake)
        # Forward-pass metrics, only while a planner asks for them (``collect_fpm``):
        # the latest ended pass's metrics, taken (and cleared) by the planner's tick.
        self.collect_fpm = False
        self.fpm_latest: dict | None = None
        # no pass from idle_since (last pass end / ready) until idle_until (next pass
        # start; None: still no pass) -- the span idle heartbeats are counted over
        self.idle_since: float | None = 0.0
        self.idle_until: float | None = None
        self.fpm_latest_ms = 0.0              # end of the pass behind ``fpm_latest``
        self.decode_forwards = 0              # decode steps so far (while collecting)
        self.record_gauges = False            # telemetry on: keep the state below
        self._pre = None                      # (pre-schedule KV/running, admitted) in flight
        # faults (cluster.faults): the process, the requests here (what a failure loses;
        # by object: a retry's new part may share a uid with one still being cancelled),
        # the straggler factor of passes starting now
        self.proc = None
        self.live: dict = {}
        self.generation = 0               # failures so far (a step of an earlier one is void)
        self.slow = 1.0

    def submit(self, req: EngineRequest) -> None:
        """Route ``req`` here: it goes into the inbox (waking the worker if it is idle)."""
        req.worker_idx = self.idx
        self.live[id(req)] = req
        self.inbox.put(req)

    def _wake(self) -> None:
        """A handoff step or a state change may have given the idle worker work."""
        self.inbox.wake()

    def drain(self) -> None:
        """Start draining: no new work is routed here; once its work is done the worker
        leaves (``on_drained`` subscribers hear of it)."""
        self.state = "draining"
        self._wake()

    def fail(self) -> list:
        """The worker fails now: its process stops and every request on it is lost (with
        its KV), in the order they reached it.  Passes of a decode run that ended by now
        stand; the pass in flight never ends.  No observer hears of the lost requests:
        the caller decides what becomes of them (``cluster.faults``)."""
        self._catch_up()
        lost = list(self.live.values())
        self.live.clear()
        self.state = "failed"
        self.generation += 1
        if self.proc is not None and self.proc.is_alive:
            self.proc.interrupt("failed")
        self.inbox.abandon()
        self._run = self._pre = None
        self.idle_between_passes = True
        self.idle_since, self.idle_until = self.env.now, None
        return lost

    def restart(self, scheduler: Scheduler) -> None:
        """Back from a failure with ``scheduler`` (a cold cache) and a new process."""
        self.sched = scheduler
        self.inbox = Inbox(self.env, scheduler.enqueue)
        self._take = self.inbox.take
        self.steps = BoundarySteps(lambda: self.idle_between_passes, self._take, self._wake)
        self.state = "active"
        self.idle_since = self.env.now
        self.proc = self.env.process(self.run())

    def has_work(self) -> bool:
        """Something waits (taken or still in the inbox) or runs here."""
        self._take()
        return self.sched.has_work()

    def subscribe(self, *, on_done=None, on_first_token=None, on_kv_events=None,
                  on_drained=None, first: bool = False) -> None:
        """Hear this worker's outcomes: ``on_done(request)`` when a request ends here (at
        the pass end that ends it), ``on_first_token(request)`` at its first token,
        ``on_kv_events(worker idx, [(pass end ms, kind, hash)])`` as its cache changes,
        ``on_drained(worker)`` when a draining worker has emptied (it then stops).
        Observers are called in subscription order; ``first`` puts this one before the
        others (a planner must hear of a finished prefill before the handoff acts)."""
        for fn, hooks in ((on_done, self._on_done), (on_first_token, self._on_first_token),
                          (on_kv_events, self._on_kv_events),
                          (on_drained, self._on_drained)):
            if fn is not None:
                hooks.insert(0 if first else len(hooks), fn)
        self.publishes = self.record_events or bool(self._on_kv_events)

    def _ended(self, req: EngineRequest) -> None:
        self.live.pop(id(req), None)
        for fn in self._on_done:          # (a loop: usually one or two observers)
            fn(req)

    def cancel(self, req: EngineRequest, status: str = "cancelled"):
        """Cancel ``req`` at the end of the pass in flight (or now if none), ending it
        with ``status`` (cancelled, or timed_out by its client); its observers hear of it
        once it is gone."""
        def drop():
            if self.sched.cancel(req):
                req.status = status
                req.terminal_ms = self.env.now
                self._ended(req)
        self.steps.command(drop)

    def run(self):
        """The worker's process, until it leaves (drained) or fails (interrupted)."""
        try:
            yield from self._serve()
        except simpy.Interrupt:
            return                             # failed (``fail``): its work is lost

    def _serve(self):
        env, sched, inbox, steps = self.env, self.sched, self.inbox, self.steps
        while True:
            if inbox.items:                    # (routed while the process was busy)
                self._take()
            if steps.commands or steps.hooks:
                steps.apply()
            if steps.next and not sched.has_work():
                steps.apply_next()
            if self.state == "draining" and self._drained():
                for fn in self._on_drained:    # finished its in-flight work: leaves
                    fn(self)
                return
            # (the common case, work and nothing else due now, needs no generator)
            if (not sched.has_work() or env.peek() <= env.now) and \
                    not (yield from self._await_batch()):
                continue
            if inbox.items:                    # (routed during the barrier)
                self._take()
            start = env.now
            # (a command waiting for the end of the next pass needs that pass on its own)
            run = (sched.decode_run() if self.coalesce and not steps.next
                   and self.slow == 1.0 else None)
            if run is not None:
                self.idle_between_passes = False
                self.idle_until = start
                yield from self._decode_run(*run)
                self.idle_between_passes = True
                self.idle_since, self.idle_until = env.now, None
                continue
            plan, fpm_parts = self._form(start)
            if plan.entries:
                yield from self._one_pass(plan, start, fpm_parts)
            else:
                yield from self._empty_pass(plan, start)

    def _await_batch(self):
        """Wait for work if there is none, then for every arrival of this instant (a
        barrier, only when another event is due now).  False when a wake-up only applied
        handoff commands and left nothing to run."""
        env, sched = self.env, self.sched
        barrier, woken = Phase.LATE, False
        if not sched.has_work():
            yield from self.inbox.wait()
            barrier, woken = self.wake_phase, True
            if self.steps.due():
                self.steps.apply()
                if not sched.has_work():
                    return False
        if env.peek() <= env.now:
            # Let every arrival of this instant reach the queue before batching.
            yield event_at(env, 0, barrier)
            self.formation.note(env.now, math.inf if woken else self.end_key)
        return True

    def _form(self, start: float):
        """Form the next pass: (its plan, its forward-pass metrics parts or None)."""
        sched = self.sched
        if self.record_gauges:
            kv = sched.kv
            pre = (kv.active_blocks, kv.inactive_blocks, kv.free, len(sched.running))
        plan = sched.schedule(start)
        if plan.preempted and self.on_retract is not None:
            self.on_retract(self)
        if self.record_gauges:
            self._pre = (pre, plan.admitted)
        fpm_parts = None
        if self.collect_fpm:
            fpm_parts = (fpm.scheduled(plan.entries),
                         fpm.queued(sched.waiting, self._inbound()))
        return plan, fpm_parts

    def _empty_pass(self, plan, start: float):
        """Nothing to run: settle what the formation decided, wait for held blocks to
        move on, or (nothing will ever change) stop with one line."""
        self._pre = None
        sched = self.sched
        if plan.rejected or plan.preempted or not sched.has_work():
            # (a pass that only preempted had an effect: form the next one now)
            self._settle_rejected(plan.rejected, start)
            return
        if sched.waiting_on_holds():
            # Held blocks will move on (a handoff step wakes us): wait for it.
            yield from self.inbox.wait()
            return
        head = sched.waiting[0]
        raise UserError(
            f"request {head.session_id!r} turn {head.turn_index} "
            f"({head.seq_len} tokens) can never be scheduled on worker {self.idx}: "
            "it does not fit the KV pool or the token budget "
            "(enable_chunked_prefill, max_num_batched_tokens, num_gpu_blocks)")

    def _one_pass(self, plan, start: float, fpm_parts):
        """Run the formed pass: one PASS_END event, then settle it."""
        env, sched = self.env, self.sched
        self.idle_between_passes = False
        self.idle_until = start
        promoted = self.steps.start_pass() if self.steps.next else None
        duration = plan.duration_ms if self.slow == 1.0 else plan.duration_ms * self.slow
        yield event_at(env, duration, Phase.PASS_END, self.rank)
        if self.inbox.items:                   # routed during the pass: queued before it ends
            self._take()
        self._pre = None
        self.idle_between_passes = True
        self.idle_since, self.idle_until = env.now, None
        if promoted:
            self.steps.end_pass(promoted)
        end = env.now
        pass_idx = len(self.passes)
        self.passes.add(start, end, plan.prefill_tokens, plan.num_prefill,
                        plan.num_decode, plan.decode_tokens, plan.kv_blocks_active)
        if self.collect_fpm and fpm_parts is not None:
            self.fpm_latest = fpm.snapshot(self.idx, end - start, *fpm_parts)
            self.fpm_latest_ms = end
            self.decode_forwards += fpm_parts[0]["num_decode_requests"]
        out = sched.settle(plan, end, pass_idx, self.publishes)
        if out.kv_events:
            self._publish([(end, *e) for e in out.kv_events])   # (kind, hash[, rank])
        ended = self._ended
        for r in out.ended:
            ended(r)
        for fn in self._on_first_token:
            for r in out.first_tokens:
                fn(r)
        self._settle_rejected(out.rejected, end)

    def _drained(self) -> bool:
        """Nothing left here: no request, no held source or reserved destination, no
        pending step."""
        return not (self.has_work() or self.sched.held or self.steps.pending()
                    or (self.inbound is not None and self.inbound()))

    def _settle_rejected(self, rejected, end: float) -> None:
        """Rejections, like every effect of a pass, become visible at its end."""
        for r in rejected:
            r.terminal_ms = end
            self._ended(r)

    def _publish(self, events: list) -> None:
        """KV events ``(pass end, kind, hash[, DP rank])``: kept for the result and sent on."""
        if self.record_events:
            self.kv_events.extend(events)
        for fn in self._on_kv_events:
            fn(self.idx, events)
