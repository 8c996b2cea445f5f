"""The workload driver: releases turns into the cluster as SimPy processes.

* One *source* process walks the sessions in first-turn arrival order (ties in source
  order) and releases each session's first turn at its timestamp.  Event budget: one
  event per session start.
* A multi-turn session then runs as its own process: it waits on its turn's completion
  (or rejection), then ``delay_ms``, then releases the next turn.  Event budget: two
  events per later turn (completion, delay).

Every release creates an ``EngineRequest`` (hashing its prompt at the engine block size
only now) and hands it to the router.
"""
from __future__ import annotations

import simpy

from simmodel.cluster.clock import event_at_time
from simmodel.engine.request import EngineRequest
from simmodel.engine.tokens import TokenSequence
from simmodel.workload.model import Session, Turn, Workload


class Driver:
    def __init__(self, env: simpy.Environment, workload: Workload, router, *,
                 block_size: int, max_model_len: int | None):
        self.env = env
        self.workload = workload
        self.router = router
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.requests: list[EngineRequest] = []     # in release order

    # -- processes --------------------------------------------------------------------
    def run(self):
        """The source process: start every session at its first turn's arrival."""
        env = self.env
        sessions = self.workload.sessions
        order = sorted(range(len(sessions)), key=lambda i: sessions[i].turns[0].arrival_ms)
        for i in order:
            s = sessions[i]
            t = s.turns[0].arrival_ms
            if t > env.now:
                yield event_at_time(env, t)
            if len(s.turns) == 1:
                self.release(s.turns[0])
            else:
                env.process(self.session(s))

    def session(self, s: Session):
        """A multi-turn session: each later turn waits for the previous one to end."""
        env = self.env
        for k, turn in enumerate(s.turns):
            if k and turn.delay_ms:
                yield env.timeout(turn.delay_ms)
            req = self.release(turn)
            req.on_done = env.event()
            yield req.on_done

    # -- helpers ----------------------------------------------------------------------
    def release(self, turn: Turn) -> EngineRequest:
        uid = len(self.requests)
        seq = TokenSequence(turn.prompt, self.block_size, uid, turn.output_token_ids)
        req = EngineRequest(uid, seq, turn.output_length, arrival_ms=self.env.now,
                            session_id=turn.session_id, turn_index=turn.turn_index,
                            max_model_len=self.max_model_len)
        self.requests.append(req)
        self.router.route(req)
        return req

    def on_done(self, req: EngineRequest) -> None:
        """Called by workers when a request completes or is rejected."""
        if req.on_done is not None:
            req.on_done.succeed()
