"""Build a cluster for a scenario, run it, collect the result.

``build`` elaborates everything (workload, schedulers, workers, router, driver) and
checks it before any process starts; ``run`` executes the SimPy environment and turns the
records into a ``Result`` (``simmodel.finish``, imported once the run is over: the
simulation path imports no pandas).
"""
from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass, field
from functools import partial

import simpy

from simmodel.cluster.driver import Driver
from simmodel.cluster.phases import BatchFormation, PhasedEnvironment
from simmodel.cluster.planner import Planner, ScalablePool
from simmodel.cluster.routing import make_pool_routers, make_router
from simmodel.cluster.worker import Worker
from simmodel.config import ConfigError, Scenario
from simmodel.config.scenario import uses_aic
from simmodel.engine.factory import make_scheduler
from simmodel.engine.limits import never_runs
from simmodel.engine.timing import make_timing
from simmodel.errors import UserError
from simmodel.result import Result
from simmodel.rng import Streams
from simmodel.run_loop import Watchdog, cut_short, run_until, run_with_progress
from simmodel.workload.model import Workload


@dataclass
class Cluster:
    env: simpy.Environment
    workers: list                  # aggregated workers, or the decode pool
    router: object
    driver: Driver
    workload: Workload
    prefill_workers: list = field(default_factory=list)   # disaggregated only
    planner: object = None                                  # scaling runs only
    telemetry: object = None                                # ``telemetry:`` set only
    recovery: object = None                 # retries, client timeouts (cluster.recovery)
    faults: object = None                   # ``faults:`` set only (cluster.faults)
    lifecycle: list = field(default_factory=list)   # fault transitions without a planner
    new_scheduler: object = None    # callable(pool, idx): a worker's scheduler (repairs too)


def check_schedulable(workload: Workload, scenario: Scenario, eng) -> None:
    """Refuse up front, naming the file and line, a request that provably can never
    complete where the reference aborts the replay on it (``engine.limits.never_runs``;
    docs/model.md, "Requests that can never run").  ``eng``: the aggregated or prefill
    engine.  What the reference rejects stays a rejection at run time."""
    cl = scenario.cluster
    decode = cl.decode.engine if cl.disaggregated else eng
    delta = workload.prompt_mode == "delta"     # prompts built at release: known then
    for s in workload.sessions:
        for t in s.turns:
            problem = never_runs(t.input_length, t.output_length, eng, decode, delta)
            if problem:
                where = f"{workload.source}:{t.line}" if t.line else workload.source
                raise UserError(f"{where}: request {t.session_id!r} {problem}")


def build(scenario: Scenario, streams: Streams, workload: Workload | None = None,
          scaling_policy=None) -> Cluster:
    """Elaborate the cluster for ``scenario``; ``workload`` replaces the scenario's own
    (a workload built in Python, e.g. in tests or notebooks)."""
    cl = scenario.cluster           # checked across its sections when it was made
    first = cl.prefill.engine if cl.disaggregated else cl.engine
    bs = first.effective_block_size
    if workload is None:
        from simmodel.workload.build import build_workload
        workload = build_workload(scenario.workload, engine_block_size=bs, streams=streams)
    check_schedulable(workload, scenario, first)
    env = PhasedEnvironment()
    record = scenario.run.record_kv_events
    concurrency = scenario.workload.concurrency
    # The config refuses it for an agentic trace; this catches a graph workload built in Python.
    if concurrency is not None and workload.kind != "sessions":
        raise UserError(f"{scenario.source or 'scenario'}: workload.concurrency: not supported "
                        f"for format {scenario.workload.format!r} (agentic workloads)")
    build_pools = _build_disaggregated if cl.disaggregated else _build_aggregated
    cluster = build_pools(scenario, env, workload, streams, concurrency, record,
                          scaling_policy)
    if scenario.faults or scenario.workload.client_timeout_ms is not None:
        from simmodel.cluster.faults import install      # (only when asked: start-up)
        install(cluster, scenario, streams)
    return cluster


