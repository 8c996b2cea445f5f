"""``faults`` and ``retry``: failing workers and links, stragglers, and what becomes of the
requests a failure loses (docs/faults.md).

A fault is one mapping of ``faults:`` with a ``kind``:

==========  ===========================================================================
kind        keys
==========  ===========================================================================
``fail``    ``at_ms``; ``worker: i`` or ``count: n`` (any n of the pool, seeded
            choice); ``pool: prefill|decode`` in a disaggregated cluster; ``repair_ms``
            (omitted: down until the end)
``random``  ``mtbf_s``, ``mttr_s``: every worker fails and is repaired at exponential
            intervals (stream ``faults``); ``pool`` limits it to one pool
``link``    ``at_ms``, ``duration_ms``, ``bandwidth_factor`` (0 < f <= 1): every KV
            transfer link carries ``f`` of its bandwidth in the window
``slow``    ``at_ms``, ``duration_ms``, ``worker`` (+ ``pool``), ``factor`` (>= 1): the
            worker's passes that start in the window take ``factor`` times as long
==========  ===========================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from simmodel.config.checks import (ConfigError, choice, non_negative_int, non_negative_number,
                                    positive_int, positive_number)

FAULT_KINDS = ("fail", "random", "link", "slow")
POOLS = ("prefill", "decode")
#: Keys each kind takes (besides ``kind``), the first ones required.
_KEYS = {
    "fail": (("at_ms",), ("worker", "count", "pool", "repair_ms")),
    "random": (("mtbf_s", "mttr_s"), ("pool",)),
    "link": (("at_ms", "duration_ms", "bandwidth_factor"), ()),
    "slow": (("at_ms", "duration_ms", "worker", "factor"), ("pool",)),
}
_ALL_KEYS = ("at_ms", "worker", "count", "pool", "repair_ms", "mtbf_s", "mttr_s",
             "duration_ms", "bandwidth_factor", "factor")


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """One entry of ``faults:`` (see the module docstring for the keys of each kind)."""

    kind: str
    at_ms: Optional[float] = None
    worker: Optional[int] = None
    count: Optional[int] = None
    pool: Optional[str] = None
    repair_ms: Optional[float] = None
    mtbf_s: Optional[float] = None
    mttr_s: Optional[float] = None
    duration_ms: Optional[float] = None
    bandwidth_factor: Optional[float] = None
    factor: Optional[float] = None

    def __post_init__(self):
        choice("kind", self.kind, FAULT_KINDS)
        required, optional = _KEYS[self.kind]
        for key in _ALL_KEYS:
            given = getattr(self, key) is not None
            if key in required and not given:
                raise ConfigError(key, f"required for kind {self.kind!r}")
            if given and key not in required and key not in optional:
                raise ConfigError(key, f"not a key of kind {self.kind!r}; its keys: "
                                  f"{', '.join(required + optional)}")
        self._check_values()

    def _check_values(self) -> None:
        non_negative_number("at_ms", self.at_ms, allow_none=True)
        if self.worker is not None:
            non_negative_int("worker", self.worker)
        positive_int("count", self.count, allow_none=True)
        if self.pool is not None:
            choice("pool", self.pool, POOLS)
        for key in ("repair_ms", "mtbf_s", "mttr_s", "duration_ms"):
            positive_number(key, getattr(self, key), allow_none=True)
        if self.kind == "fail" and (self.worker is None) == (self.count is None):
            raise ConfigError("worker", "give exactly one of worker and count")
        if self.bandwidth_factor is not None:
            positive_number("bandwidth_factor", self.bandwidth_factor)
            if self.bandwidth_factor > 1:
                raise ConfigError("bandwidth_factor",
                                  f"must be in (0, 1], got {self.bandwidth_factor!r}")
        if self.factor is not None:
            positive_number("factor", self.factor)
            if self.factor < 1:
                raise ConfigError("factor", f"must be at least 1, got {self.factor!r}")

    @property
    def is_noop(self) -> bool:
        """A straggler of factor 1 or a link kept at full bandwidth changes nothing."""
        return (self.kind == "slow" and self.factor == 1.0) or (
            self.kind == "link" and self.bandwidth_factor == 1.0)


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """``retry``: a request a failure loses is sent again after ``backoff_ms x
    backoff_factor^(k-1)`` (its k-th retry), prompt recomputed, until it has had
    ``max_attempts`` attempts; then it ends as ``failed``."""

    max_attempts: int = 3
    backoff_ms: float = 200.0
    backoff_factor: float = 2.0

    def __post_init__(self):
        positive_int("max_attempts", self.max_attempts)
        non_negative_number("backoff_ms", self.backoff_ms)
        positive_number("backoff_factor", self.backoff_factor)

    def backoff(self, retry: int) -> float:
        """The wait before the ``retry``-th retry (1-based)."""
        return self.backoff_ms * self.backoff_factor ** (retry - 1)


def check_faults(faults: tuple, disaggregated: bool, pool_sizes: dict) -> None:
    """The rules between ``faults`` and the cluster: ``pool`` given exactly in a
    disaggregated cluster (for the kinds that name workers), worker indices and counts
    within the pool, link faults only where there are KV transfers."""
    windows = []
    for i, f in enumerate(faults):
        key = f"faults[{i}]"
        if not isinstance(f, FaultConfig):
            raise ConfigError(key, "must be a mapping")
        if f.kind == "link":
            if not disaggregated:
                raise ConfigError(f"{key}.kind", "link faults need a disaggregated cluster "
                                  "(KV transfers)")
            windows.append((f.at_ms, f.at_ms + f.duration_ms, key))
            continue
        if disaggregated and f.pool is None and f.kind != "random":
            raise ConfigError(f"{key}.pool", "required in a disaggregated cluster "
                              "(prefill or decode)")
        if not disaggregated and f.pool is not None:
            raise ConfigError(f"{key}.pool", "only in a disaggregated cluster")
        size = pool_sizes[f.pool or "decode"]
        if f.worker is not None and f.worker >= size:
            raise ConfigError(f"{key}.worker", f"{f.worker} is not a worker of the pool "
                              f"(it has {size}: 0..{size - 1})")
        if f.count is not None and f.count > size:
            raise ConfigError(f"{key}.count", f"{f.count} is more than the pool's {size} "
                              "workers")
    windows.sort()
    for (_, end, _), (start, _, key) in zip(windows, windows[1:]):
        if start < end:
            raise ConfigError(f"{key}.at_ms", "link faults must not overlap in time")
