"""Weka lowering: a conversation's requests put into streams, with their dependencies.

The rules (reference dynamo 1.6.1 / AISimulate ``weka`` loader) are stated in
``simmodel.workload.weka``, which validates a conversation into ``WekaRequest`` and
``Subagent`` records and calls ``lower_conversation``; ``cap_think_times`` applies
``think_time_cap_ms`` to the lowered requests.  Cost: O(requests²) cheap comparisons
per list (each request looks for its parent among the earlier ones).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass(slots=True)
class WekaRequest:
    """One request during lowering."""

    where: str
    rid: str
    T: float                    # recorded start, ms
    E: float                    # recorded end, ms
    api: float                  # api_time, ms
    hashes: list                # local hash ids of its full blocks (truncated)
    length: int
    out: int
    stream: str = ""
    pos: int = 0
    # [(WekaRequest, trigger, delay_ms, recorded_gap_ms or None for dispatch)]
    deps: list = field(default_factory=list)
    nb: float = 0.0             # not_before on the (possibly capped) timeline


@dataclass(slots=True)
class Subagent:
    """One subagent marker during lowering."""

    where: str
    index: int                  # position in the parent list
    T: float
    end: float                  # marker t + duration_ms, ms
    agent: str
    raw: list                   # its request entries
    reqs: list = field(default_factory=list)
    source: Optional[WekaRequest] = None


def lower_conversation(cid: str, parents: list[WekaRequest], subs: list[Subagent],
                       order: list[Union[WekaRequest, Subagent]]) -> list[WekaRequest]:
    """Shift the conversation to start at 0, assign streams and dependencies, and return
    every request in list order (a subagent's requests where its marker stands)."""
    _shift_to_zero(parents, subs)
    assign_streams(parents, f"{cid}:root")
    for sub in subs:
        assign_streams(sub.reqs, f"{cid}:subagent:{sub.index}:{sub.agent}")
        _link_subagent(sub, order)
    out = []
    for item in order:
        if isinstance(item, WekaRequest):
            out.append(item)
        else:
            out.extend(item.reqs)
    return out


def _shift_to_zero(parents: list[WekaRequest], subs: list[Subagent]) -> None:
    """Each conversation starts at 0 (the reference shifts its earliest request to 0)."""
    t0 = min(r.T for r in parents + [r for s in subs for r in s.reqs])
    if t0:
        for r in parents + [r for s in subs for r in s.reqs]:
            r.T -= t0
            r.E -= t0
        for s in subs:
            s.T -= t0
            s.end -= t0


def _link_subagent(sub: Subagent, order: list[Union[WekaRequest, Subagent]]) -> None:
    """The subagent's first request waits for its source; the first later request of the
    source's stream starting after the subagent ended waits for each of its streams."""
    head = sub.reqs[0]
    src = sub.source
    head.deps.insert(0, (src, "completion", max(0.0, head.T - src.E), head.T - src.E))
    stream = src.stream
    ends = list({r.stream: r for r in sub.reqs}.values())   # each stream's last request
    after = False
    for item in order:
        if item is sub:
            after = True
        elif after and isinstance(item, WekaRequest) and item.stream == stream \
                and item.T >= sub.end:
            item.deps.extend((last, "completion", max(0.0, item.T - last.E),
                              item.T - last.E) for last in ends)
            break


def assign_streams(reqs: list[WekaRequest], prefix: str) -> None:
    """Assign streams and dependencies within one list of requests (see the Weka module
    doc)."""
    if not reqs:
        return
    heads: dict[str, WekaRequest] = {}
    sizes: dict[str, int] = {}
    order: dict[str, int] = {}          # stream -> creation rank (root first)
    workers = 0
    first = reqs[0]
    lone_first = first.hashes == [] or not any(
        r.hashes and r.hashes[0] == first.hashes[0] for r in reqs[1:])

    def join(r: WekaRequest, stream: str) -> None:
        r.stream, r.pos = stream, sizes.get(stream, 0)
        sizes[stream] = r.pos + 1
        heads[stream] = r
        order.setdefault(stream, len(order))

    join(first, prefix)
    for k in range(1, len(reqs)):
        r = reqs[k]
        T = r.T
        parent = None
        if k == 1 and lone_first:
            parent = first
        elif r.hashes:
            parent = _parent(reqs, k, heads, order)
        finished = [j for j in reqs[:k] if j.E < T]     # ended strictly before it started
        if parent is not None and heads[parent.stream] is parent and (
                parent.E <= T or (k == 1 and lone_first)):
            join(r, parent.stream)
        else:
            join(r, f"{prefix}:worker:{workers}")
            workers += 1
        if parent is not None:
            if parent.E <= T or (k == 1 and lone_first):
                r.deps.append((parent, "completion", max(0.0, T - parent.E), T - parent.E))
            else:           # it started while its parent was still running
                r.deps.append((parent, "dispatch", max(0.0, T - parent.T), None))
        if finished:
            latest = max(reversed(finished), key=lambda j: j.E)   # ties: the later one
            if latest is not parent:
                r.deps.append((latest, "completion", 0.0, T - latest.E))


def _parent(reqs: list[WekaRequest], k: int, heads: dict[str, WekaRequest],
            order: dict[str, int]) -> Optional[WekaRequest]:
    """The earlier request sharing the longest hash-id prefix with request ``k``, ties
    broken as the Weka module doc says; None when none shares its first block."""
    r = reqs[k]
    T = r.T
    h = r.hashes
    best = parent = None
    for idx, j in enumerate(reqs[:k]):
        hj = j.hashes
        if not hj or hj[0] != h[0]:
            continue
        n = len(hj) if h[:len(hj)] == hj else _common(hj, h)
        done = j.E <= T
        head = heads[j.stream] is j
        key = (n, n == len(hj), head and done, head, done, -order[j.stream], -idx)
        if best is None or key > best:
            best, parent = key, j
    return parent


def _common(a: list, b: list) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def cap_think_times(reqs: list[WekaRequest], cap: float) -> None:
    """``nb`` of every request on the recorded timeline with each idle gap capped."""
    shift: dict[str, float] = {}        # per list: how much earlier its last request moved
    for r in reqs:                      # dependencies always point to earlier requests
        scope = r.rid.rsplit(":", 1)[0]
        if r.deps:
            nb = max(j.nb + j.api + min(max(0.0, gap), cap) if gap is not None
                     else j.nb + d for j, _, d, gap in r.deps)
            r.nb = min(r.T, nb)
        else:
            # Nothing finished before it (a list's first request, or one overlapping the
            # requests before it): no idle time of its own to remove.
            r.nb = r.T - shift.get(scope, 0.0)
        shift[scope] = r.T - r.nb
