"""A worker's inbox: how work reaches a worker process.

Routers put requests into it (``Worker.submit``); handoff steps put a :data:`WAKE` note
when they may have given an idle worker work (``wake``).  The worker takes everything in
it whenever it acts (``take``: woken from idle, at a pass end before settling, before a
handoff step runs), into its scheduler's queue, so the scheduler sees requests in routing
order, as at the instant they were routed.
"""
from __future__ import annotations

import simpy


#: The note a handoff step puts in an inbox: "something changed, look again".
WAKE = object()


class Inbox(simpy.Store):
    """A worker's inbox: an unbounded FIFO ``simpy.Store`` of requests and wake-up notes.

    One documented change: ``put`` creates no event.  Nothing ever waits for a put into
    an unbounded store, and an event per routed request would be due at the routing
    instant, where one instant's order is exact (``cluster.phases``: a worker forms its
    batch at once when nothing else is due now).  An item goes to the worker's pending
    ``get`` if it waits (that event is processed in ``Phase.NORMAL``, as any wake-up),
    else into ``items``."""

    def __init__(self, env: simpy.Environment, sink):
        super().__init__(env)
        self._sink = sink                 # callable(request): the scheduler's enqueue
        self._get = None                  # the get the worker's process waits on
        self._got = False                 # ... whose item was already taken

    def put(self, item) -> None:          # type: ignore[override]
        if self.get_queue:
            self.get_queue.pop(0).succeed(item)
        else:
            self.items.append(item)

    def wake(self) -> None:
        """If the worker waits on its inbox, wake it (something may have changed)."""
        get = self._get
        if get is not None and not get.triggered:
            self.put(WAKE)

    def take(self) -> None:
        """Hand every request in the inbox (and one a triggered get carries) to the sink,
        in routing order."""
        get = self._get
        if get is not None and get.triggered and not self._got:
            self._got = True
            self._hand(get.value)
        items = self.items
        if items:
            for item in items:
                self._hand(item)
            items.clear()

    def _hand(self, item) -> None:
        if item is not WAKE:
            self._sink(item)

    def wait(self, other=None):
        """(A process step) wait until the inbox gets something, or ``other`` fires, and
        take what it got; returns that item (None: ``other`` fired first)."""
        get = self._get = self.get()
        self._got = False
        yield get if other is None else other | get
        self._get = None
        if get.triggered:
            if not self._got:
                self._hand(get.value)
            return get.value
        get.cancel()
        return None

    def abandon(self) -> None:
        """Its worker failed: forget what it holds and the get its process waited on."""
        get = self._get
        if get is not None and not get.triggered:
            get.cancel()
        self._get = None
        self.items.clear()

    def requests(self) -> int:
        """Requests in the inbox, not yet taken."""
        return sum(1 for item in self.items if item is not WAKE)
