"""What the SQL stores share: the `Store` methods, as the statements of one
SQL dialect run through group commit.

SQLite and PostgreSQL keep the same tables and the same columns (see
`._rows`), and answer each call with the same shape of code: submit a job
to the store's `GroupCommit` whose work runs the dialect's statement on a
cursor and counts the rows it read. `SQLStore` writes each call once; a
`Dialect` says what differs: the statements (placeholders, joins, array
parameters), how a batch of operations is applied and a turn begun, and
which runs a batch locks. The stores themselves (`._sqlite`, `._postgres`)
add their trips: threads, connections and transactions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar, final

import attrs

from .._base._records import Checkpoint, CheckpointStatus, Run, RunStatus
from ._base import StoreStatistics, TurnState
from ._group_commit import Counts, GroupCommit
from ._helpers import StoreHelpers
from ._hook_sql import SQLHooks
from ._ops import Op
from ._record_sql import SQLRecords
from ._rows import INT64_MAX, INT64_MIN, load_checkpoint, load_run
from ._sql_queries import SQLQueries
from ._values_sql import SQLValues


class Cursor(Protocol):
    """The part of a DB-API cursor (sqlite3's, psycopg's) the reads use."""

    def execute(self, query: str, params: Sequence[Any] = ..., /) -> Self: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


C = TypeVar("C", bound=Cursor)


@final
@attrs.frozen(kw_only=True)
class Dialect(Generic[C]):
    """What one SQL store says its own way.

    The statements take their parameters in the order the `SQLStore`
    methods pass them (see each method).
    """

    # A placeholder for one parameter: ``?`` or ``%s``.
    param: str
    # Every run column, from runs aliased ``r`` (with what else it joins),
    # without a WHERE clause: the start of `Store.list_runs`.
    select_runs: str
    select_run: str
    select_checkpoints: str
    list_due_runs: str
    next_due_time: str
    list_stalled_runs: str
    buffered_signals: str
    signal_waiter: str
    # sorted statuses -> (condition that r.status is one of them, parameters)
    status_in: Callable[[list[str]], tuple[str, list[Any]]]
    # (run_id, from_seq, to_seq, statuses, limit) -> (statement, parameters)
    count_checkpoints_query: Callable[
        [str, int, int, Collection[CheckpointStatus], int | None], tuple[str, list[Any]]
    ]
    apply_ops: Callable[[C, Sequence[Op]], list[Any]]
    begin_turn: Callable[[C, str, str, float, float], tuple[TurnState | None, Counts | None]]
    # The runs a batch of operations locks (None: the store locks none).
    runs_written: Callable[[Sequence[Op]], tuple[str, ...]] | None = None
    # Every run column, qualified by ``r``, and the tables they come from
    # (``runs r`` and what it joins): the queries of `._sql_queries`.
    run_columns: str = ""
    run_from: str = "runs r"
    # Tables besides checkpoints and the queues with rows of a run to prune.
    run_tables: tuple[str, ...] = ()
    # What makes a text comparison byte by byte (token prefixes).
    bytewise: str = ""
    # Appended to the select of runs to prune, so pruning never waits for
    # (nor deadlocks with) a writer holding one of them.
    lock_skipping: str = ""


class SQLStore(SQLQueries, SQLHooks, SQLRecords, SQLValues, StoreHelpers, Generic[C]):
    """A `Store` whose calls are SQL statements run in group commit.

    Subclasses create the `GroupCommit` (their trips) and the `Dialect`.
    """

    _commit: GroupCommit[C]
    _dialect: Dialect[C]

    def statistics(self) -> StoreStatistics:
        return self._commit.statistics()

    async def aclose(self) -> None:
        """Close the store. Jobs already taken by a trip finish; queued ones
        fail with `trio.ClosedResourceError`, as do later calls."""
        await self._commit.aclose()

    # -- writes ---------------------------------------------------------------

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        ops = tuple(ops)
        apply_ops = self._dialect.apply_ops
        runs_written = self._dialect.runs_written

        def work(cur: C) -> tuple[list[Any], Counts]:
            return apply_ops(cur, ops), (1, len(ops), 0, 0)

        runs = () if runs_written is None else runs_written(ops)
        return await self._commit.submit(work, writes=True, runs=runs)

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        begin_turn = self._dialect.begin_turn

        def work(cur: C) -> tuple[TurnState | None, Counts | None]:
            return begin_turn(cur, run_id, owner, expiry, now)

        return await self._commit.submit(work, writes=True, runs=(run_id,))

    # -- reads ----------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        statement = self._dialect.select_run

        def work(cur: C) -> tuple[Run | None, Counts]:
            row = cur.execute(statement, (run_id,)).fetchone()
            run = None if row is None else load_run(row)
            return run, (0, 0, run is not None, 0)

        return await self._commit.submit(work, writes=False)

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        dialect = self._dialect
        clauses: list[str] = []
        params: list[Any] = []
        if statuses is not None:
            clause, values = dialect.status_in(sorted(set(statuses)))
            clauses.append(clause)
            params.extend(values)
        if workflow is not None:
            clauses.append(f"r.workflow = {dialect.param}")
            params.append(workflow)
        if parent_id is not None:
            clauses.append(f"r.parent_id = {dialect.param}")
            params.append(parent_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        statement = (
            f"{dialect.select_runs}{where} ORDER BY r.created_at, r.id LIMIT {dialect.param}"
        )
        params.append(max(limit, 0))

        def work(cur: C) -> tuple[list[Run], Counts]:
            runs = [load_run(row) for row in cur.execute(statement, params).fetchall()]
            return runs, (0, 0, len(runs), 0)

        return await self._commit.submit(work, writes=False)

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        statement = self._dialect.select_checkpoints
        params = (
            run_id,
            INT64_MIN if from_seq is None else from_seq,
            INT64_MAX if to_seq is None else to_seq,
        )

        def work(cur: C) -> tuple[list[Checkpoint], Counts]:
            found = [load_checkpoint(row) for row in cur.execute(statement, params).fetchall()]
            return found, (0, 0, 0, len(found))

        return await self._commit.submit(work, writes=False)

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        statement, params = self._dialect.count_checkpoints_query(
            run_id, from_seq, to_seq, statuses, limit
        )

        def work(cur: C) -> tuple[int, None]:
            return int(cur.execute(statement, params).fetchone()[0]), None

        return await self._commit.submit(work, writes=False)

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        return await self._ids(self._dialect.list_due_runs, (now, max(limit, 0)))

    async def list_stalled_runs(self, limit: int) -> list[str]:
        """Ids of suspended runs whose wake was lost, oldest first, at most
        ``limit`` (see `Store.list_stalled_runs`). The partial index
        ``runs_waiting`` holds the candidates."""
        return await self._ids(self._dialect.list_stalled_runs, (max(limit, 0),))

    async def buffered_signals(self, token: str) -> list[str]:
        return await self._ids(self._dialect.buffered_signals, (token,))

    async def _ids(self, statement: str, params: tuple[Any, ...]) -> list[str]:
        """The first column of each row ``statement`` returns."""

        def work(cur: C) -> tuple[list[str], None]:
            return [row[0] for row in cur.execute(statement, params).fetchall()], None

        return await self._commit.submit(work, writes=False)

    async def next_due_time(self) -> float | None:
        statement = self._dialect.next_due_time

        def work(cur: C) -> tuple[float | None, None]:
            due: float | None = cur.execute(statement).fetchone()[0]
            return due, None

        return await self._commit.submit(work, writes=False)

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        statement = self._dialect.signal_waiter

        def work(cur: C) -> tuple[tuple[str, int] | None, None]:
            row = cur.execute(statement, (token,)).fetchone()
            return (None if row is None else (row[0], row[1])), None

        return await self._commit.submit(work, writes=False)
