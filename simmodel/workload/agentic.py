"""Agentic Mooncake JSONL traces (reference §7.3) read into an agentic ``Workload``.

A trace is a DAG of requests (*nodes*).  Two forms are read; blank lines are ignored.

**v2** (``trace_format='agentic_mooncake'`` in the reference): line 1 is the header
``{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": B,
"hash_id_scope": "local", "source": {"format": ..., "digest": ...}}`` (``B`` tokens per
hash id; it overrides ``trace_block_size``), then one row per node:

* ``request_id``, ``play_id``, ``session_id``, ``model``: non-empty strings (``model`` is
  only recorded in ``meta["models"]``);
* ``input_length`` (``input_tokens``): required, >= 1; ``hash_ids``: exactly
  ceil(input_length / B) non-negative ints (the reference refuses more as well as fewer);
* ``output_length`` (``output_tokens``): required, >= 1; optional ``output_token_ids`` of
  exactly that length;
* ``not_before_ms``: required, >= 0: the node is never released before it;
* ``dependencies`` (optional, default none): ``{"request_id", "trigger", "delay_ms",
  "relation"}``, all required; ``trigger`` ``completion`` (the predecessor ended) or
  ``dispatch`` (it was dispatched), ``relation`` one of ``spawn``, ``sequence``, ``join``,
  ``replay_barrier``; only ``spawn`` may use ``dispatch``.  A dependency must stay inside
  its play.  Other fields are accepted and ignored.

**legacy** flat rows (no header; the reference 1.6.1 itself refuses them): ``request_id``
(string or int), optional ``session_id`` (string or int), ``input_length``
(``input_tokens``, default and maximum ``len(hash_ids) * trace_block_size``),
``output_length`` (``output_tokens``), optional ``output_token_ids``, ``hash_ids``,
``timestamp`` (``created_time``; required on rows without ``wait_for``, ignored on the
others), ``delay`` | ``delay_ms``, ``tool_wait_ms``, ``wait_for`` (list of request ids),
``prefix_reset`` (bool, accepted and ignored: prefix sharing is what the hash ids say).
Every id in ``wait_for`` is a *completion* dependency with delay ``delay + tool_wait_ms``
(on a row without ``wait_for`` both are ignored).  Plays are the connected components of
the dependency graph, named ``play_0``, ``play_1``, ... in order of their first rows.

Nodes: each becomes a one-turn ``Session`` named by its ``request_id``, whose ``Turn``
carries ``session_id`` (the row's, or ``request_<line>`` for a legacy row without one),
``turn_index`` (the node's index among the rows with that session id, in file order, so
``(session_id, turn_index)`` is unique), ``request_id``, ``play_id``, ``deps`` and
``arrival_ms``, its *not_before*: the driver releases a node at
``max(not_before, each dependency's event time + delay)``.

Times (checked against the reference): ``not_before`` is shifted so that the earliest
``not_before_ms`` of *all* rows (roots and dependents alike) is 0, then divided by
``arrival_speedup_ratio``; dependency delays are divided by it too.  A v2 dependent's
``not_before_ms`` still counts (a node whose dependencies end early waits for it).  For
legacy rows only rows without ``wait_for`` have a start time (their ``timestamp``; the
earliest becomes 0); dependent rows get ``arrival_ms = 0`` (no constraint).

Tokens: hash ids are re-numbered 0, 1, 2, ... in order of first appearance over the whole
file (the reference shares blocks across plays too) and a prompt is canonical id ``i``
repeated ``block_size`` times per hash id, truncated to ``input_length``.

Every mistake raises a one-line ``UserError("<path>:<line>: <what>")``: bad fields,
duplicate request ids, unknown or self dependencies, dependencies across plays, bad
triggers or relations, and dependency cycles (one cycle is named).
"""
from __future__ import annotations

import json
from typing import Any, Optional

from simmodel.errors import UserError
from simmodel.workload.model import Dependency, Prompt, Session, Turn, Workload
from simmodel.workload.mooncake import (_RowError, open_trace, _check_int_list, _field, _is_int,
                                       _output_fields, speedup_ratio,
                                        _number)

SCHEMA = "dynamo.agentic_mooncake"
VERSION = 2
TRIGGERS = ("completion", "dispatch")
RELATIONS = ("spawn", "sequence", "join", "replay_barrier")
DISPATCH_RELATIONS = ("spawn",)          # the only relation the reference lets use dispatch
V2_ROW_FIELDS = ("play_id", "not_before_ms", "dependencies")


