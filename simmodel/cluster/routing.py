"""What a router is, and how one is made from the config.

A router places each released request on a worker of its pool and hears back from the
workers.  Two exist: ``RoundRobin`` (reference §5.1, ``cluster/router.py``) and
``KvRouter`` (§5.2, ``cluster/kv_router.py``); a disaggregated cluster has one per pool
(``PositionalRoundRobin`` or a ``KvRouter`` derived as the reference derives them).

Adding a router: a class offering :class:`Router` in a new module of ``cluster/``, and
its line in :func:`make_router` (and its mode in ``config.ROUTER_MODES``).
"""
from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from simmodel.cluster.router import PositionalRoundRobin, RoundRobin
from simmodel.engine.request import EngineRequest


@runtime_checkable
class Router(Protocol):
    """The operations the driver, the workers, the planner and telemetry use."""

    #: the pool's workers (the list grows when a planner adds workers)
    workers: list
    #: whether workers must publish their KV events to :meth:`on_kv_events`
    needs_kv_events: bool

    def attach(self) -> None:
        """The workers exist: set up per-worker state."""

    def route(self, req: EngineRequest) -> None:
        """Place ``req`` on a worker now, or hold it (no active worker, queueing)."""

    def pick(self, req: EngineRequest) -> int | None:
        """The worker for ``req``, chosen now without submitting it (None: no active
        worker); a disaggregated decode pool places handoffs this way."""

    def on_first_token(self, req: EngineRequest) -> None:
        """``req``'s first token was emitted (its prompt is done)."""

    def on_done(self, req: EngineRequest) -> None:
        """``req`` completed, was rejected or was cancelled on its worker."""

    def on_kv_events(self, worker: int, events) -> None:
        """KV events ``(pass end ms, kind, hash)`` of ``worker``, in time order."""

    def topology_changed(self) -> None:
        """Workers joined or left (scaling): held requests may go on."""

    def queued(self) -> int:
        """Requests held by the router (telemetry's ``router_queue``)."""

    def worker_failed(self, idx: int, lost: list) -> None:
        """Worker ``idx`` failed: ``lost`` (its requests) are no longer placed there."""

    def withdraw(self, req: EngineRequest) -> bool:
        """Take back ``req`` if the router holds it (a client gave up); True if so."""

    def observe_traffic(self, traffic) -> None:
        """A planner's traffic window, to which admissions are reported (or not)."""


def make_router(cfg, env, workers: list, *, block_size: int, max_num_batched_tokens: int,
                dp_size: int, rng) -> Router:
    """The aggregated cluster's router for ``cluster.router`` (``cfg``)."""
    if cfg.mode == "kv":
        from simmodel.cluster import kv_router      # (only for router mode kv)
        return kv_router.KvRouter(env, workers, cfg, block_size=block_size,
                                  max_num_batched_tokens=max_num_batched_tokens, rng=rng,
                                  dp=dp_size)
    return RoundRobin(workers, dp=dp_size)


def make_pool_routers(cfg, env, prefill_workers: list, decode_workers: list, *,
                      block_size: int, prefill_budget: int, decode_budget: int, streams,
                      dp: tuple[int, int] = (1, 1)):
    """A disaggregated cluster's (prefill router, decode router).  Round robin: one over
    the *active* workers of each pool, advanced once per request (``PositionalRoundRobin``,
    measured).  Router mode kv: derived as the reference derives them -- the prefill
    router has no active-block term; the decode router has overlap, KV-reuse
    assumption, prefill tracking and queueing off.  ``dp``: each pool's ranks per worker
    (attention DP: the routers place on (worker, rank) slots)."""
    if cfg.mode != "kv":
        return (PositionalRoundRobin(prefill_workers, dp[0]),
                PositionalRoundRobin(decode_workers, dp[1]))
    from simmodel.cluster import kv_router
    prefill = kv_router.KvRouter(env, prefill_workers,
                                 dataclasses.replace(cfg, router_track_active_blocks=False),
                                 block_size=block_size, max_num_batched_tokens=prefill_budget,
                                 rng=streams["router_ties"], dp=dp[0])
    decode = kv_router.KvRouter(env, decode_workers, dataclasses.replace(
        cfg, overlap_score_credit=0.0, router_assume_kv_reuse=False,
        router_track_prefill_tokens=False, router_queue_threshold=None),
        block_size=block_size, max_num_batched_tokens=decode_budget,
        rng=streams["decode_router_ties"], dp=dp[1])
    return prefill, decode
