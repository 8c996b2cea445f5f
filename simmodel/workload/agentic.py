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

import itertools
from typing import TYPE_CHECKING, Any, Optional

from simmodel.errors import UserError
from simmodel.workload.agentic_graph import find_cycle, name_plays
from simmodel.workload.model import Dependency, Prompt, Session, Turn, Workload
from simmodel.workload.rows import (RowError, canonical_ids, each_json_row, hash_ids,
                                    input_length, is_int, non_empty_string, number,
                                    optional_number, output_fields, positive_int_arg, required,
                                    speedup_ratio, within_capacity)

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig

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


def from_config(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
    """Format ``agentic``: ``cfg.trace`` read with ``cfg.trace_block_size`` (a v2 trace's
    header ``block_size`` wins) and ``cfg.arrival_speedup_ratio`` (``engine_block_size``
    unused)."""
    return read_agentic(cfg.trace, trace_block_size=cfg.trace_block_size,
                        arrival_speedup_ratio=cfg.arrival_speedup_ratio)


def read_agentic(path: str, *, trace_block_size: int = 512,
                 arrival_speedup_ratio: float = 1.0) -> Workload:
    """Read an agentic Mooncake trace (v2 with header, or legacy flat rows) into an
    agentic ``Workload`` (see the module docstring).

    ``trace_block_size`` is the tokens per hash id of a legacy trace (a v2 header's
    ``block_size`` wins); ``arrival_speedup_ratio`` divides not_before times and delays.
    Raises ``UserError`` naming ``path:line`` for any problem in the file.
    """
    positive_int_arg("trace_block_size", trace_block_size)
    ratio = speedup_ratio(arrival_speedup_ratio)
    trace = _Nodes(trace_block_size)
    each_json_row(path, trace.add)
    nodes = trace.nodes
    if not nodes:
        raise UserError(f"{path}: empty trace (no requests"
                        f"{' after the header' if trace.header is not None else ''})")
    _check_graph(path, nodes, trace.by_id, trace.legacy)
    if trace.legacy:
        name_plays(nodes)
    canonical = canonical_ids(list(itertools.chain.from_iterable(n.hashes for n in nodes)))
    meta = {"format": "agentic" if trace.legacy else "agentic_mooncake",
            "version": None if trace.legacy else VERSION,
            "trace_block_size": trace.block_size,
            "arrival_speedup_ratio": arrival_speedup_ratio,
            "unique_hash_ids": len(canonical),
            "plays": len(dict.fromkeys(n.play_id for n in nodes))}
    if not trace.legacy:
        meta["models"] = sorted(trace.models)
        meta["source"] = trace.header.get("source")
    return Workload(sessions=_sessions(nodes, canonical, trace.block_size, ratio),
                    source=str(path), meta=meta, kind="agentic")


class _Nodes:
    """The rows of a trace, validated in file order; the first row decides the form (a v2
    header, else legacy)."""

    def __init__(self, trace_block_size: int):
        self.trace_block_size = trace_block_size
        self.block_size = trace_block_size      # a v2 header's block_size replaces it
        self.nodes: list[_Node] = []
        self.by_id: dict[str, _Node] = {}
        self.header: Optional[dict] = None
        self.legacy = False
        self.models: set[str] = set()

    def add(self, lineno: int, row: dict) -> None:
        """Validate one row (the header, or a node with a new request id)."""
        if self.header is None and not self.legacy:      # the first row decides the form
            if "schema" in row:
                self.header = row
                self.block_size = _header(row)
                return
            v2_fields = [k for k in V2_ROW_FIELDS if k in row]
            if v2_fields:
                raise RowError(
                    f"row has v2 field {v2_fields[0]} but the file has no v2 header "
                    f'(line 1 must be {{"schema": "{SCHEMA}", "version": 2, ...}})')
            self.legacy = True
        if self.legacy:
            node = _legacy_row(row, lineno, self.trace_block_size)
        else:
            node = _v2_row(row, lineno, self.block_size)
            self.models.add(row["model"])
        first = self.by_id.get(node.request_id)
        if first is not None:
            raise RowError(f"duplicate request_id {node.request_id!r} "
                           f"(first on line {first.line})")
        self.by_id[node.request_id] = node
        self.nodes.append(node)


def _check_graph(path: str, nodes: list[_Node], by_id: dict[str, _Node], legacy: bool) -> None:
    """Graph checks, in file order: unknown ids, dependencies across plays (v2), cycles."""
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
    cycle = find_cycle(nodes, by_id)
    if cycle:
        ids = " -> ".join(repr(n.request_id) for n in cycle + [cycle[0]])
        raise UserError(f"{path}:{cycle[0].line}: dependency cycle (each request waits for "
                        f"the next): {ids}")


def _sessions(nodes: list[_Node], canonical: dict[int, int], block_size: int,
              ratio: float) -> tuple[Session, ...]:
    """One one-turn session per node; not_before times shifted so the earliest is 0."""
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
    return tuple(sessions)


# --- v2 --------------------------------------------------------------------------------


def _header(row: dict) -> int:
    """Validate the v2 header; returns its block size."""
    schema = row.get("schema")
    if schema != SCHEMA:
        raise RowError(f"header schema must be {SCHEMA!r}, got {schema!r}")
    version = row.get("version")
    if version != VERSION or not is_int(version):
        raise RowError(f"unsupported agentic Mooncake version {version!r}; expected {VERSION}")
    block_size = row.get("block_size")
    if not is_int(block_size) or block_size <= 0:
        raise RowError(f"header block_size must be a positive integer, got {block_size!r}")
    scope = row.get("hash_id_scope")
    if scope != "local":
        raise RowError(f"header hash_id_scope must be 'local', got {scope!r}")
    source = row.get("source")
    if type(source) is not dict:
        raise RowError("header source must be an object with format and digest")
    for key in ("format", "digest"):
        non_empty_string(f"header source.{key}", source.get(key))
    return block_size


def _string(row: dict, key: str) -> str:
    """A required, non-empty string field of a v2 row."""
    return non_empty_string(key, required(row, key))


def _v2_row(row: dict, lineno: int, block_size: int) -> _Node:
    """A v2 node: its fields validated, ``hash_ids`` exactly covering ``input_length``."""
    request_id = _string(row, "request_id")
    play_id = _string(row, "play_id")
    session_id = _string(row, "session_id")
    _string(row, "model")
    hashes = hash_ids(row)
    in_key, length = input_length(row)
    _, output_length, output_token_ids = output_fields(row)
    if length is None:
        raise RowError("missing required field input_length")
    need = -(-length // block_size)
    if len(hashes) != need:
        raise RowError(f"{in_key} {length} at block_size {block_size} needs exactly "
                       f"{need} hash_ids, got {len(hashes)}")
    not_before = number("not_before_ms", required(row, "not_before_ms"))
    deps_value = row.get("dependencies")
    deps = []
    if deps_value is not None:
        if not isinstance(deps_value, list):
            raise RowError(f"dependencies must be a list, got {type(deps_value).__name__}")
        for i, dep in enumerate(deps_value):
            deps.append(_v2_dependency(dep, f"dependencies[{i}]", request_id))
    return _Node(lineno, request_id, play_id, session_id, hashes, length,
                 output_length, output_token_ids, not_before, deps)


def _v2_dependency(dep: Any, where: str, request_id: str) -> tuple[str, str, float]:
    """``(request_id, trigger, delay_ms)`` of one entry of a node's ``dependencies``."""
    if type(dep) is not dict:
        raise RowError(f"{where} must be an object, got {type(dep).__name__}")
    for key in ("request_id", "trigger", "delay_ms", "relation"):
        if dep.get(key) is None:
            raise RowError(f"{where} is missing {key}")
    rid = non_empty_string(f"{where}.request_id", dep["request_id"])
    if rid == request_id:
        raise RowError(f"request {request_id!r} depends on itself ({where})")
    trigger = dep["trigger"]
    if trigger not in TRIGGERS:
        raise RowError(f"{where}.trigger must be one of {', '.join(TRIGGERS)}; "
                       f"got {trigger!r}")
    relation = dep["relation"]
    if relation not in RELATIONS:
        raise RowError(f"{where}.relation must be one of {', '.join(RELATIONS)}; "
                       f"got {relation!r}")
    if trigger == "dispatch" and relation not in DISPATCH_RELATIONS:
        raise RowError(f"{where}: a {relation} dependency cannot use trigger dispatch "
                       f"(only {', '.join(DISPATCH_RELATIONS)} can)")
    delay = number(f"{where}.delay_ms", dep["delay_ms"])
    return rid, trigger, float(delay)


# --- legacy ----------------------------------------------------------------------------


def _id(key: str, value: Any) -> str:
    """A legacy request or session id: a non-empty string or an integer, as a string."""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise RowError(f"{key} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _legacy_row(row: dict, lineno: int, trace_block_size: int) -> _Node:
    """A legacy node: ``wait_for`` ids become completion dependencies, delayed by
    ``delay + tool_wait_ms``; a row without them starts at its ``timestamp``."""
    request_id = _id("request_id", required(row, "request_id"))
    session_id = row.get("session_id")
    session_id = (f"request_{lineno}" if session_id is None
                  else _id("session_id", session_id))
    hashes = hash_ids(row)
    in_key, length = input_length(row)
    _, output_length, output_token_ids = output_fields(row)
    length = within_capacity(in_key, length, hashes, trace_block_size)
    _, timestamp = optional_number(row, "timestamp", "created_time")
    if timestamp is not None:
        timestamp = float(timestamp)
    wait = _legacy_wait(row)
    prefix_reset = row.get("prefix_reset")
    if prefix_reset is not None and not isinstance(prefix_reset, bool):
        raise RowError(f"prefix_reset must be true or false, got {prefix_reset!r}")
    deps = _wait_for(row, request_id, wait)
    if not deps and timestamp is None:
        raise RowError("missing timestamp (required on a row without wait_for)")
    return _Node(lineno, request_id, None, session_id, hashes, length, output_length,
                 output_token_ids, None if deps else timestamp, deps)


def _legacy_wait(row: dict) -> float:
    """``delay`` (or ``delay_ms``) + ``tool_wait_ms`` of a legacy row, 0 when absent."""
    if row.get("delay") is not None and row.get("delay_ms") is not None:
        raise RowError("delay and delay_ms cannot both be set")
    delay_key = "delay" if row.get("delay") is not None else "delay_ms"
    delay = row.get(delay_key)
    delay = 0.0 if delay is None else number(delay_key, delay)
    tool_wait = row.get("tool_wait_ms")
    tool_wait = 0.0 if tool_wait is None else number("tool_wait_ms", tool_wait)
    return float(delay + tool_wait)


def _wait_for(row: dict, request_id: str, wait: float) -> list[tuple[str, str, float]]:
    """The completion dependencies a legacy row's ``wait_for`` lists, each after ``wait``."""
    wait_for = row.get("wait_for")
    deps = []
    if wait_for is not None:
        if not isinstance(wait_for, list):
            raise RowError(f"wait_for must be a list of request ids, "
                           f"got {type(wait_for).__name__}")
        for i, rid in enumerate(wait_for):
            rid = _id(f"wait_for[{i}]", rid)
            if rid == request_id:
                raise RowError(f"request {request_id!r} depends on itself (wait_for[{i}])")
            deps.append((rid, "completion", wait))
    return deps
