"""``simmodel.sweep``: every point x replication of a sweep file, on any executor, cached.

The flow: ``load_spec`` validates every point; each (point, replication) becomes a
``Task`` with a cache key; finished keys are read from the output folder's cache, the
others are submitted to the backend and cached as they finish; the tables are built
from the rows and written atomically.  Ctrl-C cancels what has not started, shuts the
workers down, writes the tables of what finished (``sweep.json``: ``complete: false``)
and re-raises, so a re-run does only the rest.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pandas as pd

from simmodel.capacity import runner, stats
from simmodel.capacity.executors import Backend, open_backend
from simmodel.capacity.spec import Point, Spec, load_spec
from simmodel.capacity.store import Store, jsonable, run_key
from simmodel.errors import UserError


@dataclass
class SweepResult:
    """``points``: one row per run; ``summary``: one row per point; ``complete``: every
    run finished (not interrupted)."""

    spec: Spec
    points: pd.DataFrame
    summary: pd.DataFrame
    complete: bool = True
    executor: str = "serial"


@dataclass
class Options:
    """How to run: where (``backend``), what to keep, and what to report."""

    backend: Backend
    store: Store
    keep_runs: bool = False
    fail_fast: bool = False
    on_run: Optional[Callable[[dict], None]] = None   # called with each finished row


def sweep(spec_or_path: Any, executor: Any = None, *, out: Optional[str] = None,
          jobs: Optional[int] = None, dask: Optional[str] = None, keep_runs: bool = False,
          fail_fast: bool = False, on_run: Optional[Callable[[dict], None]] = None
          ) -> SweepResult:
    """Run a sweep file (path or loaded ``Spec``) and return its tables.

    ``executor``: a ``concurrent.futures.Executor`` or ``dask.distributed.Client``; else
    ``dask`` (``local``, ``local:N``, an address) or ``jobs`` local processes (default
    all cores).  ``out``: the output folder (cache + tables); None keeps nothing.
    ``on_run(row)`` is called as each run finishes (progress)."""
    spec, opts = start("sweep", spec_or_path, executor, out=out, jobs=jobs, dask=dask,
                       keep_runs=keep_runs, fail_fast=fail_fast, on_run=on_run)
    backend, store = opts.backend, opts.store

    def target(point: Point) -> dict:
        return stats.point_target(point.scenario, spec.sla_percentile)

    tasks = [make_task(spec, p, r, opts) for p in spec.points for r in range(spec.replications)]
    rows: dict = {}
    complete = False
    try:
        execute_all(tasks, opts, rows)
        complete = True
    finally:
        backend.close(abort=not complete)
        result = build_result(spec, spec.points, tasks, rows, target, complete, backend.name)
        write_sweep(result, store)
    return result


def start(kind: str, spec_or_path: Any, executor: Any, *, out: Optional[str],
          jobs: Optional[int], dask: Optional[str], keep_runs: bool, fail_fast: bool,
          on_run) -> tuple[Spec, Options]:
    """The loaded spec (every point validated) and the run options: the backend opened,
    then the output folder checked (the backend closed again if that fails)."""
    spec = spec_or_path if isinstance(spec_or_path, Spec) else load_spec(spec_or_path,
                                                                         kind=kind)
    backend = open_backend(executor, jobs=jobs, dask=dask)
    try:
        store = Store(out)
    except BaseException:
        backend.close()
        raise
    return spec, Options(backend, store, keep_runs, fail_fast, on_run)


def make_task(spec: Spec, point: Point, replication: int, opts: Options,
              early_stop: tuple = ()) -> runner.Task:
    seed = point.scenario.seed + replication
    key = run_key(point.scenario, seed, spec.warmup_ms, early_stop)
    keep = opts.store.keep_dir(f"p{point.point:04d}-r{replication}") if opts.keep_runs else None
    return runner.Task(key=key, point=point.point, replication=replication, seed=seed,
                       scenario=point.scenario, warmup_ms=spec.warmup_ms,
                       early_stop=early_stop, keep_dir=keep)


def execute_all(tasks: list, opts: Options, rows: dict) -> None:
    """Fill ``rows`` (task key -> row) for ``tasks``: from the cache, else by running.
    ``--fail-fast``: the first error cancels the rest and raises ``UserError``."""
    todo = []
    for task in tasks:
        if task.key in rows:
            continue
        cached = opts.store.get(task.key)
        if cached is not None and (task.keep_dir is None or _kept(task.keep_dir)):
            rows[task.key] = dict(cached, cached=True)
            _notify(opts, rows[task.key])
        else:
            todo.append(task)
    unique = {t.key: t for t in todo}
    handles = {opts.backend.submit(runner.execute, t): t for t in unique.values()}
    try:
        for handle in opts.backend.as_completed(handles):
            task = handles[handle]
            row = dict(normalized(handle.result()), cached=False)
            rows[task.key] = row
            opts.store.put(task.key, row)
            _notify(opts, row)
            if opts.fail_fast and row["status"] == "error":
                raise UserError(f"--fail-fast: point {task.point} (replication "
                                f"{task.replication}): {row['error']}")
    except BaseException:
        opts.backend.cancel(handles)
        raise


def normalized(row: dict) -> dict:
    """The row as the cache stores it (NaN as None, numpy scalars unwrapped), so a fresh
    row and a cached one build identical tables."""
    return jsonable(row)


def _kept(folder: str) -> bool:
    import os
    return os.path.isfile(os.path.join(folder, "summary.json"))


def _notify(opts: Options, row: dict) -> None:
    if opts.on_run is not None:
        opts.on_run(row)


def points_table(spec: Spec, points, tasks: list, rows: dict, target) -> pd.DataFrame:
    """One row per finished run, columns: point, label, the varied keys, gpus,
    replication, seed, the summary keys, sla_met, wall_s, status, error."""
    by_point = {p.point: p for p in points}
    varied = _varied(points)
    out = []
    for task in tasks:
        row = rows.get(task.key)
        if row is None:
            continue
        p = by_point[task.point]
        head = {"point": p.point, "label": p.label}
        head.update({k: p.overrides.get(k) for k in varied})
        head.update(gpus=runner.gpus(p.scenario), replication=task.replication,
                    seed=task.seed)
        body = {k: v for k, v in row.items()
                if k not in ("status", "error", "wall_s", "cached", "gpus")}
        bounds = target(p)
        verdict = stats.met(body, bounds) if row["status"] == "ok" else (
            False if bounds else None)
        out.append({**head, **body, "sla_met": verdict, "wall_s": row["wall_s"],
                    "status": row["status"], "error": row.get("error")})
    if not out:
        return pd.DataFrame(columns=["point", "label", *varied, "gpus", "replication",
                                     "seed", "sla_met", "wall_s", "status", "error"])
    return pd.DataFrame(out)


def _varied(points) -> list[str]:
    varied: list[str] = []
    for p in points:
        varied += [k for k in p.overrides if k not in varied]
    return varied


def build_result(spec: Spec, points, tasks: list, rows: dict, target,
                 complete: bool, executor: str) -> SweepResult:
    """The tables of the finished ``rows``; ``target(point)``: the bounds behind its
    ``sla_met`` (a sweep: the point's SLA; a search: the search target)."""
    table = points_table(spec, points, tasks, rows, target)
    keys = ["label", *_varied(points), "gpus"]
    expected: dict = {}
    for t in tasks:
        expected[t.point] = expected.get(t.point, 0) + 1
    targets = {p.point: target(p) for p in points}
    summary = (stats.summarize_points(table, keys, targets, expected) if len(table)
               else pd.DataFrame(columns=["point", *keys, "n", "status", "sla_met"]))
    return SweepResult(spec=spec, points=table, summary=summary, complete=complete,
                       executor=executor)


def resolved_spec(spec: Spec) -> dict:
    """What ``sweep.json`` records of the spec: the file as written plus what it
    resolved to (base path, SLA in force, every point's settings)."""
    return {**{k: v for k, v in spec.raw.items() if k != "base"},
            "base": spec.base, "path": spec.path, "sla": spec.sla,
            "sla_percentile": spec.sla_percentile, "replications": spec.replications,
            "warmup_ms": spec.warmup_ms,
            "points": [{"point": p.point, "label": p.label, "settings": p.overrides}
                       for p in spec.points] if spec.search is None else spec.raw.get("points"),
            "search": dataclasses.asdict(spec.search) if spec.search else None}


def write_sweep(result: SweepResult, store: Store, kind: str = "sweep") -> None:
    import simmodel

    store.write_table("points.parquet", result.points)
    store.write_table("summary.parquet", result.summary)
    store.write_json("sweep.json", {
        "name": result.spec.name, "kind": kind, "spec": resolved_spec(result.spec),
        "version": simmodel.__version__, "executor": result.executor,
        "complete": result.complete, "runs": int(len(result.points))})