def _build_aggregated(scenario, env, workload, streams, concurrency, record,
                      scaling_policy) -> Cluster:
    """One pool of workers behind the router of ``cluster.router``."""
    cl = scenario.cluster
    eng = cl.engine
    bs, rcfg = eng.effective_block_size, cl.router
    timing = make_timing(eng)
    workers: list[Worker] = []
    router = make_router(rcfg, env, workers, block_size=bs,
                         max_num_batched_tokens=eng.max_num_batched_tokens,
                         dp_size=eng.dp_size, rng=streams["router_ties"])
    driver = Driver(env, workload, router, block_size=bs, max_model_len=eng.max_model_len,
                    concurrency=concurrency, output_rng=streams["output_tokens"])

    formation = BatchFormation()            # shared by the cluster's workers
    listens = router.needs_kv_events        # the router follows caches and prompts

    def new_scheduler(_pool: str, i: int):
        return make_scheduler(eng, timing, record_events=record or listens, worker=i)

    def make_worker(i: int) -> Worker:
        w = Worker(env, i, new_scheduler("agg", i), record_events=record,
                   coalesce=scenario.run.coalesce_decode, formation=formation)
        w.subscribe(on_done=router.on_done)          # the router hears first (reference)
        w.subscribe(on_done=driver.on_done)
        if listens:
            w.subscribe(on_first_token=router.on_first_token,
                        on_kv_events=router.on_kv_events)
        return w

    for i in range(cl.workers):
        workers.append(make_worker(i))
    router.attach()
    for w in workers:
        _spawn(env, w)
    planner = None
    if scaling_policy is not None:
        pool = ScalablePool("decode", workers, lambda i: _spawn(env, make_worker(i)),
                            _startup_ms(eng), router.topology_changed)
        planner = _start_planner(env, scaling_policy, {"decode": pool}, driver)
        router.observe_traffic(planner.traffic)
    driver.start()
    cluster = Cluster(env, workers, router, driver, workload)
    cluster.new_scheduler = new_scheduler
    cluster.planner = planner
    _start_telemetry(cluster, scenario, {"agg": workers}, {"agg": router.queued})
    return cluster


def _start_telemetry(cluster: Cluster, scenario: Scenario, pools: dict, queues: dict) -> None:
    if scenario.telemetry is None:
        return
    from simmodel.cluster.telemetry import Telemetry
    cluster.telemetry = Telemetry(cluster.env, pools, queues, cluster.driver,
                                  scenario.telemetry.interval_ms, scenario.run.max_sim_time_ms)
    cluster.env.process(cluster.telemetry.run())


def _spawn(env: simpy.Environment, w: Worker) -> Worker:
    """Start ``w``'s process."""
    w.proc = env.process(w.run())
    return w


def _startup_ms(eng) -> float | None:
    return None if eng.startup_time is None else eng.startup_time * 1000.0


def _start_planner(env, policy, pools: dict, driver: Driver) -> Planner:
    planner = Planner(env, policy, pools=pools, driver=driver)
    driver.traffic = planner.traffic
    env.process(planner.run())
    return planner


def _handoff(cl, env, prefill_workers: list, decode_workers: list, streams):
    """The handoff between the pools with their routers, in the backend's order: SGLang
    reserves the destination at arrival (reference §6), vLLM and TRT-LLM once the source
    is held."""
    from simmodel.cluster.disagg import Handoff     # (aggregated runs never load it)
    routers = make_pool_routers(cl.router, env, prefill_workers, decode_workers,
                                block_size=cl.prefill.engine.effective_block_size,
                                prefill_budget=cl.prefill.engine.max_num_batched_tokens,
                                decode_budget=cl.decode.engine.max_num_batched_tokens,
                                streams=streams,
                                dp=(cl.prefill.engine.dp_size, cl.decode.engine.dp_size))
    order = "destination_first" if cl.prefill.engine.backend == "sglang" else "source_first"
    return Handoff(env, prefill_workers, decode_workers, cl.kv_transfer, routers,
                   max_model_len=cl.prefill.engine.max_model_len, notify_done=None,
                   order=order, decode_dp=cl.decode.engine.dp_size)


def _build_disaggregated(scenario, env, workload, streams, concurrency, record,
                         scaling_policy=None) -> Cluster:
    """Prefill pool + decode pool behind the handoff (round robin per pool)."""
    from simmodel.cluster.roles import DecodeWorker, PrefillWorker
    cl = scenario.cluster
    prefill_workers: list[Worker] = []
    decode_workers: list[Worker] = []
    handoff = _handoff(cl, env, prefill_workers, decode_workers, streams)
    driver = Driver(env, workload, handoff, block_size=cl.prefill.engine.effective_block_size,
                    max_model_len=cl.decode.engine.max_model_len, concurrency=concurrency,
                    output_rng=streams["output_tokens"])
    handoff.notify_done = driver.on_done
    publisher = handoff.prefill_router if handoff.prefill_router.needs_kv_events else None
    formation = BatchFormation()            # shared by the cluster's workers
    pools = {"prefill": cl.prefill, "decode": cl.decode}
    timings = {role: make_timing(pool.engine) for role, pool in pools.items()}
    retract = handoff.on_decode_retract    # a preemption frees blocks like a completion
    new_scheduler = _pool_schedulers(pools, timings, record, publisher is not None, handoff)

    def make_worker(role: str, i: int) -> Worker:
        publish = publisher is not None and role == "prefill"   # only prefill workers do
        sched = new_scheduler(role, i)
        common = dict(record_events=record, coalesce=scenario.run.coalesce_decode,
                      formation=formation)
        if role == "prefill":
            w = PrefillWorker(env, i, sched, **common)
            w.subscribe(on_done=handoff.on_prefill_done,
                        on_kv_events=publisher.on_kv_events if publish else None)
        else:
            w = DecodeWorker(env, i, sched, **common, on_retract=retract,
                             inbound=partial(handoff.inbound_of, i))
            w.subscribe(on_done=handoff.on_decode_done)
        return w

    for role, workers in (("prefill", prefill_workers), ("decode", decode_workers)):
        for i in range(pools[role].workers):
            workers.append(make_worker(role, i))
    handoff.prefill_router.attach()
    handoff.decode_router.attach()
    for w in prefill_workers + decode_workers:
        _spawn(env, w)
    planner = None
    if scaling_policy is not None:
        def grow(role: str):
            return lambda i: _spawn(env, make_worker(role, i))
        planner = _start_planner(env, scaling_policy, {
            role: ScalablePool(role, workers, grow(role), _startup_ms(pools[role].engine),
                               changed)
            for role, workers, changed in (
                ("prefill", prefill_workers, handoff.prefill_topology_changed),
                ("decode", decode_workers, handoff.decode_topology_changed))}, driver)
        handoff.prefill_router.observe_traffic(planner.traffic)
    driver.start()
    cluster = Cluster(env, decode_workers, handoff, driver, workload, prefill_workers,
                      planner=planner, new_scheduler=new_scheduler)
    queues = {pool: (lambda pool=pool: handoff.queued()[pool]) for pool in ("prefill", "decode")}
    _start_telemetry(cluster, scenario, {"prefill": prefill_workers, "decode": decode_workers},
                     queues)
    return cluster


