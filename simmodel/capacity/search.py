"""``simmodel.search``: bracket, then bisect, one knob per grid point against a target.

The search assumes the verdict is monotone in the knob: for ``goal: min`` (the smallest
value that meets the target, e.g. workers) small values fail and large ones pass; for
``goal: max`` (the largest value that still meets it, e.g. ``arrival_speedup_ratio``)
small values pass and large ones fail.  :class:`Bisector` is the pure state machine:

1. probe ``low``; if its verdict is already the far side's (min: met; max: not met),
   the answer is ``low`` (min) or none (max);
2. bracket: grow geometrically from ``low`` (integers ``max(v+1, 2v)``, reals ``2v``;
   reals from a non-positive low in eighths of the range), capped at ``high``, until the
   verdict flips; no flip by ``high``: none (min) or ``high`` (max);
3. bisect the bracket: integers until the ends are adjacent, reals until its width is
   at most ``tolerance`` x the larger end; the answer is the end that meets the target.

All grid points advance together, one probe each per round, each probe's replications
in parallel.  With one replication a probe may stop early once its failure is certain
(``simmodel.capacity.runner.decided_fail``); with more, the target is judged on the
replications' means and runs are never stopped early.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pandas as pd

from simmodel.capacity import runner, stats
from simmodel.capacity.spec import Point, SearchSpec, Spec, probe_point
from simmodel.capacity.sweep import (Options, SweepResult, build_result, execute_all,
                                     make_task, start, write_sweep)


@dataclass
class Bisector:
    """Where one search stands: ``probes`` maps value -> met; ``next_value()`` is the
    next value to probe, or None when ``best`` is decided."""

    lo: float
    hi: float
    goal: str
    integer: bool
    tolerance: float
    probes: dict = field(default_factory=dict)
    order: list = field(default_factory=list)
    done: bool = False
    best: Optional[float] = None

    def record(self, value, met: bool) -> None:
        self.probes[value] = bool(met)
        self.order.append(value)

    def next_value(self):
        values = self.next_values(1)
        return values[0] if values else None

    def next_values(self, k: int = 1) -> list:
        """Up to ``k`` values to probe now (none when ``best`` is decided).  With k > 1:
        while bracketing, the next k steps of the geometric growth; while bisecting, k
        evenly spaced points inside the bracket.  Under a monotone verdict the answer is
        the same for every k; only the probes differ."""
        if self.done:
            return []
        lo_met = self.probes.get(self.lo)
        if lo_met is None:
            return self._chain(self.lo, k)
        far = self.goal == "min"                # the verdict beyond the boundary
        if lo_met == far:
            return self._finish(self.lo if far else None)
        a = max(v for v, m in self.probes.items() if m != far)
        flipped = [v for v, m in self.probes.items() if m == far]
        if not flipped:
            if a >= self.hi:
                return self._finish(None if far else self.hi)
            return self._chain(self._grow(a), k)
        b = min(flipped)
        if self._narrow(a, b):
            return self._finish(b if far else a)
        return self._inside(a, b, k)

    def _chain(self, v, k: int) -> list:
        out = [v]
        while len(out) < k and out[-1] < self.hi:
            out.append(self._grow(out[-1]))
        return out

    def _inside(self, a, b, k: int) -> list:
        if k == 1:
            return [self._mid(a, b)]
        points = [a + (b - a) * (i + 1) / (k + 1) for i in range(k)]
        if self.integer:
            points = sorted({int(round(p)) for p in points} - {a, b})
            return points or [self._mid(a, b)]
        return points

    def _finish(self, best) -> list:
        self.done, self.best = True, best
        return []

    def _grow(self, v):
        if self.integer:
            return int(min(self.hi, max(v + 1, 2 * v)))
        step = 2 * v if v > 0 else v + (self.hi - self.lo) / 8.0
        return float(min(self.hi, step))

    def _narrow(self, a, b) -> bool:
        if self.integer:
            return b - a <= 1
        return (b - a) <= self.tolerance * max(abs(a), abs(b))

    def _mid(self, a, b):
        return (a + b) // 2 if self.integer else (a + b) / 2.0


@dataclass
class SearchResult:
    """``results``: per grid point, the answer and every probe (search.json);
    ``answers``: one row per grid point; ``probes``: one row per probe; ``sweep``: the
    runs behind it (points and summary tables)."""

    results: list
    answers: pd.DataFrame
    probes: pd.DataFrame
    sweep: SweepResult


def search(spec_or_path: Any, executor: Any = None, *, out: Optional[str] = None,
           jobs: Optional[int] = None, dask: Optional[str] = None, keep_runs: bool = False,
           fail_fast: bool = False, on_run: Optional[Callable[[dict], None]] = None
           ) -> SearchResult:
    """Run a search file (path or loaded ``Spec``); arguments as ``simmodel.sweep``."""
    spec, opts = start("search", spec_or_path, executor, out=out, jobs=jobs, dask=dask,
                       keep_runs=keep_runs, fail_fast=fail_fast, on_run=on_run)
    backend, store = opts.backend, opts.store
    s = spec.search
    lines = [Bisector(s.lo, s.hi, s.goal, s.integer, s.tolerance) for _ in spec.points]
    probed: dict = {}                 # (line, value) -> Point
    tasks: list = []
    rows: dict = {}
    complete = False
    try:
        _advance_all(spec, lines, probed, tasks, rows, opts)
        complete = True
    finally:
        backend.close(abort=not complete)
        points = list(probed.values())
        sweep_res = build_result(spec, points, tasks, rows, lambda _p: s.target, complete,
                                 backend.name)
        result = _result(spec, lines, probed, sweep_res)
        write_sweep(sweep_res, store, kind="search")
        store.write_json("search.json", {"results": result.results, "complete": complete})
    return result


def _advance_all(spec: Spec, lines: list, probed: dict, tasks: list, rows: dict,
                 opts: Options) -> None:
    s = spec.search
    early = runner.stop_targets(s.target) if (s.early_stop and spec.replications == 1) else ()
    while True:
        batch = []
        for i, line in enumerate(lines):
            for value in line.next_values(s.parallel_probes):
                point = probe_point(spec.points[i], s, value, spec.path)
                point = Point(point=len(probed), label=point.label, overrides=point.overrides,
                              grid=point.grid, scenario=point.scenario)
                probed[(i, value)] = point
                new = [make_task(spec, point, r, opts, early) for r in range(spec.replications)]
                tasks.extend(new)
                batch.append((line, value, new))
        if not batch:
            return
        execute_all([t for _, _, new in batch for t in new], opts, rows)
        for line, value, new in batch:
            line.record(value, _verdict([rows[t.key] for t in new], s))


def _verdict(runs: list, s: SearchSpec) -> bool:
    """Met on the mean of the replications' values (an error or early stop: not met)."""
    if any(r["status"] != "ok" or any(r.get(k) is None for k in s.target) for r in runs):
        return False
    means = {k: sum(r[k] for r in runs) / len(runs) for k in s.target}
    return bool(stats.met(means, s.target))