class _Node:
    """One row, validated (deps still name request ids that may not exist)."""

    __slots__ = ("line", "request_id", "play_id", "session_id", "hashes", "input_length",
                 "output_length", "output_token_ids", "not_before", "deps")

    def __init__(self, line, request_id, play_id, session_id, hashes, input_length,
                 output_length, output_token_ids, not_before, deps):
        self.line = line
        self.request_id: str = request_id
        self.play_id: Optional[str] = play_id
        self.session_id: str = session_id
        self.hashes: list = hashes
        self.input_length: int = input_length
        self.output_length: int = output_length
        self.output_token_ids = output_token_ids
        self.not_before: Optional[float] = not_before
        self.deps: list = deps                  # [(request_id, trigger, delay_ms)]


def read_agentic(path: str, *, trace_block_size: int = 512,
                 arrival_speedup_ratio: float = 1.0) -> Workload:
    """Read an agentic Mooncake trace (v2 with header, or legacy flat rows) into an
    agentic ``Workload`` (see the module docstring).

    ``trace_block_size`` is the tokens per hash id of a legacy trace (a v2 header's
    ``block_size`` wins); ``arrival_speedup_ratio`` divides not_before times and delays.
    Raises ``UserError`` naming ``path:line`` for any problem in the file.
    """
    if not _is_int(trace_block_size) or trace_block_size <= 0:
        raise ValueError(
            f"trace_block_size must be a positive integer, got {trace_block_size!r}")
    ratio = speedup_ratio(arrival_speedup_ratio)

    f = open_trace(path)

    nodes: list[_Node] = []
    by_id: dict[str, _Node] = {}
    header: Optional[dict] = None
    legacy = False
    block_size = trace_block_size
    models: set[str] = set()
    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                raw = raw.rstrip()
                if not raw:
                    continue
                try:
                    row = json.loads(raw)
                except UnicodeDecodeError:
                    raise _RowError("not valid UTF-8") from None
                except json.JSONDecodeError as e:
                    raise _RowError(f"malformed JSON ({e.msg} at column {e.colno})") from None
                if type(row) is not dict:
                    raise _RowError(f"expected a JSON object, got {type(row).__name__}")

                if header is None and not legacy:           # the first row decides the form
                    if "schema" in row:
                        header = row
                        block_size = _header(row)
                        continue
                    v2_fields = [k for k in V2_ROW_FIELDS if k in row]
                    if v2_fields:
                        raise _RowError(
                            f"row has v2 field {v2_fields[0]} but the file has no v2 header "
                            f'(line 1 must be {{"schema": "{SCHEMA}", "version": 2, ...}})')
                    legacy = True

                if legacy:
                    node = _legacy_row(row, lineno, trace_block_size)
                else:
                    node = _v2_row(row, lineno, block_size)
                    models.add(row["model"])
                first = by_id.get(node.request_id)
                if first is not None:
                    raise _RowError(f"duplicate request_id {node.request_id!r} "
                                    f"(first on line {first.line})")
                by_id[node.request_id] = node
                nodes.append(node)
        except _RowError as e:
            raise UserError(f"{path}:{lineno}: {e}") from None
        except OSError as e:
            raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None

    if not nodes:
        raise UserError(f"{path}: empty trace (no requests"
                        f"{' after the header' if header is not None else ''})")

    # Graph checks, in file order: unknown ids, plays, cycles.
    for node in nodes:
        for rid, _, _ in node.deps:
            dep = by_id.get(rid)
            if dep is None:
                raise UserError(f"{path}:{node.line}: request {node.request_id!r} depends on "
                                f"unknown request_id {rid!r}")
            if not legacy and dep.play_id != node.play_id:
                raise UserError(
                    f"{path}:{node.line}: request {node.request_id!r} in play "
                    f"{node.play_id!r} depends on {rid!r} (line {dep.line}) in play "
                    f"{dep.play_id!r}; dependencies must stay within a play")
    cycle = _find_cycle(nodes, by_id)
    if cycle:
        ids = " -> ".join(repr(n.request_id) for n in cycle + [cycle[0]])
        raise UserError(f"{path}:{cycle[0].line}: dependency cycle (each request waits for "
                        f"the next): {ids}")
    if legacy:
        _legacy_plays(nodes)

    # Canonical hash ids over the whole file, in order of first appearance.
    canonical: dict[int, int] = {}
    for node in nodes:
        for h in node.hashes:
            if h not in canonical:
                canonical[h] = len(canonical)

    starts = [n.not_before for n in nodes if n.not_before is not None]
    t0 = min(starts)        # legacy: at least one root exists since there is no cycle
    turn_counts: dict[str, int] = {}
    sessions = []
    for node in nodes:
        k = turn_counts.get(node.session_id, 0)
        turn_counts[node.session_id] = k + 1
        arrival = 0.0 if node.not_before is None else (node.not_before - t0) / ratio
        deps = tuple(Dependency(rid, trigger, delay / ratio)
                     for rid, trigger, delay in node.deps)
        prompt = Prompt(tuple(canonical[h] for h in node.hashes), block_size,
                        node.input_length)
        turn = Turn(node.session_id, k, prompt, node.output_length, arrival_ms=arrival,
                    output_token_ids=node.output_token_ids, line=node.line,
                    request_id=node.request_id, play_id=node.play_id, deps=deps)
        sessions.append(Session(node.request_id, (turn,)))

    meta = {"format": "agentic" if legacy else "agentic_mooncake",
            "version": None if legacy else VERSION,
            "trace_block_size": block_size,
            "arrival_speedup_ratio": arrival_speedup_ratio,
            "unique_hash_ids": len(canonical),
            "plays": len(dict.fromkeys(n.play_id for n in nodes))}
    if not legacy:
        meta["models"] = sorted(models)
        meta["source"] = header.get("source")
    return Workload(sessions=tuple(sessions), source=str(path), meta=meta, kind="agentic")


