"""The workload as data: sessions of turns, each turn a prompt in compact form.

A workload is built completely before the simulation starts (so two scenarios can be
compared on the identical workload) and is never mutated by the simulation.

Prompts stay in their compact *run* form: a prompt is the concatenation of runs, run i
being the token id ``ids[i]`` repeated ``run_len`` times, the whole truncated to
``length`` tokens.  This is exactly the reference's token synthesis for Mooncake traces
(§7.1: canonical hash id i repeated ``trace_block_size`` times) and, with ``run_len`` equal
to the engine block size and fresh ids, its synthetic generator (§7.5).  The engine hashes
prompts at its own block size (``simmodel.engine.tokens``) only when a turn is dispatched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True, slots=True)
class Prompt:
    """Token content of a prompt: ``ids[i]`` repeated ``run_len`` times, truncated to ``length``."""

    ids: tuple[int, ...]
    run_len: int
    length: int

    def __post_init__(self):
        if self.length > len(self.ids) * self.run_len:
            raise ValueError(
                f"input_length {self.length} exceeds {len(self.ids)} blocks x {self.run_len} tokens")


from simmodel.engine.prompts import RunPrompt  # noqa: E402,F401 (the engine owns it)


@dataclass(frozen=True, slots=True)
class Dependency:
    """An agentic node waits for ``request_id`` to be dispatched or to end
    (``trigger``: ``dispatch`` | ``completion``), then ``delay_ms`` more."""

    request_id: str
    trigger: str = "completion"
    delay_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a session.

    ``arrival_ms`` is set on a session's first turn (already normalised so the earliest
    first turn is at 0, and divided by the arrival speed-up).  Later turns have
    ``delay_ms``: the time between the previous turn's completion and this turn's release.
    ``line`` is the 1-based source line (for messages and default session names).

    In an agentic workload every node is a one-turn session: ``arrival_ms`` is its
    ``not_before`` time and ``deps`` the events it waits for (reference §7.3).
    """

    session_id: str
    turn_index: int
    prompt: Prompt
    output_length: int
    arrival_ms: Optional[float] = None
    delay_ms: Optional[float] = None
    output_token_ids: Optional[tuple[int, ...]] = None
    line: Optional[int] = None
    request_id: Optional[str] = None        # agentic node id (unique per workload)
    play_id: Optional[str] = None           # agentic trajectory ("play") it belongs to
    deps: tuple[Dependency, ...] = ()       # agentic: released when all are met
    priority: int = 0                       # KV router queue: score bump (seconds)
    strict_priority: int = 0                # KV router queue: served by higher class first

    @property
    def input_length(self) -> int:
        return self.prompt.length


@dataclass(frozen=True, slots=True)
class Session:
    """Turns released one after another (turn k+1 after turn k completes + its delay)."""

    session_id: str
    turns: tuple[Turn, ...]


KINDS = ("sessions", "agentic")
PROMPT_MODES = ("full", "delta")


@dataclass(frozen=True, slots=True)
class Workload:
    """All sessions of a run, in source order; ``source`` names where they came from.

    ``kind``: ``sessions`` (turns of a session run one after another) or ``agentic`` (each
    session is one node released by its dependencies).  ``prompt_mode``: ``full`` (each
    turn's prompt is complete) or ``delta`` (a turn's prompt is only what it adds to the
    session's history of prompts and generated outputs).
    """

    sessions: tuple[Session, ...]
    source: str = ""
    meta: dict = field(default_factory=dict)
    kind: str = "sessions"
    prompt_mode: str = "full"

    @property
    def num_requests(self) -> int:
        return sum(len(s.turns) for s in self.sessions)
