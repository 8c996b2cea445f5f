"""Prompt value types the engine reads and the workload builds.  Pure.

A neutral home: the engine (token hashing, SGLang's radix segments) tells the two prompt
forms apart, and the workload (``simmodel.workload.model``, which re-exports ``RunPrompt``)
and the cluster's driver build them, so neither side imports the other for it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunPrompt:
    """Token content as explicit runs ``(token_id, count)`` (adjacent runs may repeat an
    id); used for prompts built during the run (delta-cumulative sessions)."""

    runs: tuple[tuple[int, int], ...]
    length: int
