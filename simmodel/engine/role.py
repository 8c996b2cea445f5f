"""A worker's role as the engine sees it: what its passes pay for and what it holds.  Pure.

Fixed when a scheduler is built (from the config's role name), so no pass branches on a
name: an aggregated worker prefills and decodes; a disaggregated prefill worker only
prefills, and holds each finished prompt as the source of its KV transfer; a decode
worker only decodes, and receives its prompts' KV by transfer.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Role:
    """What a worker of this role does."""

    name: str
    prefills: bool          # its passes pay the prefill term (P)
    decodes: bool           # its passes pay the decode term (D); speculative decoding
    holds_source: bool      # a finished prompt is held until its transfer ends
    receives_prompts: bool  # prompts arrive by KV transfer (reserved, then activated)


AGGREGATED = Role("aggregated", prefills=True, decodes=True, holds_source=False,
                  receives_prompts=False)
PREFILL = Role("prefill", prefills=True, decodes=False, holds_source=True,
               receives_prompts=False)
DECODE = Role("decode", prefills=False, decodes=True, holds_source=False,
              receives_prompts=True)
ROLES = {r.name: r for r in (AGGREGATED, PREFILL, DECODE)}


def role_of(role: str | Role) -> Role:
    """The ``Role`` of a config role name (``aggregated`` | ``prefill`` | ``decode``)."""
    if isinstance(role, Role):
        return role
    try:
        return ROLES[role]
    except KeyError:
        raise ValueError(f"unknown worker role {role!r}; valid: {', '.join(ROLES)}") from None
