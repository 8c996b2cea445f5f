"""Weka agentic-session traces (callanjfox/kv-cache-tester) read into an agentic ``Workload``.

``path`` is one conversation file (``.json``: one object; ``.jsonl``: one object per
non-blank line) or a folder whose ``*.json`` / ``*.jsonl`` files are read in name order.
A conversation: ``{"id", "block_size", "hash_id_scope": "local", "models", "requests"}``;
an entry of ``requests`` is either a request
``{"t": s, "type": "n"|"s", "model", "in", "out", "hash_ids", "api_time": s, ...}`` or a
subagent marker ``{"type": "subagent", "t": s, "agent_id", "duration_ms", "requests"}``
whose own requests are a nested list (their ``t`` relative to the marker's ``t``).
``think_time``, ``ttft``, ``input_types`` ... are accepted and ignored (the reference
ignores ``think_time`` too; see below).

Tokens: ``hash_ids`` name the *full* ``block_size``-token blocks of the prompt and are local
to a conversation; they are re-numbered to workload-wide ids in order of first appearance.
Block i of a prompt is ``hash_ids[i]`` for i < floor(in / block_size) (extra ids are
ignored, missing ones get fresh ids) and the short tail block gets one fresh id, so only
full blocks are ever shared (as in the reference).

Every request becomes one agentic node (a one-turn ``Session``) whose ``Turn`` carries
``request_id`` (``<id>:outer:<i>`` or ``<id>:outer:<i>:inner:<j>``), ``play_id`` (the
conversation id), ``session_id`` (the stream it belongs to, e.g. ``<id>:root``,
``<id>:root:worker:0``, ``<id>:subagent:<i>:<agent_id>``) with ``turn_index`` its position
in that stream, ``arrival_ms`` (its *not_before*) and ``deps``.  The lowering reproduces the
reference (dynamo 1.6.1 / AISimulate ``weka`` loader), inferred from its per-request times:

* Times: a request occupies ``[T, E]`` of the recorded timeline: ``T = t`` (ms, shifted so
  that each conversation's earliest request is at 0), ``E = T + api_time``.  Subagent
  requests have ``T = marker.t + t`` (``relative``) or ``T = t`` (``absolute``); ``auto``
  picks ``absolute`` only when no subagent request has ``t`` below its marker's.
  ``not_before = T``.
* Streams, within one list (the parent's, or one subagent's), in list order.  Request k's
  *parent* is the earlier request sharing the longest hash-id prefix with it (at least one
  block); ties prefer, in turn, a parent whose whole hash list is that prefix, a stream
  head that ended by ``T_k`` (``E <= T_k``), any stream head, any ended request, the
  older stream, the earlier request.  k joins the parent's stream if the parent is the
  head of it and has ended; otherwise it starts a new stream ``worker:<n>``, as does a
  request without a parent.  Exception: when no request after request 0 shares a block
  with it, request 1 continues request 0 whatever its hashes (on completion, delay
  ``max(0, T_1 - E_0)``).
* Dependencies: on an ended parent, *completion* + ``T_k - E_parent`` (the recorded
  think/tool time; the ``think_time`` field is ignored); on a parent still running at
  ``T_k``, *dispatch* + ``T_k - T_parent``.  Besides, on the request that ended last
  strictly before ``T_k`` (``E < T_k``; if it is not the parent): *completion* + 0.
* Subagents: the spawn source is the last parent request listed before the marker.  The
  subagent's first request waits for the source's completion + ``max(0, T - E_src)``.
  The first later request *of the source's stream* with ``T >= marker.t + duration_ms``
  waits for the completion of the last request of each of the subagent's streams,
  + ``max(0, T - E_last)``; a subagent that ends after its stream's last request is never
  waited for.  Parent requests do not wait for subagent requests otherwise.
* ``arrival_speedup_ratio`` divides ``not_before`` and every delay.
* ``think_time_cap_ms`` (ours; the reference has none) caps every completion delay and
  shortens the recorded timeline to match: ``not_before`` becomes ``T'_k = min(T_k, max
  over deps (T'_j + api_j + min(max(0, T_k - E_j), cap)))`` (``T'_j + (T_k - T_j)`` for a
  dispatch dependency), so the capped idle time is really removed.

Checked against the reference (dynamo 1.6.1): the five shared files (three after adding
their subagents' model to ``models``) and 320 generated conversations (chains with side
requests, context resets and subagents) give the same dependency release time for every
request; tangled interleavings of parallel requests can still differ, since the reference
also looks ahead when it assigns streams.  With several conversations starting at the same
instant the reference orders them by an internal digest, we by file name.

Differences from the reference: it refuses requests whose model is missing from the
top-level ``models`` (so it cannot run the shared files with subagents) and folders that
mix block sizes, and it accepts ``out: 0``; we read any model and mixed block sizes (each
prompt keeps its file's ``block_size``) and refuse ``out: 0`` (every request here produces
at least one token).

Every mistake raises a one-line ``UserError("<file>: <where>: <what>")``, ``<where>`` being
a JSON path such as ``requests[4].requests[2].in``.  Cost: one ``json.load`` per file,
O(hash ids) work per request plus O(requests²) cheap comparisons per list.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from simmodel.errors import UserError
from simmodel.workload.model import Dependency, Prompt, Session, Turn, Workload
from simmodel.workload.mooncake import speedup_ratio

NESTED_BASES = ("auto", "relative", "absolute")
REQUEST_TYPES = ("n", "s")
SUFFIXES = (".json", ".jsonl")


class _Error(Exception):
    """A problem at ``where`` (JSON path) in the current conversation."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(slots=True)
