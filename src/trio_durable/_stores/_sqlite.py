"""The SQLite store: one file, one connection, writes committed in groups.

sqlite3 blocks, so under Trio's own clock it never runs on the Trio thread:
every call goes to the store's own thread (`._store_thread.StoreThread`),
which runs them one at a time, in order, and so also serializes use of the
one connection.

Under any other clock (`trio.testing.MockClock` in tests, a simulation's
clock) every call runs on the Trio thread instead. While the Trio thread
waits for a worker thread, no task is runnable, so MockClock's autojump would
move virtual time on to the next deadline in the middle of a query: a timer
would fire before a write it should follow, a ``move_on_after`` would expire
before the first step ran. On the Trio thread a query takes no virtual time,
as a `MemoryStore` call does, so a workload gives the same virtual times on
both stores. Blocking the Trio thread for a query is harmless there: virtual
time does not move meanwhile. The choice is made once, when the store is
opened (a store belongs to one Trio run, and so to one clock).

Under such a clock the file is this process's alone (its watch hears the
stores of this process only), and the store offers `DueFeed`: it tells this
process's engines when a run may have come due sooner or stalled, right
after each commit, so their poller and reconcile pass never scan the file
on a timer (see `._sqlite_feed`). Under Trio's own clock its ``due_event``,
``unwoken_runs`` and ``unwoken_event`` are None.

Group commit (see `._group_commit`), one trip at a time: a trip runs the
reads first and then the writes inside ONE transaction, each write batch in
its own savepoint. A batch that fails (a `WriteConflict`, a `LeaseLostError`)
is rolled back to its savepoint alone and its caller gets that exception; the
others commit together, with one fsync. On the Trio thread (see above) a trip
is one synchronous call, which no other task can interleave with; its leader
first yields once, so that the jobs of tasks that are ready to run join its
trip, as they would join a trip waiting for the worker thread.

The operations are in `._sqlite_ops`; URL, connection and schema in
`._sqlite_schema`.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from functools import partial
from typing import Any, final

import trio

from .._base._exceptions import StoreError
from ._group_commit import GroupCommit, Job
from ._ops import Announce, Op
from ._sql_store import SQLStore
from ._sqlite_feed import local_feed, unwoken_count
from ._sqlite_ops import DIALECT
from ._sqlite_schema import WATCH_INTERVAL, connect, parse_url
from ._sqlite_watch import local_watches, watch_sqlite
from ._store_thread import StoreThread, open_store_thread
from ._watch import Deliver


def threads_keep_time() -> bool:
    """Whether sqlite3 calls may go to worker threads without moving the
    current Trio run's clock: only under Trio's own clock (see the module's
    docstring)."""
    # Trio gives its own clock's class no public name, and the private
    # module that holds it is Trio's to move: the class is known by its name
    # in the trio package instead. tests/test_sqlite_clock.py fails if this
    # stops telling Trio's clock from a test's.
    kind = type(trio.lowlevel.current_clock())
    return kind.__name__ == "SystemClock" and kind.__module__.partition(".")[0] == "trio"


def _store_error(error: BaseException) -> StoreError | None:
    # A value SQLite cannot hold (an integer past 64 bits, a string with a
    # lone surrogate) is refused as a store error too, never let out raw.
    if isinstance(error, sqlite3.Error | OverflowError | UnicodeEncodeError):
        return StoreError(f"SQLite store failed: {error}")
    return None


@final
class SQLiteStore(SQLStore[sqlite3.Cursor]):
    """A `Store` in one SQLite file, shared safely by processes on one host.

    Open it with `open_sqlite_store`; the constructor takes a connection that
    `open_sqlite_store` has prepared (pragmas set, schema checked).

    Attributes:
      path: The database file.
      synchronous: The ``PRAGMA synchronous`` the store runs with: ``"FULL"``
        (the default; a committed write survives a power cut) or ``"NORMAL"``
        (a power cut may lose the last commits, never corrupt the file).
      watch_interval: Seconds between two looks of `SQLiteStore.watch` for
        commits of other connections.
    """

    def __init__(
        self,
        connection: sqlite3.Connection,
        *,
        path: str,
        synchronous: str,
        watch_interval: float = WATCH_INTERVAL,
        thread: StoreThread | None = None,
    ) -> None:
        self.path = path
        self.watch_interval = watch_interval
        # Engines sharing this file share a results queue on the broker.
        self.scope = "sqlite-" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
        self.synchronous = synchronous
        self._connection = connection
        self._cursor = connection.cursor()
        # None under a clock other than Trio's own: then every call runs on
        # the Trio thread (see the module's docstring).
        self._thread = thread
        self._threads = thread is not None
        # Without threads, its watch hears this process's stores alone, and
        # it tells their engines of its changes itself (`DueFeed`).
        self._local = None if self._threads else local_watches(path)
        self._feed = None if self._threads else local_feed(path)
        self.due_event = None if self._feed is None else self._due_event
        self.unwoken_runs = None if self._feed is None else self._unwoken_runs
        self.unwoken_event = None if self._feed is None else self._feed.stall_event
        self._dialect = DIALECT
        self._commit = GroupCommit(
            self._trip,
            self._close,
            _store_error,
            max_trips=1,
            gather_first=not self._threads,
        )

    async def watch(
        self,
        origin: str,
        deliver: Deliver,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """See `RunWatch.watch`: announcements of other connections to this
        file, looked for every ``watch_interval`` (see `._sqlite_watch`);
        under a clock other than Trio's own, those of this process's stores
        alone."""
        if self._local is not None:
            await self._local.watch(origin, deliver, task_status=task_status)
        else:
            await watch_sqlite(self.path, self.watch_interval, origin, deliver, task_status)

    # `DueFeed`, under a clock other than Trio's own (see `._sqlite_feed`):
    # queries on the Trio thread, outside any trip (a trip there is one
    # synchronous call, so none is under way meanwhile).

    def _due_event(self, before: float) -> trio.Event:
        assert self._feed is not None
        return self._feed.due_event(self._cursor, before)

    def _unwoken_runs(self) -> int:
        try:
            return unwoken_count(self._cursor)
        except sqlite3.Error:
            # Closed or broken: the reconcile pass looks, and meets the
            # error in its own read.
            return 1

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        results = await super().apply(ops)
        if self._local is not None:
            announced = [op for op in ops if isinstance(op, Announce)]
            if announced:
                self._local.publish(announced)
        return results

    async def _close(self) -> None:
        try:
            if self._thread is not None:
                try:
                    await self._thread.run(self._connection.close)
                finally:
                    self._thread.close()
            else:
                self._connection.close()
        except sqlite3.Error as exc:
            raise StoreError(f"closing the SQLite store failed: {exc}") from exc

    async def _trip(self, jobs: list[Job[sqlite3.Cursor, Any]]) -> bool:
        if not self._threads:
            # One synchronous call: no other task runs, and virtual time
            # does not move, until the trip has committed and the engines
            # of this process were told (see `._sqlite_feed`).
            committed = self._run_trip(jobs)
            if committed and self._feed is not None:
                self._feed.committed(self._cursor)
            return committed
        # Shielded: once taken, the jobs must run (or fail) as a whole.
        assert self._thread is not None
        with trio.CancelScope(shield=True):
            committed = await self._thread.run(partial(self._run_trip, jobs))
        return committed

    def _run_trip(self, jobs: list[Job[sqlite3.Cursor, Any]]) -> bool:
        """Run a trip's jobs (in the worker thread, or on the Trio thread);
        return whether a transaction was committed."""
        cur = self._cursor
        if self._connection.in_transaction:
            # A trip whose COMMIT and ROLLBACK both failed left this behind;
            # without clearing it, every later BEGIN would fail too.
            with suppress(sqlite3.Error):
                cur.execute("ROLLBACK")
        # Reads go first, outside the write transaction: they see only
        # committed rows, so a commit that fails below cannot have shown them
        # anything, and a busy write lock does not hold them up.
        writes: list[Job[sqlite3.Cursor, Any]] = []
        for job in jobs:
            if job.writes:
                writes.append(job)
            else:
                job.run(cur)
        if not writes:
            return False
        try:
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in writes:
                job.fail(exc)
            return False
        try:
            useful = False
            for job in writes:
                cur.execute("SAVEPOINT batch")
                if job.run(cur):
                    useful = useful or job.counts is not None
                else:
                    cur.execute("ROLLBACK TO batch")
                cur.execute("RELEASE batch")
            if not useful:
                # Every batch failed or found nothing to do: nothing to keep,
                # and a rollback costs no fsync.
                cur.execute("ROLLBACK")
                return False
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            # The transaction broke as a whole (a full disk, an I/O error):
            # none of it was written, whatever each batch returned.
            for job in writes:
                if job.error is None:
                    job.fail(exc)
            if self._connection.in_transaction:
                with suppress(sqlite3.Error):
                    cur.execute("ROLLBACK")
            return False
        return True


@asynccontextmanager
async def open_sqlite_store(url: str) -> AsyncIterator[SQLiteStore]:
    """Open the SQLite store a ``sqlite://`` URL names, and close it on exit.

    The file (but not its directory) is created if missing, with the schema.

    Args:
      url: ``sqlite:///relative/path.db`` (three slashes) or
        ``sqlite:////absolute/path.db`` (four). The one option,
        ``?synchronous=NORMAL``, trades the last commits before a power cut
        for fewer fsyncs; ``?watch_interval=SECONDS`` (0.001 to 10, default
        0.01) sets how often engines and clients look for other processes'
        writes.

    Raises:
      InvalidURLError: The URL is malformed or has an unsupported option.
      StoreError: The file cannot be opened, is not a database, or has a
        schema newer than this version of trio-durable knows.
    """
    path, synchronous, watch_interval = parse_url(url)
    async with AsyncExitStack() as stack:
        thread = None
        if threads_keep_time():
            thread = await stack.enter_async_context(
                open_store_thread(f"trio-durable sqlite {path}")
            )
        try:
            if thread is not None:
                connection = await thread.run(partial(connect, path, synchronous))
            else:
                # On the Trio thread, as every later call (see the module's
                # docstring), after the checkpoint a thread's call would make.
                await trio.lowlevel.checkpoint()
                connection = connect(path, synchronous)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from exc
        store = SQLiteStore(
            connection,
            path=path,
            synchronous=synchronous,
            watch_interval=watch_interval,
            thread=thread,
        )
        try:
            yield store
        finally:
            await store.aclose()
