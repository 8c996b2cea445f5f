"""Progress bars for long runs on a terminal, drawn with `tqdm <https://tqdm.github.io>`_.

:class:`ProgressLine` is the ``progress(now_ms, done, total)`` callback of
``simmodel.run``.  It draws nothing during the first ``delay_s`` seconds of wall time
(default :data:`DELAY_S`; a short run stays silent), then shows a tqdm bar of the requests
done out of the total, with the simulated time as a postfix, for example::

     41%|####1     | 16400/40000 [00:02<00:02, 8200.00req/s, sim=812.5s]

``close()`` ends the line (tqdm's final redraw and a newline) only if it was ever drawn.

:func:`run_bar` is a plain tqdm bar over a count of runs (for ``simmodel sweep``).

Use :func:`progress_line` / :func:`run_bar` to get one only when it should be shown (not
quiet, and the stream is a terminal), so output redirected to a file or a pipe never holds
progress text.  tqdm is imported only when a bar is drawn, so a run that shows none (a short
run, ``--quiet``, a redirected stream) never loads it.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Optional, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

#: Seconds of wall time before the bar first appears (read when a ProgressLine is made).
DELAY_S = 1.0


class ProgressLine:
    """Show ``progress(now_ms, done, total)`` calls on ``stream`` as a tqdm bar.

    The tqdm bar is created lazily, on the first call at least ``delay_s`` seconds (by
    ``clock``) after this object was made, so nothing at all is written before that.  Its
    count starts at the requests already done then, so the elapsed time and the rate it
    shows are measured from when it appeared.
    """

    def __init__(self, stream: TextIO, *, delay_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.clock = clock
        self.start = clock()
        self.bar: Optional[tqdm] = None     # the tqdm bar, once shown
        self.closed = False

    @property
    def drawn(self) -> bool:
        """Whether the bar has been shown (and so is on the screen)."""
        return self.bar is not None

    def __call__(self, now_ms: float, done: int, total: int) -> None:
        if self.closed:
            return
        postfix = f"sim={now_ms / 1000.0:.1f}s"
        if self.bar is None:
            if self.clock() - self.start < self.delay_s:
                return
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=done, file=self.stream, unit="req",
                            dynamic_ncols=True, leave=True, miniters=0,
                            postfix=postfix)          # draws the first frame
            return
        if total != self.bar.total:
            self.bar.total = total
        self.bar.set_postfix_str(postfix, refresh=False)
        # miniters=0: every call may redraw (so the simulated time keeps moving even when
        # no request ends), at most once per tqdm ``mininterval``.
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        """End the bar (a final redraw and a newline) if it was drawn; safe to call more
        than once.  Later calls of the object draw nothing."""
        self.closed = True
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (False if it cannot tell)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):    # no isatty, or a closed stream
        return False


def progress_line(stream: TextIO, *, quiet: bool = False, delay_s: Optional[float] = None,
                  clock: Callable[[], float] = time.monotonic) -> Optional[ProgressLine]:
    """A :class:`ProgressLine` on ``stream``, or None when quiet or ``stream`` is not a
    terminal.  ``delay_s`` defaults to :data:`DELAY_S` (read now)."""
    if quiet or not is_terminal(stream):
        return None
    return ProgressLine(stream, delay_s=delay_s, clock=clock)


def run_bar(total: int, stream: TextIO, *, quiet: bool = False,
            desc: Optional[str] = None) -> Optional[tqdm]:
    """A tqdm bar over ``total`` runs on ``stream`` (``unit="run"``), or None when quiet
    or ``stream`` is not a terminal.

    It is shown at once (``0/total``).  The caller calls ``bar.update(1)`` after each run
    (and may ``bar.set_postfix_str(...)`` to name the current point), then
    ``bar.close()``, which leaves the final line and a newline; the bar also works as a
    context manager.  ``desc`` is an optional label before the bar (e.g. ``"sweep"``)::

        bar = run_bar(len(points), sys.stderr, quiet=args.quiet, desc="sweep")
        try:
            for point in points:
                ...                      # run one point
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
    """
    if quiet or not is_terminal(stream):
        return None
    from tqdm import tqdm
    return tqdm(total=total, file=stream, unit="run", desc=desc, dynamic_ncols=True,
                leave=True)
