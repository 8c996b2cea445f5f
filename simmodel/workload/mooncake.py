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

from array import array
from typing import TYPE_CHECKING, Optional

from simmodel.errors import UserError
from simmodel.workload.model import PROMPT_MODES, Prompt, Session, Turn, Workload
from simmodel.workload.rows import (RowError, canonical_ids, each_json_row, hash_ids,
                                    input_length, is_int, open_trace, optional_number,
                                    output_fields, positive_int_arg, speedup_ratio,
                                    within_capacity)

if TYPE_CHECKING:
    from simmodel.config import WorkloadConfig

# open_trace and speedup_ratio were defined here before rows.py; still importable from here.
__all__ = ["delta_from_config", "from_config", "open_trace", "read_mooncake", "speedup_ratio"]


def from_config(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
    """Format ``mooncake``: ``cfg.trace`` read with ``cfg.trace_block_size`` and
    ``cfg.arrival_speedup_ratio``, each row a whole prompt (``engine_block_size`` unused)."""
    return read_mooncake(cfg.trace, trace_block_size=cfg.trace_block_size,
                         arrival_speedup_ratio=cfg.arrival_speedup_ratio, prompt_mode="full")


def delta_from_config(cfg: WorkloadConfig, *, engine_block_size: int) -> Workload:
    """Format ``mooncake-delta``: as ``from_config``, each row a prompt delta."""
    return read_mooncake(cfg.trace, trace_block_size=cfg.trace_block_size,
                         arrival_speedup_ratio=cfg.arrival_speedup_ratio, prompt_mode="delta")


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
    positive_int_arg("trace_block_size", trace_block_size)
    ratio = speedup_ratio(arrival_speedup_ratio)

    # Pass 1 validates every row and groups rows into sessions; pass 2 re-numbers the hash
    # ids of all rows at once and builds the turns.
    grouping = _SessionRows(trace_block_size)
    each_json_row(path, grouping.add)
    grouping.check_names(path)
    canonical = canonical_ids(grouping.flat)
    canon = tuple(map(canonical.__getitem__, grouping.flat))
    return Workload(
        sessions=_sessions(grouping.sessions, canon, trace_block_size, ratio),
        source=str(path),
        meta={"format": "mooncake" if prompt_mode == "full" else "mooncake-delta",
              "trace_block_size": trace_block_size,
              "arrival_speedup_ratio": arrival_speedup_ratio,
              "unique_hash_ids": len(canonical)},
        prompt_mode=prompt_mode,
    )


def _priorities(row: dict) -> tuple[int, int]:
    """``(priority, strict_priority)`` of a row: ints, ``strict_priority`` >= 0, 0 when
    absent."""
    priority = row.get("priority") or 0
    strict = row.get("strict_priority") or 0
    if not is_int(priority):
        raise RowError(f"priority must be an integer, got {priority!r}")
    if not is_int(strict) or strict < 0:
        raise RowError(f"strict_priority must be an integer >= 0, got {strict!r}")
    return priority, strict


def _session_id(row: dict) -> Optional[str]:
    """The row's ``session_id`` (a string or an integer) as a string, or None."""
    session_id = row.get("session_id")
    if session_id is None:
        return None
    if isinstance(session_id, bool) or not isinstance(session_id, (str, int)):
        raise RowError(f"session_id must be a string or an integer, got {session_id!r}")
    return str(session_id)


class _SessionRows:
    """Pass 1: the validated rows grouped into sessions, in order of their first rows.

    The hash ids of all rows go into one flat ``array('q')`` (``flat``: 8 bytes an id, where
    a list would keep every parsed int object, some 36 bytes an id, and the freed ones
    would leave the heap fragmented; a list only if an id does not fit 64 bits); a session is
    ``[session_id, rows]``, a row ``(line, start, end, input_length, output_length,
    output_token_ids, timestamp, delay, priority, strict_priority)`` with
    ``flat[start:end]`` its hash ids.
    """

    def __init__(self, trace_block_size: int):
        self.trace_block_size = trace_block_size
        self.flat = array("q")
        self.sessions: list[list] = []
        self.by_id: dict[str, list] = {}
        # Per named session: (timestamp, line) of its latest turn, for delays and ordering.
        self.last_ts: dict[str, tuple[Optional[float], int]] = {}
        self.generated_names: dict[str, int] = {}

    def add(self, lineno: int, row: dict) -> None:
        """Validate one row and append it to its session (a new one on a first turn)."""
        hashes = hash_ids(row)
        in_key, length = input_length(row)
        length = within_capacity(in_key, length, hashes, self.trace_block_size)
        _, output_length, output_token_ids = output_fields(row)
        priority, strict = _priorities(row)
        ts_key, timestamp = optional_number(row, "timestamp", "created_time")
        delay_key, delay = optional_number(row, "delay", "delay_ms")
        session_id = _session_id(row)
        named = session_id is not None
        session = self.by_id.get(session_id) if named else None
        if session is None:
            session = self._first_turn(lineno, session_id, timestamp, delay, delay_key)
            session_id = session[0]
        else:
            delay = self._later_delay(session_id, ts_key, timestamp, delay)
        if named:
            self.last_ts[session_id] = (timestamp, lineno)
        flat = self.flat
        start = len(flat)
        try:
            flat.extend(hashes)
        except OverflowError:               # an id beyond 64 bits: a list from here on
            flat = self.flat = list(flat)
            del flat[start:]
            flat.extend(hashes)
        session[1].append((lineno, start, len(flat), length, output_length,
                           output_token_ids, timestamp, delay, priority, strict))

    def _first_turn(self, lineno: int, session_id: Optional[str], timestamp: Optional[float],
                    delay: Optional[float], delay_key: str) -> list:
        """A new session for a first turn (named ``request_<line>`` when ``session_id`` is
        None): it must have a timestamp and no delay."""
        if delay is not None:
            raise RowError(f"{delay_key} is not allowed on a session's first turn")
        if timestamp is None:
            raise RowError("missing timestamp (required on a session's first turn)")
        if session_id is not None:
            session = self.by_id[session_id] = [session_id, []]
        else:
            session_id = f"request_{lineno}"
            self.generated_names[session_id] = lineno
            session = [session_id, []]
        self.sessions.append(session)
        return session

    def _later_delay(self, session_id: str, ts_key: str, timestamp: Optional[float],
                     delay: Optional[float]) -> float:
        """A later turn's delay after the previous turn completes: the explicit one, else
        the timestamp difference when both timestamps are known, else 0."""
        prev_ts, prev_line = self.last_ts[session_id]
        if timestamp is not None and prev_ts is not None and timestamp < prev_ts:
            raise RowError(
                f"non-monotonic session order: {ts_key} {timestamp:g} of session "
                f"{session_id!r} is before {prev_ts:g} of its previous turn "
                f"(line {prev_line})")
        if delay is None:
            delay = timestamp - prev_ts if timestamp is not None and prev_ts is not None else 0
        return delay

    def check_names(self, path: str) -> None:
        """Refuse an empty trace and a ``session_id`` equal to a generated name."""
        if not self.sessions:
            raise UserError(f"{path}: empty trace (no rows)")
        for name, lineno in self.generated_names.items():
            if name in self.by_id:
                raise UserError(
                    f"{path}:{self.by_id[name][1][0][0]}: session_id {name!r} clashes with "
                    f"the name given to the session-less row on line {lineno}")


def _sessions(groups: list[list], canon: tuple[int, ...], trace_block_size: int,
              ratio: float) -> tuple[Session, ...]:
    """Pass 2: the sessions of the grouped rows; ``canon`` holds the canonical hash ids of
    all rows (a tuple, so a slice is the prompt's ids); first-turn timestamps are shifted
    so the earliest is 0."""
    t0 = min(rows[0][6] for _, rows in groups)
    out = []
    for session_id, rows in groups:
        turns = []
        for k, (lineno, start, end, length, output_length, output_token_ids,
                timestamp, delay, priority, strict) in enumerate(rows):
            prompt = Prompt(canon[start:end], trace_block_size, length)
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
    return tuple(out)
