"""The callers waiting for runs to end, or to write what they read.

A turn that ends a run tells its waiters the row it wrote (`Endings.ended`),
so they need not read it back; waiters of runs that end elsewhere are woken
by the store's announcements (see `_wakes`) or read the store again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import attrs
import trio

from .._base._records import Run


@attrs.define(eq=False)
class Ending:
    """Callers of `Engine.result` waiting for a run this engine may end."""

    event: trio.Event = attrs.field(factory=trio.Event)
    run: Run | None = None


@final
class Endings:
    """The runs callers of `Engine.result` wait on, by run id.

    A turn that ends a run tells its waiters the row it wrote, so they need
    not read it back; waiters of runs that end elsewhere poll the store.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, Ending] = {}
        # Set once the engine or client closed: what registering raises.
        self._closed: Callable[[], Exception] | None = None

    def register(self, run_id: str) -> Ending:
        """The registration to wait on for ``run_id`` (shared by its waiters).

        Raises:
          Exception: What `close` was given, once it was called.
        """
        if self._closed is not None:
            raise self._closed()
        return self._waiting.setdefault(run_id, Ending())

    def close(self, error: Callable[[], Exception]) -> None:
        """The engine or client closed: nothing tells its waiters anything
        any more (its watch and its turns are gone), so wake them all, and
        have them, and any caller after them, raise ``error()`` as they
        register again instead of waiting for ever."""
        self._closed = error
        self.recheck()

    def forget(self, run_id: str, ending: Ending) -> None:
        """Drop a registration nobody will set (the run ended elsewhere, or
        does not exist); its other waiters wake and read the row too."""
        if not ending.event.is_set() and self._waiting.get(run_id) is ending:
            del self._waiting[run_id]
            ending.event.set()

    def recheck(self) -> None:
        """Wake every waiter to read its run again (an end may have gone
        unannounced)."""
        waiting, self._waiting = self._waiting, {}
        for ending in waiting.values():
            ending.event.set()

    def changed(self, run_id: str) -> None:
        """A run wrote something its waiters read (a published value, an
        update's outcome): wake them to read again."""
        ending = self._waiting.pop(run_id, None)
        if ending is not None:
            ending.event.set()

    def ended(self, run_id: str, run: Run | None = None) -> None:
        """``run_id`` ended here: wake its waiters, with the row written
        (None: they read it)."""
        ending = self._waiting.pop(run_id, None)
        if ending is not None:
            ending.run = run
            ending.event.set()
