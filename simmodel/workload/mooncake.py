"""Mooncake JSONL traces (reference §7.1) read into a ``Workload``.

One JSON object per line, blank lines ignored.  A row is one request (one *turn*):

* ``timestamp`` (alias ``created_time``), ms: required on a session's first turn;
* ``hash_ids``: required, non-empty list of non-negative ints, one per trace block of
  ``trace_block_size`` tokens;
* ``input_length`` (``input_tokens``): default ``len(hash_ids) * trace_block_size``, never
  more than that;
* ``output_length`` (``output_tokens``): required, >= 1; optional ``output_token_ids`` of
  exactly that length;
* ``session_id`` (str or int), ``delay`` (``delay_ms``, ms, >= 0, never on a first turn);
* ``priority`` (int) and ``strict_priority`` (int >= 0): order of the KV router's queue;
* ``request_id``, ``policy_class``: accepted, ignored.

A JSON ``null`` counts as an absent optional field.

Token synthesis: hash ids are re-numbered 0, 1, 2, ... in order of first appearance over
the whole file, and a prompt is canonical id ``i`` repeated ``trace_block_size`` times per
block, truncated to ``input_length`` (kept in compact form, see ``Prompt``).

Sessions: rows sharing a ``session_id`` are the turns of one session in file order; rows
without one are one-turn sessions named ``request_<line>`` (1-based physical line, blank
lines counted).  Sessions are listed in the order of their first rows.  First turns get
``arrival_ms``: their timestamps shifted so the earliest is 0, divided by
``arrival_speedup_ratio``.  Later turns get ``delay_ms`` (after the previous turn
completes): the explicit ``delay``, else the timestamp difference to the previous turn
when both are present, else 0; divided by ``arrival_speedup_ratio`` as well.

Delta prompts (``prompt_mode="delta"``, the reference's ``mooncake-delta``, §7.2): the rows
are read exactly as above, but a turn's row holds only what the turn *adds*: its ``Prompt``
is that delta alone, and the driver builds the engine prompt at release time from the
session's history (every earlier delta, the output tokens each earlier completed turn
emitted, then this delta).  Giving ``output_token_ids`` on every row makes that history
independent of any output-token RNG.

Every mistake in the file raises a one-line ``UserError("<path>:<line>: <what>")``.
Cost: one ``json.loads`` per line and O(len(hash_ids)) work per row (never per token).
"""
from __future__ import annotations

import json
import math
from typing import Any, Optional

from simmodel.errors import UserError
from simmodel.workload.model import PROMPT_MODES, Prompt, Session, Turn, Workload


class _RowError(Exception):
    """A problem with the current row; the reader adds ``path:line``."""


def _field(row: dict, name: str, alias: str) -> tuple[str, Any]:
    """``(key used, value)`` of a field that may be spelled two ways (``null`` = absent)."""
    value = row.get(name)
    alias_value = row.get(alias)
    if value is not None and alias_value is not None:
        raise _RowError(f"both {name} and its alias {alias} are given; keep one")
    if value is None and alias_value is not None:
        return alias, alias_value
    return name, value


def _is_int(value: Any) -> bool:
    return type(value) is int          # excludes bool (and floats such as 3.0)


def _number(key: str, value: Any) -> float:
    """A finite, non-negative JSON number (int or float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _RowError(f"{key} must be a number, got {value!r}")
    if value < 0:
        raise _RowError(f"{key} must be >= 0, got {value!r}")
    return value


def _int_list(key: str, value: Any) -> list:
    if not isinstance(value, list):
        raise _RowError(f"{key} must be a list of integers, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not _is_int(item):
            raise _RowError(f"{key}[{i}] must be an integer, got {item!r}")
        if item < 0:
            raise _RowError(f"{key}[{i}] must be >= 0, got {item!r}")
    return value


def _check_int_list(key: str, value: Any) -> list:
    """Fast (C-level) check of the common case; the slow path names the bad element."""
    if (isinstance(value, list) and set(map(type, value)) <= _INT_ONLY
            and (not value or min(value) >= 0)):
        return value
    return _int_list(key, value)


_INT_ONLY = {int}       # set(map(type, ...)) <= {int}: no bools, floats or strings



def open_trace(path: str, what: Optional[str] = None, **open_args):
    """Open a trace file (binary unless ``open_args`` say otherwise); a missing or
    unreadable file is a one-line ``UserError`` naming it (a folder, when ``what`` names
    the file expected: "is a folder, expected <what>")."""
    try:
        return open(path, **(open_args or {"mode": "rb"}))
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        if what is None:
            raise UserError(f"{path}: cannot read file (Is a directory)") from None
        raise UserError(f"{path}: is a folder, expected {what}") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None


def speedup_ratio(value: Any) -> float:
    """Validate an ``arrival_speedup_ratio`` argument (every trace reader takes one)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"arrival_speedup_ratio must be a positive number, got {value!r}")
    return float(value)


