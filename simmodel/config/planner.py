"""``planner``: scaling workers in simulated time (the policies themselves, built-in or a
user's, live in ``simmodel.cluster.policies``; here only what a scenario says)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from simmodel.config.checks import (ConfigError, choice, non_negative_int, non_negative_number,
                                    positive_int, positive_number)

#: ``schedule`` and ``load`` are built in; ``python`` names a user's policy.
PLANNER_KINDS = ("schedule", "load", "python")


@dataclass(frozen=True, slots=True)
class ScheduleStep:
    """One step of a ``schedule`` planner: from ``at_ms`` on, these worker counts
    (``decode`` is the worker count of an aggregated cluster; unset: unchanged)."""

    at_ms: float
    decode: Optional[int] = None
    prefill: Optional[int] = None

    def __post_init__(self):
        non_negative_number("at_ms", self.at_ms)
        for key in ("decode", "prefill"):
            value = getattr(self, key)
            if value is not None:
                non_negative_int(key, value)
        if self.decode is None and self.prefill is None:
            raise ConfigError("decode", "a step needs decode and/or prefill")


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """``planner``: scale workers in simulated time (see ``simmodel.cluster.policies``).

    * ``kind: schedule`` — ``steps``: target counts from given times on;
    * ``kind: load`` — every ``interval_ms``, scale the decode pool (the only pool of an
      aggregated cluster) up when its KV usage exceeds ``kv_usage_high`` or the window's
      mean ITL exceeds ``itl_ms``, down when usage is below ``kv_usage_low`` and ITL well
      under target; scale prefill (aggregated: the same pool) up when queued prompt tokens
      per worker exceed ``queued_prefill_tokens`` or mean TTFT exceeds ``ttft_ms``; counts
      within ``min_*``/``max_*``, by ``step`` workers, at most one change per pool every
      ``cooldown_ms``.  ``ttft_ms``/``itl_ms`` default to the scenario's ``sla``;
    * ``kind: python`` — ``policy: "file.py:attribute"`` or ``"module:attribute"``, a
      policy object or a zero-argument factory of one, with ``initial_tick_ms()`` and
      ``on_tick(snapshot)``, from a ``.py`` file in the scenario's folder or below it
      (an installed module only on opt-in).  Here only the string's form is checked; the
      loader resolves it to a file (``simmodel.config.policy_ref``, nothing imported) and
      ``simmodel.cluster.policies`` runs it when the run starts.

    Ticks (``interval_ms``, schedule steps) are at least ``MIN_INTERVAL_MS`` apart.
    """

    MIN_INTERVAL_MS = 1.0       # not a field: the smallest tick / sample interval

    kind: str
    steps: tuple[ScheduleStep, ...] = ()
    policy: Optional[str] = None
    interval_ms: float = 1000.0
    min_decode: int = 1
    max_decode: int = 8
    min_prefill: int = 1
    max_prefill: int = 8
    step: int = 1
    cooldown_ms: float = 0.0
    kv_usage_high: float = 0.8
    kv_usage_low: float = 0.3
    queued_prefill_tokens: Optional[float] = None
    ttft_ms: Optional[float] = None
    itl_ms: Optional[float] = None
    base_dir: Optional[str] = None       # the scenario's folder (set by the loader)

    def __post_init__(self):
        choice("kind", self.kind, PLANNER_KINDS)
        self._check_kind_keys()
        self.check_interval("interval_ms", self.interval_ms)
        for key in ("min_decode", "min_prefill"):
            non_negative_int(key, getattr(self, key))
        for key in ("max_decode", "max_prefill", "step"):
            positive_int(key, getattr(self, key))
        if self.min_decode > self.max_decode:
            raise ConfigError("min_decode", "must not exceed max_decode")
        if self.min_prefill > self.max_prefill:
            raise ConfigError("min_prefill", "must not exceed max_prefill")
        non_negative_number("cooldown_ms", self.cooldown_ms)
        for key in ("kv_usage_high", "kv_usage_low"):
            v = getattr(self, key)
            non_negative_number(key, v)
            if v > 1:
                raise ConfigError(key, f"must be a fraction in [0, 1], got {v!r}")
        if self.kv_usage_low >= self.kv_usage_high:
            raise ConfigError("kv_usage_low", "must be below kv_usage_high")
        for key in ("queued_prefill_tokens", "ttft_ms", "itl_ms"):
            positive_number(key, getattr(self, key), allow_none=True)

    def _check_kind_keys(self) -> None:
        """``steps`` only for (and required by) a schedule, ``policy`` only for python."""
        if self.kind == "schedule":
            if not self.steps:
                raise ConfigError("steps", "a schedule planner needs at least one step")
            times = [s.at_ms for s in self.steps]
            if times != sorted(times) or len(set(times)) != len(times):
                raise ConfigError("steps", "at_ms must be strictly increasing")
            if any(b - a < self.MIN_INTERVAL_MS for a, b in zip(times, times[1:])):
                raise ConfigError("steps", f"at_ms must be at least "
                                           f"{self.MIN_INTERVAL_MS:g} ms apart")
        elif self.steps:
            raise ConfigError("steps", "only valid with kind: schedule")
        if self.kind == "python":
            if not isinstance(self.policy, str) or self.policy.count(":") != 1 \
                    or not all(self.policy.split(":")):
                raise ConfigError("policy", "must be 'file.py:attribute' or "
                                            f"'module:attribute', got {self.policy!r}")
        elif self.policy is not None:
            raise ConfigError("policy", "only valid with kind: python")

    @staticmethod
    def check_interval(key: str, value) -> None:
        """A tick or sample interval: positive and at least ``MIN_INTERVAL_MS`` (a
        smaller one would take practically forever to simulate)."""
        positive_number(key, value)
        if value < PlannerConfig.MIN_INTERVAL_MS:
            raise ConfigError(key, f"must be at least {PlannerConfig.MIN_INTERVAL_MS:g} ms "
                                   f"(the minimum interval), got {value!r}")
