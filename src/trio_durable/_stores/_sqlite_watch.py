"""Announcements through a SQLite file: how the processes sharing it learn
of each other's writes at once.

A writer adds an `Announce` as a row of ``announcements`` in the
transaction of its batch, so it is seen exactly when the batch is. A watch
holds a connection of its own and asks ``PRAGMA data_version`` every
``watch_interval`` (10 ms by default): the number changes when any other
connection commits, which costs the watch no read of the tables. Only then
does it read the rows past the last id it saw, and deliver those of other
writers. Writers trim the table to its newest `KEEP` rows (every
`TRIM_EVERY` rows they add); a watch that finds rows gone that it never saw
says so (``deliver(None)``), and its engine rescans.

The watch's looking runs in a worker thread, with real sleeps, never on
the Trio thread: a watch waiting on a short Trio timer would keep a
`trio.testing.MockClock` moving, and a 30-day timer would cost millions of
looks. Under a clock other than Trio's own the store keeps off threads
altogether (see `._sqlite`), and so does its watch: it hears only the
stores of this process on the same file (`local_watches`), which hand
their announcements over as they commit, as the memory store does; virtual
time then never depends on when a thread answers.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any, Final

import trio

from .._base._exceptions import StoreError
from ._ops import Announce
from ._sqlite_schema import BUSY_TIMEOUT
from ._watch import Deliver, LocalWatches

KEEP: Final = 10_000
"""How many of the newest announcements the table keeps (at least)."""

TRIM_EVERY: Final = 256
"""Announcements between two trims of the table."""

_INSERT: Final = (
    "INSERT INTO announcements (run_id, kind, workflow, version, origin) VALUES (?, ?, ?, ?, ?)"
)
# A range of the primary key.
_TRIM: Final = "DELETE FROM announcements WHERE id <= last_insert_rowid() - ?"
_SINCE: Final = (
    "SELECT id, run_id, kind, workflow, version, origin FROM announcements WHERE id > ? ORDER BY id"
)


_IN_PROCESS: dict[str, LocalWatches] = {}


def local_watches(path: str) -> LocalWatches:
    """The watchers, in this process, of the SQLite file at ``path``."""
    return _IN_PROCESS.setdefault(os.path.abspath(path), LocalWatches())


def write_announcement(cur: sqlite3.Cursor, op: Announce) -> None:
    """Apply an `Announce` (inside its batch's transaction)."""
    cur.execute(_INSERT, (op.run_id, op.kind, op.workflow, op.version, op.origin))
    # Trimmed now and then, not at every insert: a run's end is announced,
    # and a statement more per run shows in the engine's throughput.
    if cur.lastrowid is not None and cur.lastrowid % TRIM_EVERY == 0:
        cur.execute(_TRIM, (KEEP,))


def _connect(path: str) -> tuple[sqlite3.Connection, int]:
    """The watch's own connection, and the newest announcement's id."""
    connection = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
    )
    try:
        (last,) = connection.execute("SELECT coalesce(max(id), 0) FROM announcements").fetchone()
    except BaseException:
        connection.close()
        raise
    return connection, int(last)


def _look(
    connection: sqlite3.Connection,
    origin: str,
    last: int,
    interval: float,
    stop: threading.Event,
) -> tuple[int, list[Announce], bool] | None:
    """Wait (in a worker thread) until other writers announced something;
    return the last id seen, their announcements and whether some were
    missed; None once ``stop`` is set."""
    version = -1
    while True:
        (now,) = connection.execute("PRAGMA data_version").fetchone()
        if now != version:
            version = now
            rows: list[Any] = connection.execute(_SINCE, (last,)).fetchall()
            if rows:
                missed = rows[0][0] != last + 1
                last = rows[-1][0]
                found = [
                    Announce(run_id=run_id, kind=kind, workflow=wf, version=ver, origin=writer)
                    for _, run_id, kind, wf, ver, writer in rows
                    if writer != origin
                ]
                if found or missed:
                    return last, found, missed
        if stop.wait(interval):
            return None


async def watch_sqlite(
    path: str,
    interval: float,
    origin: str,
    deliver: Deliver,
    task_status: trio.TaskStatus[None],
) -> None:
    """`RunWatch.watch` of the SQLite store at ``path``."""
    limiter = trio.CapacityLimiter(1)
    try:
        connection, last = await trio.to_thread.run_sync(_connect, path, limiter=limiter)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot watch the SQLite store {path!r}: {exc}") from exc
    stop = threading.Event()
    try:
        task_status.started()
        async with trio.open_nursery() as nursery:
            # The thread cannot be cancelled: on cancellation this sets
            # `stop`, and the thread returns within one interval.
            nursery.start_soon(_stop_when_cancelled, stop)
            while True:
                try:
                    looked = await trio.to_thread.run_sync(
                        _look, connection, origin, last, interval, stop, limiter=limiter
                    )
                except sqlite3.Error as exc:
                    raise StoreError(f"watching the SQLite store {path!r} failed: {exc}") from exc
                if looked is None:
                    break
                last, found, missed = looked
                if found:
                    deliver(found)
                if missed:
                    deliver(None)
            nursery.cancel_scope.cancel()
    finally:
        stop.set()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(connection.close, limiter=limiter)


async def _stop_when_cancelled(stop: threading.Event) -> None:
    try:
        await trio.sleep_forever()
    finally:
        stop.set()