def _output_fields(row: dict) -> tuple[str, int, Optional[tuple]]:
    """``(key used, output_length, output_token_ids or None)`` of a request row."""
    if "output_tokens" in row:
        key, output_length = _field(row, "output_length", "output_tokens")
    else:
        key, output_length = "output_length", row.get("output_length")
    if output_length is None:
        raise _RowError("missing required field output_length")
    if not _is_int(output_length):
        raise _RowError(f"{key} must be an integer, got {output_length!r}")
    if output_length < 1:
        raise _RowError(f"{key} must be >= 1, got {output_length}")
    output_token_ids = row.get("output_token_ids")
    if output_token_ids is not None:
        _check_int_list("output_token_ids", output_token_ids)
        if len(output_token_ids) != output_length:
            raise _RowError(f"output_token_ids has {len(output_token_ids)} ids but {key} "
                            f"is {output_length}")
        output_token_ids = tuple(output_token_ids)
    return key, output_length, output_token_ids

def read_mooncake(path: str, *, trace_block_size: int = 512,
                  arrival_speedup_ratio: float = 1.0, prompt_mode: str = "full") -> Workload:
    """Read a Mooncake JSONL trace into a ``Workload`` (see the module docstring).

    ``trace_block_size`` is the number of tokens one hash id stands for;
    ``arrival_speedup_ratio`` divides first-turn arrivals and inter-turn delays;
    ``prompt_mode`` is ``full`` (each row is a whole prompt) or ``delta`` (each row is
    what the turn adds to its session's history; ``Workload.prompt_mode`` says so).
    Raises ``UserError`` naming ``path:line`` for any problem in the file.
    """
    if prompt_mode not in PROMPT_MODES:
        raise ValueError(f"prompt_mode must be one of {', '.join(PROMPT_MODES)}, "
                         f"got {prompt_mode!r}")
    if not _is_int(trace_block_size) or trace_block_size <= 0:
        raise ValueError(
            f"trace_block_size must be a positive integer, got {trace_block_size!r}")
    ratio = speedup_ratio(arrival_speedup_ratio)

    # Pass 1 validates every row and groups rows into sessions; the hash ids of all rows go
    # into one flat list, re-numbered at the end in one C-level sweep (dict.fromkeys keeps
    # first appearances in order).
    flat: list[int] = []
    # Per session, in order of first row: [session_id, rows]; a row is
    # (line, start, end, input_length, output_length, output_token_ids, timestamp, delay)
    # with flat[start:end] its hash ids.
    sessions: list[list] = []
    by_id: dict[str, list] = {}
    # Per named session: (timestamp, line) of its latest turn, for delays and ordering.
    last_ts: dict[str, tuple[Optional[float], int]] = {}
    generated_names: dict[str, int] = {}
    loads = json.loads

    f = open_trace(path)

    with f:
        lineno = 0
        try:
            for lineno, raw in enumerate(f, 1):
                raw = raw.rstrip()      # so JSON error columns are on this line
                if not raw:
                    continue
                try:
                    row = loads(raw)
                except UnicodeDecodeError:
                    raise _RowError("not valid UTF-8") from None
                except json.JSONDecodeError as e:
                    raise _RowError(f"malformed JSON ({e.msg} at column {e.colno})") from None
                if type(row) is not dict:
                    raise _RowError(f"expected a JSON object, got {type(row).__name__}")

                hash_ids = row.get("hash_ids")
                if hash_ids is None:
                    raise _RowError("missing required field hash_ids")
                _check_int_list("hash_ids", hash_ids)
                if not hash_ids:
                    raise _RowError("hash_ids must not be empty")
                capacity = len(hash_ids) * trace_block_size

                if "input_tokens" in row:
                    key, input_length = _field(row, "input_length", "input_tokens")
                else:
                    key, input_length = "input_length", row.get("input_length")
                if input_length is None:
                    input_length = capacity
                elif not _is_int(input_length):
                    raise _RowError(f"{key} must be an integer, got {input_length!r}")
                elif input_length < 1:
                    raise _RowError(f"{key} must be >= 1, got {input_length}")
                elif input_length > capacity:
                    raise _RowError(
                        f"{key} {input_length} exceeds the {capacity} tokens of its "
                        f"{len(hash_ids)} hash_ids x trace_block_size {trace_block_size}")

                key, output_length, output_token_ids = _output_fields(row)
                priority = row.get("priority") or 0
                strict = row.get("strict_priority") or 0
                if not _is_int(priority):
                    raise _RowError(f"priority must be an integer, got {priority!r}")
                if not _is_int(strict) or strict < 0:
                    raise _RowError(f"strict_priority must be an integer >= 0, got {strict!r}")

                if "created_time" in row:
                    ts_key, timestamp = _field(row, "timestamp", "created_time")
                else:
                    ts_key, timestamp = "timestamp", row.get("timestamp")
                if timestamp is not None:
                    timestamp = _number(ts_key, timestamp)

                if "delay_ms" in row:
                    delay_key, delay = _field(row, "delay", "delay_ms")
                else:
                    delay_key, delay = "delay", row.get("delay")
                if delay is not None:
                    delay = _number(delay_key, delay)

                session_id = row.get("session_id")
                if session_id is not None:
                    if isinstance(session_id, bool) or not isinstance(session_id, (str, int)):
                        raise _RowError(
                            f"session_id must be a string or an integer, got {session_id!r}")
                    session_id = str(session_id)

                named = session_id is not None
                session = by_id.get(session_id) if named else None
                if session is None:
                    # a session's first turn
                    if delay is not None:
                        raise _RowError(f"{delay_key} is not allowed on a session's first turn")
                    if timestamp is None:
                        raise _RowError("missing timestamp (required on a session's first turn)")
                    if named:
                        session = by_id[session_id] = [session_id, []]
                    else:
                        session_id = f"request_{lineno}"
                        generated_names[session_id] = lineno
                        session = [session_id, []]
                    sessions.append(session)
                else:
                    # a later turn: delay after the previous turn completes
                    prev_ts, prev_line = last_ts[session_id]
                    if timestamp is not None and prev_ts is not None and timestamp < prev_ts:
                        raise _RowError(
                            f"non-monotonic session order: {ts_key} {timestamp:g} of session "
                            f"{session_id!r} is before {prev_ts:g} of its previous turn "
                            f"(line {prev_line})")
                    if delay is None:
                        delay = (timestamp - prev_ts
                                 if timestamp is not None and prev_ts is not None else 0)
                if named:
                    last_ts[session_id] = (timestamp, lineno)
                start = len(flat)
                flat.extend(hash_ids)
                session[1].append((lineno, start, len(flat), input_length, output_length,
                                   output_token_ids, timestamp, delay, priority, strict))
        except _RowError as e:
            raise UserError(f"{path}:{lineno}: {e}") from None
        except OSError as e:
            raise UserError(f"{path}: cannot read file ({e.strerror or e})") from None

    if not sessions:
        raise UserError(f"{path}: empty trace (no rows)")
    for name, lineno in generated_names.items():
        if name in by_id:
            raise UserError(
                f"{path}:{by_id[name][1][0][0]}: session_id {name!r} clashes with the name "
                f"given to the session-less row on line {lineno}")

    # Canonical ids: 0, 1, 2, ... in order of first appearance over the whole file.
    canonical = dict(zip(dict.fromkeys(flat), range(len(flat))))
    canon = list(map(canonical.__getitem__, flat))

    t0 = min(rows[0][6] for _, rows in sessions)
    out = []
    for session_id, rows in sessions:
        turns = []
        for k, (lineno, start, end, input_length, output_length, output_token_ids,
                timestamp, delay, priority, strict) in enumerate(rows):
            prompt = Prompt(tuple(canon[start:end]), trace_block_size, input_length)
            if k == 0:
                turns.append(Turn(session_id, 0, prompt, output_length,
                                  arrival_ms=(timestamp - t0) / ratio,
                                  output_token_ids=output_token_ids, line=lineno,
                                  priority=priority, strict_priority=strict))
            else:
                turns.append(Turn(session_id, k, prompt, output_length,
                                  delay_ms=delay / ratio,
                                  output_token_ids=output_token_ids, line=lineno,
                                  priority=priority, strict_priority=strict))
        out.append(Session(session_id, tuple(turns)))

    return Workload(
        sessions=tuple(out),
        source=str(path),
        meta={"format": "mooncake" if prompt_mode == "full" else "mooncake-delta",
              "trace_block_size": trace_block_size,
              "arrival_speedup_ratio": arrival_speedup_ratio,
              "unique_hash_ids": len(canonical)},
        prompt_mode=prompt_mode,
    )
