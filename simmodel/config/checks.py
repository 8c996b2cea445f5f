"""Value checks shared by the config dataclasses, and the size limits.

``ConfigError`` is what every ``__post_init__`` raises: a key path (relative to the
section that raised it; ``simmodel.scenario`` prefixes the enclosing sections) and a
message.  The helpers below check one value each and word their messages alike.
"""
from __future__ import annotations

import math

# Size limits, checked before anything is built (docs/model.md, "Size limits"): far
# beyond any real deployment, small enough that a run of that size can be held.
MAX_WORKERS = 100_000            # scheduler ranks per pool (workers x dp_size)
MAX_DP_SIZE = 1_024
MAX_GPU_BLOCKS = 1_000_000_000   # KV blocks per rank
MAX_REQUEST_TOKENS = 10_000_000  # prompt or output tokens of one request
MAX_SYNTHETIC_REQUESTS = 10_000_000


class ConfigError(ValueError):
    """A user mistake in a scenario: ``key`` is the dotted path of the offending value."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

    def under(self, prefix: str) -> "ConfigError":
        """The same error with its key path prefixed by the enclosing section."""
        return ConfigError(f"{prefix}.{self.key}" if self.key else prefix, self.message)


def positive_int(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(key, f"must be a positive integer, got {value!r}")


def non_negative_int(key: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, f"must be a non-negative integer, got {value!r}")


def positive_number(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(key, f"must be a positive number, got {value!r}")


def non_negative_number(key: str, value, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0):
        raise ConfigError(key, f"must be a non-negative number, got {value!r}")


def choice(key: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(key, f"must be one of {', '.join(choices)}; got {value!r}")


def at_most(key: str, value, limit: int, what: str) -> None:
    if value is not None and value > limit:
        raise ConfigError(key, f"{value!r} is more than the limit of {limit:,} {what}")


def boolean(key: str, value) -> None:
    if not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, got {value!r}")
