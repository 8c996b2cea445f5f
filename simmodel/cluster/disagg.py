"""Disaggregated serving: prefill pool, decode pool and the KV handoff between them.

Lifecycle of one request (reference §6, vLLM order "source first"; ``order=
"destination_first"`` switches to SGLang's, where the destination is reserved at arrival
and the transfer starts as soon as the source is held):

1. the driver's request is routed to a **prefill worker** (round robin over the pool) as
   a prefill part with one output token; prefill workers' passes cost prefill only and
   that token is never reported;
2. at the end of the pass that completes the prompt the **source is held** (the prompt's
   blocks stay allocated on the prefill worker);
3. a **decode worker** is chosen (its own round robin) and the **destination reserved**:
   the prompt's blocks are allocated there, reusing the leading full blocks it already
   holds.  If they cannot be had yet the request waits in that worker's FIFO and is
   retried whenever one of its requests ends (SGLang: whenever slots are freed -- a
   completion, a retraction, a duplicate prompt -- and then at that boundary's budget,
   see ``_retry_pending``).  Like every handoff step, the
   reservation is applied to a worker between its passes (at the end of the pass in
   flight);
4. the **KV transfer** runs as its own SimPy process: ``tokens x bytes_per_token /
   (bandwidth x 1e9)`` s (whole prompt, or in ``destination_missing`` mode only the
   blocks the destination lacked), 0 when either size is unset;
5. at its end the destination is **activated** at the decode worker's next pass
   boundary, and the source **released** at the prefill worker's; the decode worker's next pass treats the request as a decoder of the prompt's
   length and emits the first visible token at its end, so TTFT = prefill queueing +
   prefill + transfer + decode queueing + one decode pass.

Event budget per request: one transfer process (one event when the delay is positive).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque

import simpy

from simmodel.cluster.disagg_boundary import BoundaryReservations
from simmodel.cluster.disagg_faults import HandoffFaults
from simmodel.cluster.handoff_record import HandoffRecord
from simmodel.cluster.kv_link import degraded_ms, link_network
from simmodel.cluster.phases import Phase, event_at
from simmodel.config import KvTransferConfig
from simmodel.engine.request import EngineRequest
from simmodel.engine.timing import duration_ns

class Handoff(BoundaryReservations, HandoffFaults):
    """The router of a disaggregated cluster and the owner of every handoff."""

    def __init__(self, env: simpy.Environment, prefill_workers: list, decode_workers: list,
                 transfer: KvTransferConfig, routers: tuple, *, max_model_len: int | None,
                 notify_done, order: str = "source_first", decode_dp: int = 1):
        self.env = env
        self.prefill_workers = prefill_workers
        self.workers = decode_workers            # what Driver.cancel looks up
        self.transfer = transfer
        self.max_model_len = max_model_len
        self.notify_done = notify_done
        # vLLM reserves the destination once the source is held ("source_first"); SGLang
        # reserves it at arrival ("destination_first", for when that backend exists).
        self.order = order
        self.network = (link_network(env, transfer.bandwidth_gb_s, transfer.policy)
                        if transfer.contention else None)
        # each pool's router (routing.Router, from routing.make_pool_routers)
        self.prefill_router, self.decode_router = routers
        # per decode slot (worker idx, DP rank; measured: each rank of an attention-DP
        # worker keeps its own): reservations waiting for blocks (FIFO), and those
        # deferred to the worker's pass end (see _boundary)
        self.pending: dict[tuple, deque] = defaultdict(deque)
        self.deferred: dict[tuple, deque] = defaultdict(deque)
        self._activations: dict[tuple, tuple] = {}   # decode slot -> (time, count)
        # destination first: decode slots whose deferred queue has no _boundary
        # scheduled (it waits for the worker's next call, see _boundary)
        self._unhooked: set = set()
        self.decode_dp = decode_dp
        self._due: dict[int, set] = defaultdict(set)  # DP: ranks owed this boundary
        self._route_now = False
        # scaling runs: requests that found no active decode worker, in order
        self._await_decode: deque = deque()
        # per decode worker: handoffs bound to it and not yet activated (a planner's
        # forward-pass metrics count them as queued decode requests)
        self._inbound: dict[int, dict] = defaultdict(dict)
        # faults: per prefill worker, the requests whose source it holds, not delivered
        self._held: dict[int, dict] = defaultdict(dict)
        self.link_windows: list = []      # link faults: (from ms, to ms, bandwidth factor)

    def inbound_of(self, idx: int) -> dict:
        """The handoffs bound to decode worker ``idx`` and not yet activated (queued,
        deferred or reserved): its queued decode requests, and work that keeps it from
        leaving."""
        return self._inbound[idx]

    def reservations_waiting(self, idx: int, rank: int) -> bool:
        """Reservations wait for decode worker ``idx``'s rank ``rank``: for its blocks or
        deferred to its pass end (measured, see the schedulers' ``reservations_waiting``;
        vLLM, ``long_disagg_deferred_readmit``: of two queued reservations retried at a
        pass end, the second is deferred to the next, and the worker's preempted head
        still waits behind it)."""
        key = (idx, rank)
        return bool(self.pending.get(key) or self.deferred.get(key))

    def on_decode_retract(self, w) -> None:
        """Measured: a decode worker's preemption (SGLang: retraction) frees blocks like
        a completion does, so waiting reservations are retried."""
        for rank in range(self.decode_dp):
            self._retry_pending(w, rank)

    # -- 1. prefill ---------------------------------------------------------------------
    def route(self, req: EngineRequest) -> None:
        part = EngineRequest(req.uid, req.seq, 1, arrival_ms=req.arrival_ms,
                             session_id=req.session_id, turn_index=req.turn_index,
                             max_model_len=self.max_model_len)
        part.meta = req
        req.handoff = HandoffRecord(prefill=part)
        if self.order == "destination_first":
            if self.max_model_len is not None and req.prompt_len >= self.max_model_len:
                # measured: refused at arrival (after the instant's routing), before any
                # destination is reserved
                event_at(self.env, 0, Phase.ROUTE_LAST).callbacks.append(
                    lambda _e: self._reject(req))
                return
            # the prefill is submitted once the reservation succeeds (see _reserve)
            d = None if self._await_decode else self._choose_decode(req)
            if d is None:
                self._await_decode.append(req)   # no active decode worker yet (scaling)
            else:
                self._send_reservation(d, req)
            return
        # Routed after everything else at this instant (see phases.ROUTE_LAST).
        event_at(self.env, 0, Phase.ROUTE_LAST).callbacks.append(lambda _e: self._route_prefill(part))

    def _reject(self, req: EngineRequest) -> None:
        req.status = "rejected"
        req.terminal_ms = self.env.now
        self.notify_done(req)

    def _route_prefill(self, part: EngineRequest) -> None:
        if self.current(part):               # (not a lost attempt's: disagg_faults)
            self.prefill_router.route(part)  # submits, or holds it (no active worker, queue)

    def prefill_topology_changed(self) -> None:
        """Prefill workers joined or left (scaling)."""
        self.prefill_router.topology_changed()

    def queued(self) -> dict:
        """Requests held by each pool's routing (telemetry's ``router_queue``): waiting for
        a prefill worker (or in the prefill KV router's queue); handoffs waiting for an
        active decode worker."""
        decode = len(self._await_decode) + self.decode_router.queued()
        return {"prefill": self.prefill_router.queued(), "decode": decode}

    def decode_topology_changed(self) -> None:
        """Decode workers joined or left (scaling): handoffs that waited for an active
        decode worker go on, in order."""
        self.decode_router.topology_changed()
        while self._await_decode:
            d = self._choose_decode(self._await_decode[0])
            if d is None:
                return
            self._send_reservation(d, self._await_decode.popleft())

    def on_prefill_done(self, part: EngineRequest) -> None:
        """Prefill workers' notification: the prompt is done (or was rejected)."""
        req = part.meta
        if not self.current(part):
            self._stale_prefill(part)
            return
        req.handoff.prefill_worker_idx = part.worker_idx
        self.prefill_router.on_first_token(part)
        self.prefill_router.on_done(part)
        if part.status != "prefilled":          # rejected (or cancelled) on the prefill side
            req.status = part.status
            req.terminal_ms = part.terminal_ms
            self.notify_done(req)
            if req.handoff.destination_reserved_ms == req.handoff.destination_reserved_ms:
                self._free_destination(req)     # destination first: reserved at arrival
            return
        req.handoff.source_held_ms = self.env.now
        self._held[part.worker_idx][req.uid] = req
        if self.order == "destination_first":
            self._start_transfer_if_ready(self.workers[req.worker_idx], req)
        elif self._await_decode:
            self._await_decode.append(req)          # behind earlier ones (scaling runs)
        else:
            d = self._choose_decode(req)
            if d is None:
                self._await_decode.append(req)      # no active decode worker yet
            else:
                self._send_reservation(d, req)

    def _choose_decode(self, req: EngineRequest):
        """The decode worker for ``req`` (None when none is active)."""
        # (the decode pool's round robin advances once per handoff, in order)
        i = self.decode_router.pick(req)
        d = None if i is None else self.workers[i]
        if d is not None:
            req.worker_idx = d.idx
        return d

    def _send_reservation(self, d, req: EngineRequest) -> None:
        self._inbound[d.idx][req.uid] = req
        rank = req.dp_rank
        key = (d.idx, rank)
        if d.idle_between_passes and not self.deferred[key]:
            self._reserve_or_wait(d, req)
            return
        # Mid-pass: deferred to the pass end (see _boundary).
        queue = self.deferred[key]
        queue.append(req)
        if key in self._unhooked:
            # an idle worker's queue waiting for a call: this reservation is one
            self._call(d, rank)
        elif len(queue) == 1:
            d.steps.at_boundary(self._step(d, rank))

    def _reserve_or_wait(self, d, req: EngineRequest) -> float | None:
        if -(-req.prompt_len // d.sched.bs) > d.sched.num_blocks:
            self._reject_at_destination(req)       # could never be reserved
            return None
        queue = self.pending[(d.idx, req.dp_rank)]
        if queue:
            queue.append(req)
            return None
        delay = self._reserve(d, req)
        if delay is None:
            queue.append(req)
        return delay

    # -- 2. destination -----------------------------------------------------------------
    def _reserve(self, d, req: EngineRequest) -> float | None:
        """Reserve the destination and start the transfer; its delay, or None if the
        decode worker cannot hold the prompt yet."""
        missing = d.sched.reserve(req)
        if missing is None:
            return None
        rec = req.handoff
        rec.destination_reserved_ms = self.env.now
        rec.missing_tokens = missing
        if self.order == "destination_first":
            # SGLang: the prompt goes to a prefill worker only now, after everything else
            # at this instant; one deferred reservation per decode pass end (measured)
            if self._route_now:
                self._route_prefill(rec.prefill)
            else:
                event_at(self.env, 0, Phase.ROUTE_LAST).callbacks.append(
                    lambda _e: self._route_prefill(rec.prefill))
            return math.inf
        return self._start_transfer_if_ready(d, req)

    def _start_transfer_if_ready(self, d, req: EngineRequest) -> float:
        """Start the transfer once both ends are ready (source held, destination
        reserved); returns its delay (0.0 if it cannot start yet)."""
        rec = req.handoff
        if rec.missing_tokens is None or rec.source_held_ms != rec.source_held_ms:
            return 0.0                              # not reserved yet / source not held
        tokens = req.prompt_len if self.transfer.timing == "full_prompt" else rec.missing_tokens
        delay = self.transfer_ms(tokens)
        if self.link_windows and delay > 0 and self.network is None:
            delay = degraded_ms(self.env.now, delay, self.link_windows)
        self.env.process(self.kv_transfer(d, req, delay, tokens))
        return delay

    def transfer_ms(self, tokens: int) -> float:
        t = self.transfer
        if t.bandwidth_gb_s is None or t.bytes_per_token is None or tokens <= 0:
            return 0.0
        ms = tokens * t.bytes_per_token / (t.bandwidth_gb_s * 1e9) * 1000.0
        return duration_ns(ms) / 1e6

    def _reject_at_destination(self, req: EngineRequest) -> None:
        """The prompt needs more blocks than the decode worker has: rejected (as an
        aggregated worker rejects a prompt larger than its pool); the source is freed."""
        self._inbound[req.worker_idx].pop(req.uid, None)
        rec = req.handoff
        self._held[rec.prefill_worker_idx].pop(req.uid, None)
        if rec.source_held_ms == rec.source_held_ms:         # held: free it
            p = self.prefill_workers[rec.prefill_worker_idx]

            def release():
                rec.source_released_ms = self.env.now
                p.sched.release_source(rec.prefill)
            p.steps.command(release)
        self._reject(req)

    # -- 3. transfer, activation, release -----------------------------------------------------
    def kv_transfer(self, d, req: EngineRequest, delay_ms: float, tokens: int = 0):
        """One KV transfer: the delay (or its share of shared links), then the
        destination is activated at the decode worker's next pass boundary, and the
        source released at the prefill worker's."""
        rec = req.handoff
        rec.transfer_ms = delay_ms
        if self.network is not None and tokens > 0:
            links = (("prefill", rec.prefill_worker_idx),)
            if self.transfer.decode_links:
                links += (("decode", d.idx),)
            nbytes = tokens * self.transfer.bytes_per_token
            t = self.network.start(nbytes, links)
            yield t.done
            rec.transfer_ms = self.env.now - t.requested_ms
            rec.transfer_queue_ms = t.started_ms - t.requested_ms
            busy = self.env.now - t.started_ms
            rec.transfer_gb_s = nbytes / (busy / 1000.0) / 1e9 if busy > 0 else float("nan")
        elif delay_ms > 0:
            yield event_at(self.env, delay_ms, Phase.TRANSFER_DONE)
        if rec.aborted:
            return                         # an end failed meanwhile (disagg_faults)
        rec.arrived = True
        self._held[rec.prefill_worker_idx].pop(req.uid, None)
        p = self.prefill_workers[rec.prefill_worker_idx]
        gen = p.generation

        def release():
            if p.generation != gen:
                return                     # the source went with a failure since
            rec.source_released_ms = self.env.now
            p.sched.release_source(rec.prefill)

        idle = d.idle_between_passes       # applied now, not at a pass end
        rank = req.dp_rank
        key = (d.idx, rank)

        def activate():
            if rec.aborted:
                return
            now = self.env.now
            self._inbound[d.idx].pop(req.uid, None)
            rec.destination_activated_ms = now
            t, n = self._activations.get(key, (None, 0))
            self._activations[key] = (now, n + 1 if t == now else 1)
            freed = d.activate(req)
            if self.order == "destination_first":
                # SGLang: the pages its prompt shares with the tree came back (a
                # waiting reservation may now fit); an idle worker's activation is a
                # call of its own (at a pass end it counts in that boundary's budget)
                if idle:
                    if freed > 0:
                        self._unblock(d, rank)
                    if self.deferred[key] and key in self._unhooked:
                        self._route_now = True
                        self._call(d, rank)
                        self._route_now = False
                elif freed > 0:
                    self._retry_pending(d, rank)
            p.steps.command(release)
        d.steps.command(activate)

    def _free_destination(self, req: EngineRequest) -> None:
        """The prefill of a request whose destination was reserved first ended without a
        prompt to send: the reservation is given back, and waiting ones are retried."""
        d = self.workers[req.worker_idx]
        self._inbound[d.idx].pop(req.uid, None)
        d.sched.unreserve(req)
        self._retry_pending(d, req.dp_rank)

    # -- 4. decode side ---------------------------------------------------------------------
    def on_decode_done(self, req: EngineRequest) -> None:
        """Decode workers' notification: the request ended; its blocks are free, so
        waiting reservations on that worker are retried."""
        self.decode_router.on_done(req)
        self.notify_done(req)
        self._retry_pending(self.workers[req.worker_idx], req.dp_rank)
