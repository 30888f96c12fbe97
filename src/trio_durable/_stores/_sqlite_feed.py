"""What a SQLite file tells this process's engines when it is this
process's alone: when a run may have come due sooner, or stalled (the
store's `DueFeed`).

Under a clock other than Trio's own, a `SQLiteStore` runs every query on
the Trio thread and its watch hears only the stores of this process on the
same file (see `._sqlite` and `._sqlite_watch`): as for a memory store,
every write the engines can act on passes through a store of this process.
So instead of scanning the file every ``reconcile_interval`` (a 30-day
timer under `trio.testing.MockClock` would cost 43,200 scans, each a stop
of the autojump clock), their poller and reconcile pass wait on the file's
`LocalFeed`, which the store that commits a write trip tells at once, in
the same synchronous call:

- due watchers: each waits for a run due before a time; after a commit, one
  indexed read (``MIN(due_at)``) says which are set. A watcher is checked
  when it is made too, so a write committed between the poller's read of
  the next due time and its wait is not missed.
- the stall event: set by every committed write trip (it may have suspended
  a run with no wake time, or settled what one waits for), so the
  reconcile pass looks ``reconcile_interval`` after activity, never while
  the file is idle.

Under Trio's own clock none of this exists: other processes may write the
file, and engines scan it as a safety net (docs/operations.md).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Final, final

import trio

_MIN_DUE: Final = "SELECT MIN(due_at) FROM runs WHERE due_at IS NOT NULL"
# Reads the partial index `runs_waiting` alone.
_UNWOKEN: Final = "SELECT count(*) FROM runs WHERE status = 'suspended' AND wake_at IS NULL"


def earliest_due(cur: sqlite3.Cursor) -> float | None:
    """When the first run of the file is due (None: none is)."""
    due: float | None = cur.execute(_MIN_DUE).fetchone()[0]
    return due


def unwoken_count(cur: sqlite3.Cursor) -> int:
    """How many runs of the file are suspended with no wake time."""
    count: int = cur.execute(_UNWOKEN).fetchone()[0]
    return count


@final
class LocalFeed:
    """The due watchers and the stall event of one SQLite file, shared by
    the stores of this process that have it open under a clock other than
    Trio's own."""

    def __init__(self) -> None:
        self._due_watchers: list[tuple[float, trio.Event]] = []
        self._stall = trio.Event()

    def due_event(self, cur: sqlite3.Cursor, before: float) -> trio.Event:
        """An event set when a run of the file is due earlier than
        ``before`` (at once if one is). Set it once no longer waited for:
        the feed then drops it."""
        event = trio.Event()
        self._due_watchers = [w for w in self._due_watchers if not w[1].is_set()]
        try:
            due = earliest_due(cur)
        except sqlite3.Error:
            # The store is closed or broken: let the waiter look, and meet
            # the error in its own read.
            event.set()
            return event
        if due is not None and due < before:
            event.set()
        else:
            self._due_watchers.append((before, event))
        return event

    def stall_event(self) -> trio.Event:
        """An event set by the next committed write trip."""
        return self._stall

    def committed(self, cur: sqlite3.Cursor) -> None:
        """A store of the file committed a write trip (called on the Trio
        thread, right after the commit, with that store's cursor)."""
        self._stall.set()
        self._stall = trio.Event()
        watchers = [w for w in self._due_watchers if not w[1].is_set()]
        self._due_watchers = watchers
        if not watchers:
            return
        try:
            due = earliest_due(cur)
        except sqlite3.Error:
            due = -float("inf")
        if due is None:
            return
        keep = []
        for before, event in watchers:
            if due < before:
                event.set()
            else:
                keep.append((before, event))
        self._due_watchers = keep


_FEEDS: dict[str, LocalFeed] = {}


def local_feed(path: str) -> LocalFeed:
    """The feed, in this process, of the SQLite file at ``path``."""
    return _FEEDS.setdefault(os.path.abspath(path), LocalFeed())
