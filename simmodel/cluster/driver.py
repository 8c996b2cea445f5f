"""The workload driver: sessions and agentic nodes as SimPy processes.

Every session is a process that waits until its next turn is ready, hands the turn to the
*dispatcher*, and waits for the turn to end (complete, be rejected or be cancelled):

* **trace mode**: a session's first turn is ready at its timestamp; turn k+1 is ready
  ``delay_ms`` after turn k ends (completed, rejected, or failed after its retries); a
  cancelled or timed-out turn ends the session;
* **closed loop** (``concurrency: C``): a session first takes one of C slots (in source
  order, FIFO), its first turn is ready the moment it gets the slot, and it holds the slot
  through all its turns and think times;
* **agentic**: a node is ready at ``max(not_before, each dependency's dispatch or end time
  + its delay)``; a rejected or cancelled dependency still releases its dependents.

The dispatcher reproduces the reference's ordering: at one instant every ready turn is
collected first, then released in (ready time, session index, turn index) order, after
all pass completions of that instant (which may have made turns ready) and before any
worker forms its next batch (see ``phases``).

Delta-cumulative sessions build each prompt at release time from the session's history:
every earlier prompt delta, the output tokens each earlier *completed* turn emitted, and
this turn's delta.  Full prompts stay in their compact form until release.

Event budget: per session, one event per start (arrival or slot grant) and, per turn,
one for its end and one for its delay; one shared dispatch event per instant with
releases.  Per agentic node: one event per dependency wait and one for its ready time.
"""
from __future__ import annotations

import heapq

import numpy as np
import simpy

from simmodel.cluster.phases import Phase, event_at, event_at_time
from simmodel.engine.request import EngineRequest
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import RunPrompt, Session, Turn, Workload

COMPLETED, REJECTED, CANCELLED = "completed", "rejected", "cancelled"
#: A turn's end as its session sees it: a refusal (rejected, failed after its retries)
#: lets the session go on; a cancellation (by the caller or a client timeout) ends it.
OUTCOMES = {"completed": COMPLETED, "rejected": REJECTED, "failed": REJECTED}
TERMINAL = ("completed", "rejected", "cancelled", "timed_out", "failed")
#: Generated output token ids (delta sessions without ``output_token_ids``) are drawn
#: from this range, clear of the small canonical ids given to trace hash blocks.
OUTPUT_TOKEN_RANGE = (1 << 30, 1 << 31)


