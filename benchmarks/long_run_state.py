"""A worker's state at a given instant of a simmodel run, for ``long_runs.py``.

``dump_state(scenario, t_ms, record)`` runs the scenario again (without coalesced decode
runs, whose results are identical, so every pass is formed on its own) up to just before
``t_ms`` and describes the worker(s) that served ``record`` (a request record of the first
run): the pass in flight (when it was formed, its planned end, every entry as tokens
computed before + granted), the KV blocks active / cached / free before and after it was
formed, the running set and the waiting queue now.  The hook is outside the engine: the
worker's scheduler gets a wrapped ``schedule`` that keeps the last formed pass.  Not part
of the test suite.
"""
from __future__ import annotations

import dataclasses
import math


def _kv(sched) -> str:
    kv = getattr(sched, "kv", None)
    if kv is None or not hasattr(kv, "active_blocks"):
        return "(no block pool view)"
    cached = getattr(kv, "inactive_blocks", "?")
    free = getattr(kv, "free", "?")
    return f"active {kv.active_blocks}, cached (inactive) {cached}, free {free}"


def _req(r, focus: int | None = None) -> str:
    mark = "*" if focus is not None and r.uid == focus else ""
    blocks = f" blk {len(r.cached)}+{r.n_private}" if hasattr(r, "n_private") else ""
    return (f"{mark}{r.session_id}/{r.turn_index}(p{r.prompt_len} g{r.generated}/"
            f"{r.max_output} c{r.computed}{blocks} adm{r.admissions} reuse{r.reused})")


def _lines(title: str, reqs, focus, limit: int = 64) -> list:
    reqs = list(reqs)
    out = [f"      {title} ({len(reqs)}):"]
    for i in range(0, min(len(reqs), limit), 4):
        out.append("        " + "  ".join(_req(r, focus) for r in reqs[i:i + 4]))
    if len(reqs) > limit:
        out.append(f"        ... {len(reqs) - limit} more")
    return out


def _hook(worker, t_ms: float, keep: dict) -> None:
    sched = worker.sched
    schedule = sched.schedule

    def wrapped(now):
        pre = _kv(sched)
        plan = schedule(now)
        if now < t_ms:
            keep[worker] = (now, pre, plan, _kv(sched))
        return plan

    sched.schedule = wrapped


def dump_state(scenario, t_ms: float, record: dict) -> str:
    """Text: the state, just before ``t_ms``, of the worker(s) that served ``record``."""
    from simmodel.rng import Streams
    from simmodel.sim import build

    sc = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run,
                                                               coalesce_decode=False))
    cl = build(sc, Streams(sc.seed))
    chosen = []
    d, p = record.get("decode_worker_idx"), record.get("prefill_worker_idx")
    for pool, idx in ((cl.prefill_workers, p), (cl.workers, d)):
        if idx is not None and not (isinstance(idx, float) and math.isnan(idx)) \
                and 0 <= int(idx) < len(pool):
            chosen.append(pool[int(idx)])
    keep: dict = {}
    for w in chosen:
        _hook(w, t_ms, keep)
    env = cl.env
    while env.peek() < t_ms:
        env.step()
    focus = record.get("uid")
    focus = None if focus is None else int(focus)
    out = [f"    our state just before {t_ms:.3f} ms (the request marked *):"]
    for w in chosen:
        s = w.sched
        out.append(f"    worker {w.pool}/{w.idx}: KV now {_kv(s)}; "
                   f"{len(s.running)} running, {len(s.waiting)} waiting")
        if w in keep:
            start, pre, plan, post = keep[w]
            flight = "in flight" if start + plan.duration_ms >= t_ms else "last formed"
            out.append(f"      pass {flight}: formed at {start:.3f}, ends "
                       f"{start + plan.duration_ms:.3f} ({plan.duration_ms:.3f} ms), "
                       f"preempted {plan.preempted}, admitted {plan.admitted}, rejected "
                       f"{len(plan.rejected)}")
            out.append(f"      KV when formed: before {pre}; after {post}")
            entries = [f"{'*' if r.uid == focus else ''}{r.session_id}/{r.turn_index}"
                       f"[{before}+{take}]" for r, before, take in plan.entries]
            for i in range(0, len(entries), 8):
                out.append("        " + " ".join(entries[i:i + 8]))
        out += _lines("running", s.running, focus)
        out += _lines("waiting (head first)", list(s.waiting)[:16], focus, 16)
    return "\n".join(out)
