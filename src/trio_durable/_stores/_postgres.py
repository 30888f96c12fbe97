"""The PostgreSQL store: a pool of connections, writes committed in groups.

psycopg blocks, so no database call runs on the Trio thread: every call goes
to a worker thread through `trio.to_thread.run_sync`, one connection per
thread, at most ``pool_size`` at once. Connections run with
``synchronous_commit = on`` (a commit is acknowledged once it is on disk).

Group commit (see `._group_commit`), with up to ``pool_size`` trips in
flight, each on a connection of its own: a trip runs the reads first and then
the writes inside ONE transaction. A batch that fails (a `WriteConflict`, a
`LeaseLostError`, a bad value) rolls the transaction back; its caller gets
the exception and the trip runs the other batches again without it, so a
failure costs a second pass but the common case needs no savepoints (which
would each cost a round trip and a subtransaction).

Several trips (of this store, or of other engine processes) run at once.
Each first locks the rows of every run its batches write, in order of id,
then the keyed values they write, in order of key (advisory locks: see
`._values_sql.LOCK_VALUES`), so two trips that share runs or values queue
one behind the other instead of deadlocking (a deadlock costs PostgreSQL's
``deadlock_timeout``, a second, to notice). A
deadlock that happens anyway (a signal delivery settles a checkpoint of a run
it did not lock) reruns the whole trip. What keeps concurrent writes correct
is in `._postgres_ops`; URL, connections and the schema in
`._postgres_schema`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final

import psycopg
import psycopg.errors
import trio

from .._base._exceptions import InvalidURLError, StoreError
from .._base._records import Run
from .._base._urls import scrub
from ._base import TurnState
from ._group_commit import GroupCommit, Job
from ._ops import Op
from ._postgres_batch import (
    ApplyWork,
    BeginTurnWork,
    RunRead,
    mergeable,
    read_runs,
    run_layered,
)
from ._postgres_ops import DIALECT, LOCK_RUNS, runs_written
from ._postgres_schema import close_all, connect, open_first, parse_url
from ._postgres_watch import watch_postgres
from ._sql_store import SQLStore
from ._values_sql import LOCK_VALUES, value_locks
from ._watch import Deliver

logger = logging.getLogger("trio_durable")

DEADLOCK_RETRIES: Final = 5
"""Times a trip that lost a race with another transaction (a deadlock) is
run again."""


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


class _CountingCursor(psycopg.Cursor[Any]):
    """A cursor that counts the statements it sends: each a round trip
    (an ``executemany`` is one: psycopg pipelines it)."""

    sent = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        return super().execute(*args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> None:
        self.sent += 1
        super().executemany(*args, **kwargs)


@final
class PostgresStore(SQLStore[psycopg.Cursor[Any]]):
    """A `Store` in a PostgreSQL database, shared by any number of engines.

    Open it with `open_postgres_store`.

    Attributes:
      url: The store's URL with its password masked.
      pool_size: How many connections (and worker threads) it uses at most.
      schema: The PostgreSQL schema holding its tables, or None for the
        connection's default search path.
      round_trips: Statements sent to the server so far by the store's
        calls (an ``executemany`` counts one), for benchmarks and tests.
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
        self._dialect = DIALECT
        self._commit = GroupCommit(self._trip, self._close, self._store_error, max_trips=pool_size)
        self.round_trips = 0

    # The calls whose jobs a trip can merge with others of their kind (see
    # `._postgres_batch`); each also runs alone as `SQLStore`'s would.

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        work = ApplyWork(tuple(ops))
        result: list[Any] = await self._commit.submit(
            work, writes=True, runs=runs_written(work.ops)
        )
        return result

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        work = BeginTurnWork(run_id, owner, expiry, now)
        state: TurnState | None = await self._commit.submit(work, writes=True, runs=(run_id,))
        return state

    async def get_run(self, run_id: str) -> Run | None:
        run: Run | None = await self._commit.submit(RunRead(run_id), writes=False)
        return run

    async def watch(
        self,
        origin: str,
        deliver: Deliver,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """See `RunWatch.watch`: ``LISTEN`` on a connection of its own,
        connected again when lost (see `._postgres_watch`)."""
        await watch_postgres(self._conninfo, self.schema, self.url, origin, deliver, task_status)

    def _store_error(self, error: BaseException) -> StoreError | None:
        # A value the database cannot hold (a string with a lone surrogate)
        # is refused as a store error too, never let out raw.
        if isinstance(error, psycopg.Error | OverflowError | UnicodeEncodeError):
            return StoreError(f"the PostgreSQL store at {self.url} failed: {error}")
        return None

    async def _close(self) -> None:
        idle, self._idle = self._idle, []
        await trio.to_thread.run_sync(close_all, idle, limiter=self._limiter)

    async def _trip(self, jobs: list[Job[psycopg.Cursor[Any], Any]]) -> bool:
        conn = self._idle.pop() if self._idle else None
        try:
            # Shielded: once taken, the jobs must run (or fail) as a whole.
            with trio.CancelScope(shield=True):
                conn, committed, sent = await trio.to_thread.run_sync(
                    self._run_trip, conn, jobs, limiter=self._limiter
                )
            self.round_trips += sent
        finally:
            if conn is not None:
                self._idle.append(conn)
        return committed

    def _run_trip(
        self, conn: psycopg.Connection[Any] | None, jobs: list[Job[psycopg.Cursor[Any], Any]]
    ) -> tuple[psycopg.Connection[Any] | None, bool, int]:
        """Run a trip's jobs (in a worker thread). Returns the connection if
        it is still usable, whether a transaction was committed, and the
        statements sent."""
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
                return None, False, 0
        committed = False
        cur = _CountingCursor(conn)
        try:
            committed = self._run_jobs(conn, cur, jobs)
        except psycopg.Error as exc:
            # The trip broke as a whole (the connection dropped, the commit
            # failed): nothing of its transaction is known to be written.
            for job in jobs:
                if not job.done:
                    job.fail(exc)
        if conn.closed or conn.broken:
            with suppress(psycopg.Error):
                conn.close()
            return None, committed, cur.sent
        return conn, committed, cur.sent

    def _run_jobs(
        self,
        conn: psycopg.Connection[Any],
        cur: _CountingCursor,
        jobs: list[Job[psycopg.Cursor[Any], Any]],
    ) -> bool:
        """Run the reads, then the writes in one transaction; return whether
        it was committed.

        Raises:
          psycopg.Error: The connection or the transaction broke.
        """
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # Left behind by a trip whose connection broke mid-transaction.
            conn.rollback()
        # Reads go first, outside the write transaction: they see only
        # committed rows, so a commit that fails below cannot have shown them
        # anything.
        pending: list[Job[psycopg.Cursor[Any], Any]] = []
        run_reads: list[Job[psycopg.Cursor[Any], Any]] = []
        for job in jobs:
            if job.writes:
                pending.append(job)
                continue
            if isinstance(job.work, RunRead):
                run_reads.append(job)
                continue
            if not job.run(cur):
                _raise_if_disconnected(conn, job.error)
            job.done = True
        if run_reads:
            # Every run read of the trip in one statement.
            try:
                read_runs(cur, run_reads)
            except psycopg.Error as exc:
                _raise_if_disconnected(conn, exc)
                for job in run_reads:
                    job.fail(exc)
            for job in run_reads:
                job.done = True
        if pending and mergeable(pending) and self._run_layered(conn, cur, pending):
            return any(job.counts is not None for job in pending)
        retries = 0
        while pending:
            cur.execute("BEGIN")
            runs = sorted({run_id for job in pending for run_id in job.runs})
            error: BaseException | None = None
            failed: Job[psycopg.Cursor[Any], Any] | None = None
            try:
                if runs:
                    # Lock every run row the batches will write, in one global
                    # order, before they write any: two trips (of this engine
                    # or another) that share runs then queue instead of
                    # deadlocking, which PostgreSQL would only detect after
                    # deadlock_timeout.
                    cur.execute(LOCK_RUNS, (runs,))
                self._lock_values(cur, pending)
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

    def _lock_values(
        self, cur: psycopg.Cursor[Any], pending: list[Job[psycopg.Cursor[Any], Any]]
    ) -> None:
        """Take the locks of the keyed values the write jobs write, in the
        one order every transaction takes them (after the runs'): see
        `._values_sql.LOCK_VALUES`."""
        ops = (op for job in pending if isinstance(job.work, ApplyWork) for op in job.work.ops)
        keys = value_locks(self.schema or "", ops)
        if keys:
            cur.execute(LOCK_VALUES, (keys,))

    def _run_layered(
        self,
        conn: psycopg.Connection[Any],
        cur: psycopg.Cursor[Any],
        pending: list[Job[psycopg.Cursor[Any], Any]],
    ) -> bool:
        """Run the write jobs in one transaction of few statements (see
        `._postgres_batch`); return whether that answered them all. If not,
        the transaction is rolled back and the jobs are left as they were,
        for the one-by-one path.

        Raises:
          psycopg.Error: The connection or the transaction broke.
        """
        cur.execute("BEGIN")
        try:
            runs = sorted({run_id for job in pending for run_id in job.runs})
            if runs:
                cur.execute(LOCK_RUNS, (runs,))
            self._lock_values(cur, pending)
            answered = run_layered(cur, pending)
        except psycopg.Error as exc:
            _raise_if_disconnected(conn, exc)
            if _is_transient(exc):
                logger.warning(
                    "a transaction of the PostgreSQL store at %s lost a race with another"
                    " (%s); running it again",
                    self.url,
                    type(exc).__name__,
                )
            answered = False
        if not answered:
            cur.execute("ROLLBACK")
            return False
        if any(job.counts is not None for job in pending):
            cur.execute("COMMIT")
        else:
            # Every batch found nothing to do: a rollback costs no fsync.
            cur.execute("ROLLBACK")
        return True


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
