"""A one-line progress display for long runs on a terminal.

``ProgressLine`` is the ``progress(now_ms, done, total)`` callback of ``simmodel.run``.
It writes nothing during the first ``delay_s`` seconds of wall time (default
:data:`DELAY_S`; a short run stays silent), then redraws one line in place with ``\\r``, for example::

    [########............]  41.0%  16,400/40,000 requests  sim 812.5 s

``close()`` ends the line with a newline if anything was drawn.  Use
:func:`progress_line` to get one only when it should be shown (not quiet, and the stream
is a terminal), so output redirected to a file or a pipe never holds progress text.
"""
from __future__ import annotations

import time
from typing import Callable, Optional, TextIO

BAR_WIDTH = 20
#: Seconds of wall time before the line first appears (read when a line is made).
DELAY_S = 1.0


class ProgressLine:
    """Draw ``progress(now_ms, done, total)`` calls on ``stream`` as one redrawn line."""

    def __init__(self, stream: TextIO, *, delay_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.clock = clock
        self.start = clock()
        self.drawn = 0            # length of the line on screen (0: nothing drawn yet)

    def __call__(self, now_ms: float, done: int, total: int) -> None:
        if self.clock() - self.start < self.delay_s:
            return
        text = render(now_ms, done, total)
        # Pad with spaces so a shorter line fully covers the previous one.
        self.stream.write("\r" + text.ljust(self.drawn))
        self.stream.flush()
        self.drawn = max(self.drawn, len(text))

    def close(self) -> None:
        """Finish the line (a newline) if one was drawn; safe to call more than once."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = 0


def render(now_ms: float, done: int, total: int) -> str:
    """The progress text (no ``\\r``): a bar, the percentage of requests done, the
    counts and the simulated time in seconds.  With no requests, the bar is full."""
    fraction = min(max(done / total, 0.0), 1.0) if total > 0 else 1.0
    filled = int(fraction * BAR_WIDTH)
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return (f"[{bar}] {fraction * 100:5.1f}%  {done:,}/{total:,} requests  "
            f"sim {now_ms / 1000.0:,.1f} s")


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (False if it cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):    # no isatty, or a closed stream
        return False


def progress_line(stream: TextIO, *, quiet: bool = False, delay_s: Optional[float] = None,
                  clock: Callable[[], float] = time.monotonic) -> Optional[ProgressLine]:
    """A ``ProgressLine`` on ``stream``, or None when quiet or ``stream`` is not a
    terminal."""
    if quiet or not is_terminal(stream):
        return None
    return ProgressLine(stream, delay_s=delay_s, clock=clock)