def _result(spec: Spec, lines: list, probed: dict, sweep_res: SweepResult) -> SearchResult:
    s = spec.search
    summary = sweep_res.summary.set_index("point") if len(sweep_res.summary) else None
    judged = ("one run per probe" if spec.replications == 1
              else f"mean of {spec.replications} replications")
    results, probe_rows, answers = [], [], []
    for i, line in enumerate(lines):
        base = spec.points[i]
        probes = []
        for order, value in enumerate(line.order):
            pid = probed[(i, value)].point
            row = summary.loc[pid] if summary is not None and pid in summary.index else None
            metrics = _metrics(row, s)
            if row is not None and row["status"] == "early_stopped":
                metrics = _partial_metrics(sweep_res.points, pid, s, metrics)
            probes.append({"order": order, "value": value, "met": line.probes[value],
                           "status": None if row is None else row["status"],
                           "metrics": metrics})
            probe_rows.append({"label": base.label, **base.grid, "order": order,
                               "value": value, "met": line.probes[value],
                               "status": probes[-1]["status"], **metrics})
        best_metrics = next((p["metrics"] for p in probes if p["value"] == line.best), {})
        entry = {"label": base.label, "grid": base.grid, "vary": s.vary, "goal": s.goal,
                 "target": s.target, "best": line.best, "judged_on": judged,
                 "goodput_rps_per_gpu": best_metrics.get("goodput_rps_per_gpu"),
                 "gpus": best_metrics.get("gpus"), "complete": line.done,
                 "probes": probes}
        results.append(entry)
        answers.append({"label": base.label, **base.grid, "best": line.best,
                        "goodput_rps_per_gpu": entry["goodput_rps_per_gpu"],
                        "gpus": entry["gpus"], "probes": len(probes), "complete": line.done})
    return SearchResult(results=results, answers=pd.DataFrame(answers),
                        probes=pd.DataFrame(probe_rows), sweep=sweep_res)


def _metrics(row, s: SearchSpec) -> dict:
    keys = list(s.target) + ["goodput_rps_per_gpu", "goodput_completed_requests",
                             "gpu_hours", "completed_requests"]
    out: dict = {}
    if row is None:
        return out
    out["gpus"] = _plain(row.get("gpus"), count=True)
    for k in keys:
        out[k] = _plain(row.get(f"{k}_mean"), count=k.endswith("_requests"))
    return out


def _partial_metrics(points: pd.DataFrame, pid: int, s: SearchSpec, metrics: dict) -> dict:
    """An early-stopped probe's metrics: its runs' values when they stopped (the
    verdict is certain; the values are those of the requests completed by then)."""
    runs = points[points["point"] == pid]
    out = dict(metrics)
    for k in list(s.target) + ["completed_requests"]:
        if k in runs.columns:
            out[k] = _plain(pd.to_numeric(runs[k], errors="coerce").mean(),
                            count=k.endswith("_requests"))
    return out


def _plain(v, count: bool = False):
    """A table cell as plain JSON: NaN -> None, counts as int."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    if math.isnan(f):
        return None
    return int(f) if count and f.is_integer() else f
