"""Small matplotlib helpers shared by the plot modules (pyplot imported lazily)."""
from __future__ import annotations

TIME_LABEL = "simulated time (ms)"

_UNIT_SUFFIXES = (("_tok_s", "tok/s"), ("_rps", "req/s"), ("_ms", "ms"), ("_s", "s"))


def new_axis(ax=None):
    """``ax`` itself, or the axis of a new pyplot figure when ``ax`` is None."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt
    _, ax = plt.subplots()
    return ax


def color(i: int) -> str:
    """The i-th colour of the default property cycle ("C0", "C1", ...)."""
    return f"C{i % 10}"


def key_label(key: str) -> str:
    """An axis label for a summary key: ``p99_ttft_ms`` → ``p99 ttft (ms)``."""
    for suffix, unit in _UNIT_SUFFIXES:
        if key.endswith(suffix):
            return f"{key[: -len(suffix)].replace('_', ' ')} ({unit})"
    return key.replace("_", " ")