def _pool_schedulers(pools: dict, timings: dict, record: bool, publish: bool, handoff):
    """``new_scheduler(role, idx)`` of a disaggregated cluster: a pool's engine and timing
    model; KV events recorded if asked, or published by prefill workers to a KV router; a
    decode rank sees whether reservations wait for its blocks."""
    def new_scheduler(role: str, i: int):
        sched = make_scheduler(pools[role].engine, timings[role], worker=i, role=role,
                               record_events=record or (publish and role == "prefill"))
        if role == "decode":
            for rank, one in enumerate(getattr(sched, "ranks", (sched,))):
                one.reservations_waiting = partial(handoff.reservations_waiting, i, rank)
        return sched
    return new_scheduler


def run(scenario: Scenario, *, seed: int | None = None,
        workload: Workload | None = None, scaling_policy=None, progress=None,
        stop_when=None, stats_from_ms: float = 0.0) -> Result:
    """Simulate ``scenario`` (optionally with another seed, or on a ``workload`` built in
    Python instead of the scenario's own) and return its Result.

    ``progress``, if given, is called as ``progress(now_ms, done, total)`` about every
    0.2 s of wall time while the simulation runs (``done``: requests finished, rejected or
    cancelled so far; ``total``: requests in the workload), and once at the end.
    ``stop_when``, if given, is called as ``stop_when(request)`` with each request record
    as it completes or is rejected; once it returns true the run stops after that
    instant's event and ``Result.early_stopped`` is set (deterministic: it depends only
    on the simulation, never on wall time).  ``stats_from_ms``: requests arriving earlier are left
    out of the summary's statistics (see ``simmodel.finish``)."""
    if seed is not None:
        scenario = dataclasses.replace(scenario, seed=seed)
    t0 = time.perf_counter()
    aic = uses_aic(scenario)
    if aic:                         # aic timing: its checks and sizes (the library, lazily)
        from simmodel.engine import aic_scenario
        scenario, derived = aic_scenario.prepare(scenario)
    if scaling_policy is None:
        from simmodel.cluster.policies import make_policy
        scaling_policy = make_policy(scenario)      # the scenario's ``planner:``, if any
    try:
        cluster = build(scenario, Streams(scenario.seed), workload, scaling_policy)
    except ConfigError as e:                        # a size check of the workload
        raise UserError(f"{scenario.source or 'scenario'}: {e}") from None
    stopped = False
    guard = Watchdog(cluster.env, cluster)
    if progress is None and stop_when is None:
        run_until(cluster.env, scenario.run.max_sim_time_ms, guard)
    else:
        stopped = run_with_progress(cluster, scenario.run.max_sim_time_ms, progress,
                                    stop_when=stop_when, watchdog=guard)
    if cluster.faults is not None and not stopped and not cut_short(cluster.env, scenario):
        cluster.recovery.strand(cluster.driver.requests)
    wall_ms = (time.perf_counter() - t0) * 1000.0
    from simmodel.finish import result, snapshot     # the tables, after the run
    snap = snapshot(cluster)
    del cluster, guard              # the simulation's state is freed before tabulating;
    if len(snap.requests) >= GC_AFTER_REQUESTS:     # it is held in reference cycles
        gc.collect()
    out = result(scenario, snap, wall_ms, stats_from_ms, consume=True)
    out.early_stopped = stopped
    if aic:
        out.summary.update(derived, **aic_scenario.energy(scenario, out.passes))
    return out


#: Runs of this many requests collect the simulation's garbage before tabulating (about
#: 0.1 GB less at the peak of 200,000 requests); a collection takes time in proportion to
#: the objects alive, which a short run would feel.
GC_AFTER_REQUESTS = 50_000