class _Req:
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
    deps: list = field(default_factory=list)      # [(_Req, delay_ms, recorded_gap_ms)]
    nb: float = 0.0             # not_before on the (possibly capped) timeline


@dataclass(slots=True)
class _Sub:
    """One subagent marker during lowering."""

    where: str
    index: int                  # position in the parent list
    T: float
    end: float                  # marker t + duration_ms, ms
    agent: str
    raw: list                   # its request entries
    reqs: list = field(default_factory=list)
    source: Optional[_Req] = None


# --------------------------------------------------------------------------- checks


def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Error(where, f"must be a number, got {value!r}")
    if value < 0:
        raise _Error(where, f"must be >= 0, got {value!r}")
    return float(value)


def _int(where: str, value: Any, minimum: int) -> int:
    if type(value) is not int:
        raise _Error(where, f"must be an integer, got {value!r}")
    if value < minimum:
        raise _Error(where, f"must be >= {minimum}, got {value}")
    return value


def _string(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Error(where, f"must be a non-empty string, got {value!r}")
    return value


def _hash_list(where: str, value: Any) -> list:
    if not isinstance(value, list):
        raise _Error(where, f"must be a list of integers, got {type(value).__name__}")
    if value and not (set(map(type, value)) <= {int} and min(value) >= 0):
        for i, item in enumerate(value):
            if type(item) is not int or item < 0:
                raise _Error(f"{where}[{i}]", f"must be an integer >= 0, got {item!r}")
    return value


def _get(entry: dict, where: str, key: str):
    if key not in entry or entry[key] is None:
        raise _Error(where, f"missing required field {key}")
    return entry[key]


# --------------------------------------------------------------------------- reading


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            raise UserError(f"{path}: cannot read folder ({e.strerror or e})") from None
        files = [os.path.join(path, n) for n in names
                 if n.endswith(SUFFIXES) and os.path.isfile(os.path.join(path, n))]
        if not files:
            raise UserError(f"{path}: folder holds no .json or .jsonl file")
        return files
    if not os.path.exists(path):
        raise UserError(f"{path}: file not found")
    return [path]


def _conversations(path: str) -> list[tuple[str, Any]]:
    """``(location, parsed object)`` of every conversation in one file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid UTF-8") from None
    if path.endswith(".jsonl"):
        out = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{lineno}: malformed JSON ({e.msg} at column "
                                    f"{e.colno})") from None
        if not out:
            raise UserError(f"{path}: empty trace (no conversation)")
        return out
    try:
        return [(path, json.loads(text))]
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: malformed JSON ({e.msg} at column "
                        f"{e.colno})") from None


def _request(entry: dict, where: str, rid: str, block_size: int) -> _Req:
    t = _number(f"{where}.t", _get(entry, where, "t"))
    length = _int(f"{where}.in", _get(entry, where, "in"), 1)
    out = _int(f"{where}.out", _get(entry, where, "out"), 1)
    hashes = _hash_list(f"{where}.hash_ids", _get(entry, where, "hash_ids"))
    api = _number(f"{where}.api_time", _get(entry, where, "api_time")) * 1000.0
    T = t * 1000.0
    return _Req(where, rid, T, T + api, api, hashes[:length // block_size], length, out)


def _lower(reqs: list[_Req], prefix: str) -> None:
    """Assign streams and dependencies within one list of requests (see module doc)."""
    if not reqs:
        return
    heads: dict[str, _Req] = {}
    sizes: dict[str, int] = {}
    order: dict[str, int] = {}          # stream -> creation rank (root first)
    workers = 0
    first = reqs[0]
    lone_first = first.hashes == [] or not any(
        r.hashes and r.hashes[0] == first.hashes[0] for r in reqs[1:])

    def join(r: _Req, stream: str) -> None:
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
            best = None
            h = r.hashes
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


def _common(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _conversation(obj: Any, loc: str, basis: str, seen_ids: dict) -> tuple[str, int, list]:
    """Validate and lower one conversation: ``(id, block_size, requests in order)``."""
    if not isinstance(obj, dict):
        raise UserError(f"{loc}: expected a JSON object (one conversation), "
                        f"got {type(obj).__name__}")
    try:
        cid = _string("id", _get(obj, "", "id"))
        block_size = _int("block_size", _get(obj, "", "block_size"), 1)
        scope = obj.get("hash_id_scope", "local")
        if scope != "local":
            raise _Error("hash_id_scope", f"must be 'local', got {scope!r}")
        entries = _get(obj, "", "requests")
        if not isinstance(entries, list):
            raise _Error("requests", f"must be a list, got {type(entries).__name__}")

        parents: list[_Req] = []
        subs: list[_Sub] = []
        order: list = []                # parent requests and subagents, in list order
        for i, entry in enumerate(entries):
            where = f"requests[{i}]"
            if not isinstance(entry, dict):
                raise _Error(where, f"expected an object, got {type(entry).__name__}")
            kind = entry.get("type")
            if kind == "subagent":
                if not parents:
                    raise _Error(where, "subagent marker without a preceding parent request")
                t = _number(f"{where}.t", _get(entry, where, "t"))
                agent = _string(f"{where}.agent_id", _get(entry, where, "agent_id"))
                duration = _number(f"{where}.duration_ms", _get(entry, where, "duration_ms"))
                status = entry.get("status", "completed")
                if status != "completed":
                    raise _Error(f"{where}.status",
                                 f"only completed subagents can be replayed, got {status!r}")
                inner = _get(entry, where, "requests")
                if not isinstance(inner, list) or not inner:
                    raise _Error(f"{where}.requests",
                                 "must be a non-empty list (a subagent without requests "
                                 "cannot be replayed)")
                sub = _Sub(where, i, t * 1000.0, t * 1000.0 + duration, agent, inner,
                           source=parents[-1])
                subs.append(sub)
                order.append(sub)
            elif kind in REQUEST_TYPES:
                r = _request(entry, where, f"{cid}:outer:{i}", block_size)
                parents.append(r)
                order.append(r)
            else:
                raise _Error(f"{where}.type",
                             f"must be 'n', 's' or 'subagent', got {kind!r}")
        if not parents:
            raise _Error("requests", "no requests")

        # Subagent requests: validate, then pick the timestamp basis.
        for sub in subs:
            for j, entry in enumerate(sub.raw):
                where = f"{sub.where}.requests[{j}]"
                if not isinstance(entry, dict):
                    raise _Error(where, f"expected an object, got {type(entry).__name__}")
                kind = entry.get("type")
                if kind not in REQUEST_TYPES:
                    raise _Error(f"{where}.type", f"must be 'n' or 's' inside a subagent "
                                                  f"(no nested subagents), got {kind!r}")
                sub.reqs.append(_request(entry, where, f"{cid}:outer:{sub.index}:inner:{j}",
                                         block_size))
        use = basis
        if basis == "auto":
            use = "absolute" if all(r.T >= s.T for s in subs for r in s.reqs) else "relative"
        for sub in subs:
            for r in sub.reqs:
                if use == "relative":
                    r.T += sub.T
                    r.E += sub.T
                elif r.T < sub.T:
                    raise _Error(f"{r.where}.t", f"{r.T / 1000:g} s is before its subagent's "
                                                 f"t {sub.T / 1000:g} s (absolute timestamps)")
    except _Error as e:
        raise UserError(f"{loc}: {e}") from None

    # Each conversation starts at 0 (the reference shifts its earliest request to 0).
    t0 = min(r.T for r in parents + [r for s in subs for r in s.reqs])
    if t0:
        for r in parents + [r for s in subs for r in s.reqs]:
            r.T -= t0
            r.E -= t0
        for s in subs:
            s.T -= t0
            s.end -= t0

    if cid in seen_ids:
        raise UserError(f"{loc}: conversation id {cid!r} already used by {seen_ids[cid]}")
    seen_ids[cid] = loc

    # Streams and dependencies.
    _lower(parents, f"{cid}:root")
    for sub in subs:
        _lower(sub.reqs, f"{cid}:subagent:{sub.index}:{sub.agent}")
        head = sub.reqs[0]
        src = sub.source
        head.deps.insert(0, (src, "completion", max(0.0, head.T - src.E), head.T - src.E))
        stream = src.stream
        ends = list({r.stream: r for r in sub.reqs}.values())   # each stream's last request
        after = False
        for item in order:
            if item is sub:
                after = True
            elif after and isinstance(item, _Req) and item.stream == stream \
                    and item.T >= sub.end:
                item.deps.extend((last, "completion", max(0.0, item.T - last.E),
                                  item.T - last.E) for last in ends)
                break

    out = []
    for item in order:
        if isinstance(item, _Req):
            out.append(item)
        else:
            out.extend(item.reqs)
    return cid, block_size, out


def read_weka(path: str, *, arrival_speedup_ratio: float = 1.0,
              think_time_cap_ms: Optional[float] = None,
              nested_timestamp_basis: str = "auto") -> Workload:
    """Read a Weka conversation file or folder into an agentic ``Workload`` (module doc).

    ``arrival_speedup_ratio`` divides not_before times and delays; ``think_time_cap_ms``
    caps every delay (and the recorded idle time behind not_before);
    ``nested_timestamp_basis`` (``auto``/``relative``/``absolute``) says how subagent
    request times are read, like the reference's ``weka_nested_timestamp_basis``.
    Raises ``UserError`` naming the file and JSON path of any problem.
    """
    ratio = speedup_ratio(arrival_speedup_ratio)
    cap = think_time_cap_ms
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                            or not cap >= 0):
        raise ValueError(f"think_time_cap_ms must be a number >= 0 or None, got {cap!r}")
    if nested_timestamp_basis not in NESTED_BASES:
        raise ValueError(f"nested_timestamp_basis must be one of {', '.join(NESTED_BASES)}, "
                         f"got {nested_timestamp_basis!r}")
    ratio = float(ratio)
    path = os.fspath(path)

    sessions = []
    next_id = 0
    block_sizes = set()
    seen: dict[str, str] = {}
    conversations = 0
    for file in _files(path):
        for loc, obj in _conversations(file):
            cid, block_size, reqs = _conversation(obj, loc, nested_timestamp_basis, seen)
            conversations += 1
            block_sizes.add(block_size)
            canonical: dict[int, int] = {}          # local hash id -> workload-wide id
            if cap is not None:
                _shorten(reqs, float(cap))
            for r in reqs:
                ids = []
                for h in r.hashes:
                    c = canonical.get(h)
                    if c is None:
                        c = canonical[h] = next_id
                        next_id += 1
                    ids.append(c)
                extra = -(-r.length // block_size) - len(ids)
                if extra > 0:                       # missing full blocks and the tail
                    ids.extend(range(next_id, next_id + extra))
                    next_id += extra
                nb = (r.nb if cap is not None else r.T) / ratio
                deps = tuple(Dependency(j.rid, trigger,
                                        (min(d, cap) if cap is not None and gap is not None
                                         else d) / ratio)
                             for j, trigger, d, gap in r.deps)
                turn = Turn(r.stream, r.pos, Prompt(tuple(ids), block_size, r.length), r.out,
                            arrival_ms=nb, request_id=r.rid, play_id=cid, deps=deps)
                sessions.append(Session(r.rid, (turn,)))

    return Workload(
        sessions=tuple(sessions),
        source=path,
        kind="agentic",
        meta={"format": "weka", "arrival_speedup_ratio": arrival_speedup_ratio,
              "think_time_cap_ms": think_time_cap_ms,
              "nested_timestamp_basis": nested_timestamp_basis,
              "block_size": sorted(block_sizes), "conversations": conversations,
              "unique_hash_ids": next_id},
    )


def _shorten(reqs: list[_Req], cap: float) -> None:
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