# --- v2 --------------------------------------------------------------------------------


def _header(row: dict) -> int:
    """Validate the v2 header; returns its block size."""
    schema = row.get("schema")
    if schema != SCHEMA:
        raise _RowError(f"header schema must be {SCHEMA!r}, got {schema!r}")
    version = row.get("version")
    if version != VERSION or not _is_int(version):
        raise _RowError(f"unsupported agentic Mooncake version {version!r}; expected {VERSION}")
    block_size = row.get("block_size")
    if not _is_int(block_size) or block_size <= 0:
        raise _RowError(f"header block_size must be a positive integer, got {block_size!r}")
    scope = row.get("hash_id_scope")
    if scope != "local":
        raise _RowError(f"header hash_id_scope must be 'local', got {scope!r}")
    source = row.get("source")
    if type(source) is not dict:
        raise _RowError("header source must be an object with format and digest")
    for key in ("format", "digest"):
        if not isinstance(source.get(key), str) or not source[key]:
            raise _RowError(f"header source.{key} must be a non-empty string, "
                            f"got {source.get(key)!r}")
    return block_size


def _string(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        raise _RowError(f"missing required field {key}")
    if not isinstance(value, str) or not value:
        raise _RowError(f"{key} must be a non-empty string, got {value!r}")
    return value


def _lengths(row: dict) -> tuple[str, Optional[int], int, Optional[tuple]]:
    """``(input key, input_length or None, output_length, output_token_ids)``."""
    if "input_tokens" in row:
        in_key, input_length = _field(row, "input_length", "input_tokens")
    else:
        in_key, input_length = "input_length", row.get("input_length")
    if input_length is not None:
        if not _is_int(input_length):
            raise _RowError(f"{in_key} must be an integer, got {input_length!r}")
        if input_length < 1:
            raise _RowError(f"{in_key} must be >= 1, got {input_length}")

    key, output_length, output_token_ids = _output_fields(row)
    return in_key, input_length, output_length, output_token_ids


def _hash_ids(row: dict) -> list:
    hash_ids = row.get("hash_ids")
    if hash_ids is None:
        raise _RowError("missing required field hash_ids")
    _check_int_list("hash_ids", hash_ids)
    if not hash_ids:
        raise _RowError("hash_ids must not be empty")
    return hash_ids


def _v2_row(row: dict, lineno: int, block_size: int) -> _Node:
    request_id = _string(row, "request_id")
    play_id = _string(row, "play_id")
    session_id = _string(row, "session_id")
    _string(row, "model")
    hash_ids = _hash_ids(row)
    in_key, input_length, output_length, output_token_ids = _lengths(row)
    if input_length is None:
        raise _RowError("missing required field input_length")
    need = -(-input_length // block_size)
    if len(hash_ids) != need:
        raise _RowError(f"{in_key} {input_length} at block_size {block_size} needs exactly "
                        f"{need} hash_ids, got {len(hash_ids)}")
    not_before = row.get("not_before_ms")
    if not_before is None:
        raise _RowError("missing required field not_before_ms")
    not_before = _number("not_before_ms", not_before)

    deps_value = row.get("dependencies")
    deps = []
    if deps_value is not None:
        if not isinstance(deps_value, list):
            raise _RowError(f"dependencies must be a list, got {type(deps_value).__name__}")
        for i, dep in enumerate(deps_value):
            deps.append(_v2_dependency(dep, f"dependencies[{i}]", request_id))
    return _Node(lineno, request_id, play_id, session_id, hash_ids, input_length,
                 output_length, output_token_ids, not_before, deps)


def _v2_dependency(dep: Any, where: str, request_id: str) -> tuple[str, str, float]:
    if type(dep) is not dict:
        raise _RowError(f"{where} must be an object, got {type(dep).__name__}")
    for key in ("request_id", "trigger", "delay_ms", "relation"):
        if dep.get(key) is None:
            raise _RowError(f"{where} is missing {key}")
    rid = dep["request_id"]
    if not isinstance(rid, str) or not rid:
        raise _RowError(f"{where}.request_id must be a non-empty string, got {rid!r}")
    if rid == request_id:
        raise _RowError(f"request {request_id!r} depends on itself ({where})")
    trigger = dep["trigger"]
    if trigger not in TRIGGERS:
        raise _RowError(f"{where}.trigger must be one of {', '.join(TRIGGERS)}; "
                        f"got {trigger!r}")
    relation = dep["relation"]
    if relation not in RELATIONS:
        raise _RowError(f"{where}.relation must be one of {', '.join(RELATIONS)}; "
                        f"got {relation!r}")
    if trigger == "dispatch" and relation not in DISPATCH_RELATIONS:
        raise _RowError(f"{where}: a {relation} dependency cannot use trigger dispatch "
                        f"(only {', '.join(DISPATCH_RELATIONS)} can)")
    delay = _number(f"{where}.delay_ms", dep["delay_ms"])
    return rid, trigger, float(delay)


# --- legacy ----------------------------------------------------------------------------


def _id(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise _RowError(f"{key} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _legacy_row(row: dict, lineno: int, trace_block_size: int) -> _Node:
    request_id = row.get("request_id")
    if request_id is None:
        raise _RowError("missing required field request_id")
    request_id = _id("request_id", request_id)
    session_id = row.get("session_id")
    session_id = (f"request_{lineno}" if session_id is None
                  else _id("session_id", session_id))
    hash_ids = _hash_ids(row)
    in_key, input_length, output_length, output_token_ids = _lengths(row)
    capacity = len(hash_ids) * trace_block_size
    if input_length is None:
        input_length = capacity
    elif input_length > capacity:
        raise _RowError(f"{in_key} {input_length} exceeds the {capacity} tokens of its "
                        f"{len(hash_ids)} hash_ids x trace_block_size {trace_block_size}")

    if "created_time" in row:
        ts_key, timestamp = _field(row, "timestamp", "created_time")
    else:
        ts_key, timestamp = "timestamp", row.get("timestamp")
    if timestamp is not None:
        timestamp = float(_number(ts_key, timestamp))
    if row.get("delay") is not None and row.get("delay_ms") is not None:
        raise _RowError("delay and delay_ms cannot both be set")
    delay_key = "delay" if row.get("delay") is not None else "delay_ms"
    delay = row.get(delay_key)
    delay = 0.0 if delay is None else _number(delay_key, delay)
    tool_wait = row.get("tool_wait_ms")
    tool_wait = 0.0 if tool_wait is None else _number("tool_wait_ms", tool_wait)
    prefix_reset = row.get("prefix_reset")
    if prefix_reset is not None and not isinstance(prefix_reset, bool):
        raise _RowError(f"prefix_reset must be true or false, got {prefix_reset!r}")

    wait_for = row.get("wait_for")
    deps = []
    if wait_for is not None:
        if not isinstance(wait_for, list):
            raise _RowError(f"wait_for must be a list of request ids, "
                            f"got {type(wait_for).__name__}")
        for i, rid in enumerate(wait_for):
            rid = _id(f"wait_for[{i}]", rid)
            if rid == request_id:
                raise _RowError(f"request {request_id!r} depends on itself (wait_for[{i}])")
            deps.append((rid, "completion", float(delay + tool_wait)))
    if not deps and timestamp is None:
        raise _RowError("missing timestamp (required on a row without wait_for)")
    return _Node(lineno, request_id, None, session_id, hash_ids, input_length, output_length,
                 output_token_ids, None if deps else timestamp, deps)


def _legacy_plays(nodes: list[_Node]) -> None:
    """Name the connected components of the dependency graph ``play_<n>``."""
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


# --- graph -----------------------------------------------------------------------------


def _find_cycle(nodes: list[_Node], by_id: dict[str, _Node]) -> Optional[list[_Node]]:
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
