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
import os
from typing import TYPE_CHECKING, Any, Optional

from simmodel.errors import UserError
from simmodel.workload.model import Dependency, Prompt, Session, Turn, Workload
from simmodel.workload.rows import (PATH_SEP, RowError, int_list, integer, non_empty_string,
                                    number, required, speedup_ratio)
from simmodel.workload.weka_streams import (Subagent, WekaRequest, cap_think_times,
                                            lower_conversation)

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig

NESTED_BASES = ("auto", "relative", "absolute")
REQUEST_TYPES = ("n", "s")
SUFFIXES = (".json", ".jsonl")


def from_config(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
    """Format ``weka``: ``cfg.trace`` (a file or folder) read with
    ``cfg.arrival_speedup_ratio`` and ``cfg.think_time_cap_ms``; prompts keep each
    file's own ``block_size`` (``engine_block_size`` unused)."""
    return read_weka(cfg.trace, arrival_speedup_ratio=cfg.arrival_speedup_ratio,
                     think_time_cap_ms=cfg.think_time_cap_ms)


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
    path = os.fspath(path)

    sessions: list[Session] = []
    next_id = 0
    block_sizes = set()
    seen: dict[str, str] = {}
    conversations = 0
    for file in _files(path):
        for loc, obj in _conversations(file):
            cid, block_size, reqs = _conversation(obj, loc, nested_timestamp_basis, seen)
            conversations += 1
            block_sizes.add(block_size)
            if cap is not None:
                cap_think_times(reqs, float(cap))
            next_id = _add_turns(sessions, reqs, cid, block_size, next_id, ratio, cap)
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


def _add_turns(sessions: list[Session], reqs: list[WekaRequest], cid: str, block_size: int,
               next_id: int, ratio: float, cap: Optional[float]) -> int:
    """Append one one-turn session per lowered request of conversation ``cid``; its hash
    ids become workload-wide ids from ``next_id`` on (missing full blocks and the tail get
    fresh ones).  Returns the next unused id."""
    canonical: dict[int, int] = {}          # local hash id -> workload-wide id
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
    return next_id


# --------------------------------------------------------------------------- files


def _files(path: str) -> list[str]:
    """The conversation files of ``path``: itself, or a folder's ``*.json``/``*.jsonl``
    files in name order."""
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


# --------------------------------------------------------------------------- checks
# Messages name values by JSON path (``requests[4].in: must be ...``): sep=PATH_SEP.


def _conversation(obj: Any, loc: str, basis: str, seen_ids: dict) -> tuple[str, int, list]:
    """Validate and lower one conversation: ``(id, block_size, requests in order)``."""
    if not isinstance(obj, dict):
        raise UserError(f"{loc}: expected a JSON object (one conversation), "
                        f"got {type(obj).__name__}")
    try:
        cid = non_empty_string("id", required(obj, "id"), sep=PATH_SEP, blank_is_empty=True)
        block_size = integer("block_size", required(obj, "block_size"), 1, sep=PATH_SEP)
        scope = obj.get("hash_id_scope", "local")
        if scope != "local":
            raise RowError(f"hash_id_scope: must be 'local', got {scope!r}")
        entries = required(obj, "requests")
        if not isinstance(entries, list):
            raise RowError(f"requests: must be a list, got {type(entries).__name__}")
        parents, subs, order = _entries(entries, cid, block_size)
        for sub in subs:
            _subagent_requests(sub, cid, block_size)
        _apply_basis(subs, basis)
    except RowError as e:
        raise UserError(f"{loc}: {e}") from None
    if cid in seen_ids:
        raise UserError(f"{loc}: conversation id {cid!r} already used by {seen_ids[cid]}")
    seen_ids[cid] = loc
    return cid, block_size, lower_conversation(cid, parents, subs, order)


def _entries(entries: list, cid: str, block_size: int) -> tuple[list, list, list]:
    """``(parent requests, subagents, both in list order)`` of a conversation's
    ``requests`` (a subagent's own requests are read by ``_subagent_requests``)."""
    parents: list[WekaRequest] = []
    subs: list[Subagent] = []
    order: list = []
    for i, entry in enumerate(entries):
        where = f"requests[{i}]"
        if not isinstance(entry, dict):
            raise RowError(f"{where}: expected an object, got {type(entry).__name__}")
        kind = entry.get("type")
        if kind == "subagent":
            if not parents:
                raise RowError(f"{where}: subagent marker without a preceding parent request")
            sub = _subagent(entry, where, i, parents[-1])
            subs.append(sub)
            order.append(sub)
        elif kind in REQUEST_TYPES:
            r = _request(entry, where, f"{cid}:outer:{i}", block_size)
            parents.append(r)
            order.append(r)
        else:
            raise RowError(f"{where}.type: must be 'n', 's' or 'subagent', got {kind!r}")
    if not parents:
        raise RowError("requests: no requests")
    return parents, subs, order


def _subagent(entry: dict, where: str, index: int, source: WekaRequest) -> Subagent:
    """A subagent marker (its requests still raw), spawned by ``source``."""
    t = float(number(f"{where}.t", required(entry, "t", where), sep=PATH_SEP))
    agent = non_empty_string(f"{where}.agent_id", required(entry, "agent_id", where),
                             sep=PATH_SEP, blank_is_empty=True)
    duration = float(number(f"{where}.duration_ms", required(entry, "duration_ms", where),
                            sep=PATH_SEP))
    status = entry.get("status", "completed")
    if status != "completed":
        raise RowError(f"{where}.status: only completed subagents can be replayed, "
                       f"got {status!r}")
    inner = required(entry, "requests", where)
    if not isinstance(inner, list) or not inner:
        raise RowError(f"{where}.requests: must be a non-empty list (a subagent without "
                       f"requests cannot be replayed)")
    return Subagent(where, index, t * 1000.0, t * 1000.0 + duration, agent, inner,
                    source=source)


def _subagent_requests(sub: Subagent, cid: str, block_size: int) -> None:
    """Validate a subagent's own requests into ``sub.reqs`` (times still as recorded)."""
    for j, entry in enumerate(sub.raw):
        where = f"{sub.where}.requests[{j}]"
        if not isinstance(entry, dict):
            raise RowError(f"{where}: expected an object, got {type(entry).__name__}")
        kind = entry.get("type")
        if kind not in REQUEST_TYPES:
            raise RowError(f"{where}.type: must be 'n' or 's' inside a subagent "
                           f"(no nested subagents), got {kind!r}")
        sub.reqs.append(_request(entry, where, f"{cid}:outer:{sub.index}:inner:{j}",
                                 block_size))


def _apply_basis(subs: list[Subagent], basis: str) -> None:
    """Put subagent request times on the conversation's timeline: ``relative`` adds the
    marker's ``t``; ``absolute`` keeps them (none may be before its marker); ``auto``
    picks ``absolute`` only when no request is before its marker."""
    use = basis
    if basis == "auto":
        use = "absolute" if all(r.T >= s.T for s in subs for r in s.reqs) else "relative"
    for sub in subs:
        for r in sub.reqs:
            if use == "relative":
                r.T += sub.T
                r.E += sub.T
            elif r.T < sub.T:
                raise RowError(f"{r.where}.t: {r.T / 1000:g} s is before its subagent's "
                               f"t {sub.T / 1000:g} s (absolute timestamps)")


def _request(entry: dict, where: str, rid: str, block_size: int) -> WekaRequest:
    """A request entry (times in ms; hashes truncated to its full blocks)."""
    t = float(number(f"{where}.t", required(entry, "t", where), sep=PATH_SEP))
    length = integer(f"{where}.in", required(entry, "in", where), 1, sep=PATH_SEP)
    out = integer(f"{where}.out", required(entry, "out", where), 1, sep=PATH_SEP)
    hashes = int_list(f"{where}.hash_ids", required(entry, "hash_ids", where), sep=PATH_SEP,
                      item_problem="must be an integer >= 0")
    api = float(number(f"{where}.api_time", required(entry, "api_time", where),
                       sep=PATH_SEP)) * 1000.0
    T = t * 1000.0
    return WekaRequest(where, rid, T, T + api, api, hashes[:length // block_size], length, out)