class Driver:
    def __init__(self, env: simpy.Environment, workload: Workload, router, *,
                 block_size: int, max_model_len: int | None,
                 concurrency: int | None = None, output_rng: np.random.Generator | None = None):
        self.env = env
        self.workload = workload
        self.router = router
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.concurrency = concurrency
        self.output_rng = output_rng
        self.requests: list[EngineRequest] = []     # in release order
        self._ready: list[tuple] = []               # heap of (ready_at, session, turn, seq, box)
        self._flush_pending = False
        self._seq = 0
        self.slots = simpy.Resource(env, capacity=concurrency) if concurrency else None
        # Agentic bookkeeping: request_id -> (dispatched event, ended event)
        self._node_events: dict[str, tuple[simpy.Event, simpy.Event]] = {}
        self.unreleased_cancelled: set[tuple[str, int]] = set()
        self.ended = 0
        self.traffic = None                          # planner's TrafficWindow, if any
        self.on_end = None                           # callable(req) as each request ends
        self.recovery = None                         # cluster.recovery.Recovery (faults)

    # -- processes --------------------------------------------------------------------
    def start(self) -> None:
        """Start one process per session (or agentic node), in source order."""
        env = self.env
        sessions = self.workload.sessions
        if self.workload.kind == "agentic":
            for s in sessions:
                t = s.turns[0]
                self._node_events[t.request_id] = (env.event(), env.event())
            for i, s in enumerate(sessions):
                env.process(self.node(i, s.turns[0]))
        else:
            for i, s in enumerate(sessions):
                env.process(self.session(i, s))

    def session(self, index: int, s: Session):
        """One session: its turns one after another (trace or closed-loop mode)."""
        env = self.env
        slot = None
        if self.slots is not None:
            slot = self.slots.request()
            yield slot
        else:
            first = s.turns[0].arrival_ms or 0.0
            if first > env.now:
                yield event_at_time(env, first)
        history: list[tuple[int, int]] = []         # delta mode: token runs so far
        try:
            for k, turn in enumerate(s.turns):
                if k and turn.delay_ms:
                    yield env.timeout(turn.delay_ms)
                prompt = turn.prompt
                planned = turn.output_token_ids
                if self.workload.prompt_mode == "delta":
                    history.extend(_runs_of(turn.prompt))
                    prompt = RunPrompt(tuple(history), sum(c for _, c in history))
                    if planned is None:
                        planned = self._planned_outputs(turn.output_length)
                req = yield from self._release(index, k, turn, prompt, planned)
                outcome = yield req.on_done
                if outcome == CANCELLED:
                    self.unreleased_cancelled.update(
                        (t.session_id, t.turn_index) for t in s.turns[k + 1:])
                    break
                if self.workload.prompt_mode == "delta" and outcome == COMPLETED:
                    history.extend((tok, 1) for tok in planned[:req.generated])
        finally:
            if slot is not None:
                self.slots.release(slot)

    def node(self, index: int, turn: Turn):
        """One agentic node: wait for every dependency, then for ``not_before``."""
        env = self.env
        ready = turn.arrival_ms or 0.0
        for dep in turn.deps:
            dispatched, ended = self._node_events[dep.request_id]
            ev = dispatched if dep.trigger == "dispatch" else ended
            at = yield ev
            ready = max(ready, at + dep.delay_ms)
        if ready > env.now:
            yield event_at_time(env, ready)
        req = yield from self._release(index, 0, turn, turn.prompt, turn.output_token_ids)
        self._node_events[turn.request_id][0].succeed(env.now)
        yield req.on_done
        self._node_events[turn.request_id][1].succeed(env.now)

    # -- dispatch -----------------------------------------------------------------------
    def _release(self, index: int, k: int, turn: Turn, prompt, planned):
        """Queue a ready turn for this instant's dispatch and wait until it is routed."""
        box = self.env.event()
        heapq.heappush(self._ready, (self.env.now, index, k, self._seq, (turn, prompt, planned, box)))
        self._seq += 1
        if not self._flush_pending:
            self._flush_pending = True
            self.env.process(self._flush())
        req = yield box
        return req

    def _flush(self):
        """Release every turn that became ready at this instant, in reference order."""
        yield event_at(self.env, 0, Phase.DISPATCH)
        self._flush_pending = False
        ready = self._ready
        while ready:
            _, _, _, _, (turn, prompt, planned, box) = heapq.heappop(ready)
            box.succeed(self._dispatch(turn, prompt, planned))

    def _dispatch(self, turn: Turn, prompt, planned) -> EngineRequest:
        uid = len(self.requests)
        seq = TokenSequence(prompt, self.block_size, uid, planned)
        req = EngineRequest(uid, seq, turn.output_length, arrival_ms=self.env.now,
                            session_id=turn.session_id, turn_index=turn.turn_index,
                            max_model_len=self.max_model_len)
        req.on_done = self.env.event()
        req.meta = turn
        self.requests.append(req)
        if self.traffic is not None:
            self.traffic.on_arrival(req)
        self.router.route(req)
        if self.recovery is not None:
            self.recovery.sent(req)
        return req

    def workload_done(self) -> bool:
        """Every turn of the workload has ended (or will never be released)."""
        return self.ended + len(self.unreleased_cancelled) >= self.workload.num_requests

    def on_done(self, req: EngineRequest) -> None:
        """Called by workers when a request completes or is rejected, and by the
        recovery when it fails or times out (unless its client sends it again)."""
        if self.recovery is not None and self.recovery.takes(req):
            return
        self.ended += 1
        if self.traffic is not None:
            self.traffic.on_done(req)
        if self.on_end is not None:
            self.on_end(req)
        if req.on_done is not None and not req.on_done.triggered:
            outcome = OUTCOMES.get(req.status, CANCELLED)
            req.on_done.succeed(outcome)
        req.seq = None          # its block hashes are no longer needed (memory on long runs)

    def cancel(self, req: EngineRequest, status: str = "cancelled") -> None:
        """Cancel a released turn (the seed's ``release_cap_slot``; a client timeout,
        ``status`` timed_out): on its worker it is dropped at the end of the pass in
        flight; held by a router (or, disaggregated, not decoding yet) it leaves now.
        Then its session ends and frees its concurrency slot, and an agentic node's
        dependents are released."""
        if req.status in TERMINAL:
            return
        if self.router.withdraw(req):
            req.status = status
            req.terminal_ms = self.env.now
            self.on_done(req)
        elif req.worker_idx >= 0:
            self.router.workers[req.worker_idx].cancel(req, status)

    def _planned_outputs(self, n: int) -> tuple[int, ...]:
        lo, hi = OUTPUT_TOKEN_RANGE
        return tuple(self.output_rng.integers(lo, hi, size=n).tolist())


def _runs_of(prompt) -> list[tuple[int, int]]:
    """The token runs of a compact prompt (ids repeated run_len times, truncated)."""
    if isinstance(prompt, RunPrompt):
        return list(prompt.runs)
    runs = []
    left = prompt.length
    for tok in prompt.ids:
        if left <= 0:
            break
        n = min(prompt.run_len, left)
        runs.append((tok, n))
        left -= n
    return runs
