"""The dependency graph of an agentic trace (``simmodel.workload.agentic``): cycles and plays.

A node is any object with ``request_id``, ``deps`` (``[(request_id, trigger, delay_ms)]``,
every id known) and ``play_id``.  Both walks are iterative (no recursion limit on long
chains) and visit nodes in file order, so the cycle named and the play numbers do not
depend on anything but the file.  Cost: O(nodes + dependencies).
"""
from __future__ import annotations

from typing import Optional


def name_plays(nodes: list) -> None:
    """Name the connected components of the dependency graph ``play_<n>``, numbered in
    order of their first nodes (union-find with path halving)."""
    parent = {n.request_id: n.request_id for n in nodes}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in nodes:
        for rid, _, _ in n.deps:
            a, b = root(n.request_id), root(rid)
            if a != b:
                parent[b] = a
    names: dict[str, str] = {}
    for n in nodes:
        r = root(n.request_id)
        if r not in names:
            names[r] = f"play_{len(names)}"
        n.play_id = names[r]


def find_cycle(nodes: list, by_id: dict) -> Optional[list]:
    """One dependency cycle, or None: nodes each waiting for the next, the last for the
    first (iterative depth-first search from each node in file order)."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {n.request_id: WHITE for n in nodes}
    for start in nodes:
        if color[start.request_id] != WHITE:
            continue
        stack = [(start, iter(start.deps))]
        color[start.request_id] = GREY
        while stack:
            node, it = stack[-1]
            for rid, _, _ in it:
                c = color[rid]
                if c == GREY:
                    path = [n for n, _ in stack]
                    return path[next(i for i, n in enumerate(path) if n.request_id == rid):]
                if c == WHITE:
                    color[rid] = GREY
                    dep = by_id[rid]
                    stack.append((dep, iter(dep.deps)))
                    break
            else:
                color[node.request_id] = BLACK
                stack.pop()
    return None
