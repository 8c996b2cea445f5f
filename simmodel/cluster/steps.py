"""Handoff steps a worker applies between its passes (reference §6: a disaggregated
handoff reserves, activates and releases at pass boundaries).

A step is a callable run on the worker when no pass is in flight.  ``BoundarySteps`` keeps
the steps a worker owes, in three named queues:

============  ==================================================  =========================
queue         when its steps run                                  filled by
============  ==================================================  =========================
``commands``  now if no pass is in flight, else at the end of the  ``command``
              pass in flight (a coalesced decode run is cut there)
``hooks``     at that same boundary, after its commands            ``at_boundary``,
                                                                   ``at_this_boundary``
``next``      at the end of the worker's next pass, after that     ``after_next_pass``
              boundary's commands (or once it has no pass to run)
============  ==================================================  =========================

Before any step runs, the worker takes what reached its inbox (``take``), so a step sees
every request routed so far; after a step that ran at once, the worker is woken (``wake``),
since the step may have given it work.
"""
from __future__ import annotations


class BoundarySteps:
    """The handoff steps one worker owes (see the module docstring)."""

    __slots__ = ("_idle", "_take", "_wake", "commands", "hooks", "next", "applying")

    def __init__(self, idle, take, wake):
        self._idle = idle                 # callable() -> no pass in flight now
        self._take = take                 # callable(): take the inbox
        self._wake = wake                 # callable(): wake the worker if it waits
        self.commands: list = []
        self.hooks: list = []
        self.next: list = []
        self.applying = False             # inside ``apply`` (a boundary being settled)

    def command(self, fn) -> None:
        """Run ``fn()`` now if no pass is in flight, else at the end of the pass in flight."""
        self._now_or(fn, self.commands)

    def at_boundary(self, fn) -> None:
        """Run ``fn()`` at the end of the pass in flight, after that boundary's commands
        (now if no pass is in flight)."""
        self._now_or(fn, self.hooks)

    def _now_or(self, fn, queue: list) -> None:
        if self._idle():
            self._take()
            fn()
        else:
            queue.append(fn)
        self._wake()

    def at_this_boundary(self, fn) -> None:
        """Run ``fn()`` after the commands of the boundary being settled (the pass end
        being processed now, or now if the worker is idle)."""
        self.hooks.append(fn)
        self._wake()

    def after_next_pass(self, fn) -> None:
        """Run ``fn()`` at the end of the worker's next pass, after that boundary's
        commands (or as soon as it has no pass to run)."""
        self.next.append(fn)

    def due(self) -> bool:
        """Steps are owed at this boundary."""
        return bool(self.commands or self.hooks)

    def pending(self) -> bool:
        return bool(self.commands or self.hooks or self.next)

    def apply(self) -> None:
        """Run the steps owed at this boundary: commands, then hooks (a step may add
        more; they run too)."""
        self._take()
        self.applying = True
        while self.commands or self.hooks:
            while self.commands:
                cmds, self.commands = self.commands, []
                for fn in cmds:
                    fn()
            hooks, self.hooks = self.hooks, []
            for fn in hooks:
                fn()
        self.applying = False

    def apply_next(self) -> None:
        """No pass to run: the steps waiting for the next pass end run now."""
        self.hooks, self.next = self.next, []
        self.apply()

    def start_pass(self) -> list:
        """A pass starts: the steps waiting for its end (returned, to be owed at its end
        ahead of the hooks added meanwhile, ``end_pass``)."""
        promoted, self.next = self.next, []
        return promoted

    def end_pass(self, promoted: list) -> None:
        self.hooks = promoted + self.hooks
