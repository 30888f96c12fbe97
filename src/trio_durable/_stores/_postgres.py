"""The PostgreSQL store: a pool of connections, writes committed in groups.

psycopg blocks, so no database call runs on the Trio thread: every call goes
to a worker thread through `trio.to_thread.run_sync`, one connection per
thread, at most ``pool_size`` at once. Connections run with
``synchronous_commit = on`` (a commit is acknowledged once it is on disk).

Group commit, as in the SQLite store. Every call (a batch of writes from
`PostgresStore.apply` or `PostgresStore.begin_turn`, or a read) becomes a
*job* on a queue. While fewer than ``pool_size`` trips to the database are in
flight, the caller that finds its job still queued leads one: it takes every
queued job and runs them on one connection, reads first and then the writes
inside ONE transaction. A batch that fails (a `WriteConflict`, a
`LeaseLostError`, a bad value) rolls the transaction back; its caller gets
the exception and the trip runs the other batches again without it, so a
failure costs a second pass but the common case needs no savepoints (which
would each cost a round trip and a subtransaction).

Several trips (of this store, or of other engine processes) run at once.
Each first locks the rows of every run its batches write, in order of id, so
two trips that share runs queue one behind the other instead of deadlocking
(a deadlock costs PostgreSQL's ``deadlock_timeout``, a second, to notice). A
deadlock that happens anyway (a signal delivery settles a checkpoint of a run
it did not lock) reruns the whole trip. What keeps concurrent writes correct
is in `._postgres_ops`; URL, connections and the schema in
`._postgres_schema`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final

import attrs
import psycopg
import psycopg.errors
import trio

from .._exceptions import InvalidURLError, StoreError
from .._records import Checkpoint, CheckpointStatus, Run, RunStatus
from .._urls import scrub
from ._base import STALL_IGNORED_PREFIX, Op, StoreHelpers, StoreStatistics, TurnState
from ._postgres_ops import (
    INT64_MAX,
    INT64_MIN,
    LIST_DUE_RUNS,
    LIST_STALLED,
    LOCK_RUNS,
    NEXT_DUE_TIME,
    RUN_COLUMNS,
    SELECT_CHECKPOINTS,
    Counts,
    apply_ops,
    begin_turn,
    count_checkpoints_query,
    runs_written,
    select_run,
)
from ._postgres_schema import close_all, connect, open_first, parse_url
from ._rows import load_checkpoint, load_run

logger = logging.getLogger("trio_durable")

DEADLOCK_RETRIES: Final = 5
"""Times a trip that lost a race with another transaction (a deadlock) is
run again."""

_Work = Callable[[psycopg.Cursor[Any]], tuple[Any, "Counts | None"]]


# -- group commit -------------------------------------------------------------------


def _raise_if_disconnected(conn: psycopg.Connection[Any], error: BaseException | None) -> None:
    """Raise if a job failed because the connection did, not because of its
    own batch: then every job of the trip fails. (Not on any
    `psycopg.OperationalError`: a deadlock is one too.)"""
    if conn.closed or conn.broken:
        if isinstance(error, psycopg.Error):
            raise error
        raise psycopg.OperationalError("the connection to the database broke") from error


def _is_transient(error: BaseException | None) -> bool:
    """Whether a failed transaction only lost a race and may run again."""
    return isinstance(error, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)


@final
@attrs.define(slots=True, eq=False)
class _Job:
    """One caller's unit of work, and its outcome once a trip ran it."""

    work: _Work
    writes: bool
    # The runs whose rows the job's writes lock (as far as its operations
    # say; a signal delivery also settles its waiter's checkpoint).
    runs: tuple[str, ...] = ()
    # Set when a trip took the job (or aclose failed it): from then on it is
    # no longer the caller's to withdraw.
    taken: bool = False
    # Set in the worker thread once the job's outcome is final (a read ran, a
    # batch failed on its own): a trip that breaks later leaves it be.
    done: bool = False
    result: Any = None
    # None when the job adds nothing to the statistics (it failed, or a
    # begin_turn found nothing to do).
    counts: Counts | None = None
    error: BaseException | None = None
    finished: trio.Event = attrs.Factory(trio.Event)

    def run(self, cur: psycopg.Cursor[Any]) -> bool:
        """Run the work in the worker thread; return whether it succeeded."""
        try:
            self.result, self.counts = self.work(cur)
        except Exception as exc:
            self.fail(exc)
            return False
        self.error = None
        return True

    def fail(self, error: BaseException) -> None:
        self.result = self.counts = None
        self.error = error

    def unwrap(self, url: str) -> Any:
        error, self.error = self.error, None
        if error is None:
            return self.result
        # A value the database cannot hold (a string with a lone surrogate)
        # is refused as a store error too, never let out raw.
        if isinstance(error, psycopg.Error | OverflowError | UnicodeEncodeError):
            raise StoreError(f"the PostgreSQL store at {url} failed: {error}") from error
        raise error


@final
class PostgresStore(StoreHelpers):
    """A `Store` in a PostgreSQL database, shared by any number of engines.

    Open it with `open_postgres_store`.

    Attributes:
      url: The store's URL with its password masked.
      pool_size: How many connections (and worker threads) it uses at most.
      schema: The PostgreSQL schema holding its tables, or None for the
        connection's default search path.
    """

    def __init__(
        self,
        conninfo: str,
        first: psycopg.Connection[Any],
        *,
        url: str,
        pool_size: int,
        schema: str | None,
        scope: str,
    ) -> None:
        self.url = url
        self.pool_size = pool_size
        self.schema = schema
        # Engines sharing this database share a results queue on the broker.
        self.scope = scope
        self._conninfo = conninfo
        # Idle connections; only touched on the Trio thread.
        self._idle: list[psycopg.Connection[Any]] = [first]
        self._limiter = trio.CapacityLimiter(pool_size)
        self._queue: list[_Job] = []
        self._trips = 0
        # Set (and replaced) whenever a trip ends.
        self._trip_ended = trio.Event()
        self._stats = StoreStatistics()
        self._closed = False

    # -- bookkeeping ----------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        return self._stats

    async def aclose(self) -> None:
        """Close the store. Jobs already taken by a trip finish; queued ones
        fail with `trio.ClosedResourceError`, as do later calls."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        for job in self._queue:
            job.taken = True
            job.fail(trio.ClosedResourceError("the store was closed"))
            job.finished.set()
        self._queue.clear()
        # Closing must finish even if we are cancelled, or connections would
        # outlive the store.
        with trio.CancelScope(shield=True):
            while self._trips:
                await self._trip_ended.wait()
            idle, self._idle = self._idle, []
            await trio.to_thread.run_sync(close_all, idle, limiter=self._limiter)

    async def _submit(self, work: _Work, *, writes: bool, runs: tuple[str, ...] = ()) -> Any:
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(work, writes, runs)
        self._queue.append(job)
        try:
            while not job.taken:
                if self._trips < self.pool_size:
                    await self._lead_trip()
                else:
                    await self._trip_ended.wait()
            if not job.finished.is_set():
                await job.finished.wait()
        except BaseException as exc:
            if not job.taken:
                self._queue.remove(job)
                raise
            if not isinstance(exc, trio.Cancelled):
                raise
            # A taken job runs to its end whatever we do here; wait for it, so
            # the caller learns whether its write committed, as
            # trio.to_thread.run_sync does for its own caller. The
            # cancellation is delivered at the caller's next checkpoint.
            with trio.CancelScope(shield=True):
                await job.finished.wait()
        return job.unwrap(self.url)

    async def _lead_trip(self) -> None:
        jobs, self._queue = self._queue, []
        for job in jobs:
            job.taken = True
        self._trips += 1
        conn = self._idle.pop() if self._idle else None
        committed = False
        try:
            # Shielded: once taken, the jobs must run (or fail) as a whole,
            # and to_thread would raise Cancelled before starting the thread.
            with trio.CancelScope(shield=True):
                conn, committed = await trio.to_thread.run_sync(
                    self._run_trip, conn, jobs, limiter=self._limiter
                )
        except BaseException as exc:  # pragma: no cover - a bug in _run_trip
            for job in jobs:
                if job.error is None:
                    job.fail(exc)
            raise
        finally:
            if conn is not None:
                self._idle.append(conn)
            stats = self._stats
            for job in jobs:
                counts = job.counts
                if counts is not None and job.error is None:
                    stats.batches += counts[0]
                    stats.ops += counts[1]
                    stats.run_rows_read += counts[2]
                    stats.checkpoint_rows_read += counts[3]
                job.finished.set()
            if committed:
                stats.transactions += 1
            self._trips -= 1
            ended, self._trip_ended = self._trip_ended, trio.Event()
            ended.set()

    def _run_trip(
        self, conn: psycopg.Connection[Any] | None, jobs: list[_Job]
    ) -> tuple[psycopg.Connection[Any] | None, bool]:
        """Run a trip's jobs (in a worker thread). Returns the connection if
        it is still usable, and whether a transaction was committed."""
        if conn is None:
            try:
                conn = connect(self._conninfo, self.schema)
            except psycopg.Error as exc:
                error = StoreError(
                    f"cannot connect to the PostgreSQL store at {self.url}:"
                    f" {scrub(str(exc), self._conninfo)}"
                )
                error.__cause__ = exc
                for job in jobs:
                    job.fail(error)
                return None, False
        committed = False
        try:
            committed = self._run_jobs(conn, jobs)
        except psycopg.Error as exc:
            # The trip broke as a whole (the connection dropped, the commit
            # failed): nothing of its transaction is known to be written.
            for job in jobs:
                if not job.done:
                    job.fail(exc)
        if conn.closed or conn.broken:
            with suppress(psycopg.Error):
                conn.close()
            return None, committed
        return conn, committed

    def _run_jobs(self, conn: psycopg.Connection[Any], jobs: list[_Job]) -> bool:
        """Run the reads, then the writes in one transaction; return whether
        it was committed.

        Raises:
          psycopg.Error: The connection or the transaction broke.
        """
        cur = conn.cursor()
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # Left behind by a trip whose connection broke mid-transaction.
            conn.rollback()
        # Reads go first, outside the write transaction: they see only
        # committed rows, so a commit that fails below cannot have shown them
        # anything.
        pending: list[_Job] = []
        for job in jobs:
            if job.writes:
                pending.append(job)
                continue
            if not job.run(cur):
                _raise_if_disconnected(conn, job.error)
            job.done = True
        retries = 0
        while pending:
            cur.execute("BEGIN")
            runs = sorted({run_id for job in pending for run_id in job.runs})
            error: BaseException | None = None
            failed: _Job | None = None
            try:
                if runs:
                    # Lock every run row the batches will write, in one global
                    # order, before they write any: two trips (of this engine
                    # or another) that share runs then queue instead of
                    # deadlocking, which PostgreSQL would only detect after
                    # deadlock_timeout.
                    cur.execute(LOCK_RUNS, (runs,))
            except psycopg.errors.TransactionRollback as exc:
                error = exc
            else:
                for job in pending:
                    if not job.run(cur):
                        failed, error = job, job.error
                        break
            if error is None:
                if any(job.counts is not None for job in pending):
                    cur.execute("COMMIT")
                    return True
                # Every batch found nothing to do: a rollback costs no fsync.
                cur.execute("ROLLBACK")
                return False
            _raise_if_disconnected(conn, error)
            cur.execute("ROLLBACK")
            if _is_transient(error) and retries < DEADLOCK_RETRIES:
                retries += 1
                logger.warning(
                    "a transaction of the PostgreSQL store at %s lost a race with another"
                    " (%s); running it again",
                    self.url,
                    type(error).__name__,
                )
                continue
            if failed is None:
                raise error
            # The failed batch alone is dropped; the others, rolled back with
            # it, run again.
            failed.done = True
            pending.remove(failed)
        return False

    # -- writes ---------------------------------------------------------------

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        ops = tuple(ops)

        def work(cur: psycopg.Cursor[Any]) -> tuple[Any, Counts]:
            return apply_ops(cur, ops), (1, len(ops), 0, 0)

        return await self._submit(  # type: ignore[no-any-return]
            work, writes=True, runs=runs_written(ops)
        )

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        def work(cur: psycopg.Cursor[Any]) -> tuple[TurnState | None, Counts | None]:
            return begin_turn(cur, run_id, owner, expiry, now)

        return await self._submit(  # type: ignore[no-any-return]
            work, writes=True, runs=(run_id,)
        )

    # -- reads ----------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        def work(cur: psycopg.Cursor[Any]) -> tuple[Run | None, Counts]:
            run = select_run(cur, run_id)
            return run, (0, 0, run is not None, 0)

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        clauses: list[str] = []
        params: list[Any] = []
        if statuses is not None:
            clauses.append("status = ANY(%s::text[])")
            params.append(sorted(set(statuses)))
        if workflow is not None:
            clauses.append("workflow = %s")
            params.append(workflow)
        if parent_id is not None:
            clauses.append("parent_id = %s")
            params.append(parent_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        statement = f"SELECT {RUN_COLUMNS} FROM runs{where} ORDER BY created_at, id LIMIT %s"
        params.append(max(limit, 0))

        def work(cur: psycopg.Cursor[Any]) -> tuple[list[Run], Counts]:
            runs = [load_run(row) for row in cur.execute(statement, params).fetchall()]
            return runs, (0, 0, len(runs), 0)

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        params = (
            run_id,
            INT64_MIN if from_seq is None else from_seq,
            INT64_MAX if to_seq is None else to_seq,
        )

        def work(cur: psycopg.Cursor[Any]) -> tuple[list[Checkpoint], Counts]:
            rows = cur.execute(SELECT_CHECKPOINTS, params).fetchall()
            found = [load_checkpoint(row) for row in rows]
            return found, (0, 0, 0, len(found))

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        statement, params = count_checkpoints_query(run_id, from_seq, to_seq, statuses, limit)

        def work(cur: psycopg.Cursor[Any]) -> tuple[int, None]:
            row = cur.execute(statement, params).fetchone()
            assert row is not None
            return int(row[0]), None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        params = (now, max(limit, 0))

        def work(cur: psycopg.Cursor[Any]) -> tuple[list[str], None]:
            rows = cur.execute(LIST_DUE_RUNS, params).fetchall()
            return [row[0] for row in rows], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def next_due_time(self) -> float | None:
        def work(cur: psycopg.Cursor[Any]) -> tuple[float | None, None]:
            row = cur.execute(NEXT_DUE_TIME).fetchone()
            assert row is not None
            return row[0], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def list_stalled_runs(self, limit: int) -> list[str]:
        """Ids of suspended runs whose wake was lost, oldest first, at most
        ``limit`` (see `Store.list_stalled_runs`). The partial index
        ``runs_waiting`` holds the candidates."""
        params = (STALL_IGNORED_PREFIX + "%", max(limit, 0))

        def work(cur: psycopg.Cursor[Any]) -> tuple[list[str], None]:
            return [row[0] for row in cur.execute(LIST_STALLED, params).fetchall()], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def buffered_signals(self, token: str) -> list[str]:
        def work(cur: psycopg.Cursor[Any]) -> tuple[list[str], None]:
            rows = cur.execute(
                "SELECT payload FROM buffered_signals WHERE token = %s ORDER BY id", (token,)
            ).fetchall()
            return [row[0] for row in rows], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        def work(cur: psycopg.Cursor[Any]) -> tuple[tuple[str, int] | None, None]:
            row = cur.execute(
                "SELECT run_id, seq FROM signal_waiters WHERE token = %s", (token,)
            ).fetchone()
            return (None if row is None else (row[0], row[1])), None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]


@asynccontextmanager
async def open_postgres_store(url: str) -> AsyncIterator[PostgresStore]:
    """Open the PostgreSQL store a URL names, and close it on exit.

    Connects once (so an unreachable database fails here), creates the
    tables or applies the missing migrations, and opens further connections
    as concurrent calls need them, up to the pool size.

    Args:
      url: ``postgresql://user:password@host:port/database`` (or
        ``postgres://``). Options: ``pool_size`` (connections at most,
        default 4), ``schema`` (the PostgreSQL schema for the tables, created
        if missing; default: the connection's search path); any other option
        goes to libpq (``sslmode``, ``connect_timeout`` (default 10 s),
        ``application_name``, ...).

    Raises:
      InvalidURLError: The URL is malformed, an option is out of range, or
        libpq does not know an option.
      StoreError: The database cannot be reached, refuses the connection, or
        has a schema newer than this version of trio-durable knows. The
        message names the URL with its password masked.
    """
    target = parse_url(url)
    try:
        first = await trio.to_thread.run_sync(open_first, target)
    except psycopg.Error as exc:
        # libpq may quote the connection string it could not read, password
        # and all: its message is scrubbed, and a bad URL's cause not chained.
        reason = scrub(str(exc), target.conninfo)
        if type(exc) is psycopg.ProgrammingError and exc.sqlstate is None:
            # Raised by libpq before connecting: an option it does not know.
            raise InvalidURLError(f"bad postgresql URL {target.masked!r}: {reason}") from None
        raise StoreError(f"cannot open the PostgreSQL store at {target.masked}: {reason}") from exc
    store = PostgresStore(
        target.conninfo,
        first,
        url=target.masked,
        pool_size=target.pool_size,
        schema=target.schema,
        scope=target.scope,
    )
    try:
        yield store
    finally:
        await store.aclose()
