"""Run records in the SQL stores (see `_run_records`): their table, the
writes of `RecordOp` and the reads, written once for SQLite and PostgreSQL
(which differ here only in the placeholder)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._base._error_json import (
    dump_error,
    dump_errors,
    dump_mark,
    load_error,
    load_errors,
    load_mark,
)
from .._base._run_records import RunRecord
from ._ops import QUEUE_SLOT, queue_slot_record
from ._record_ops import (
    ClaimRecord,
    DeleteRecords,
    PutRecord,
    SettleRecord,
    settle_applies,
    settled,
)
from ._rows import dump_executions, load_executions

if TYPE_CHECKING:
    from ._group_commit import GroupCommit
    from ._sql_store import Dialect

# The same statement creates it in both stores (``double precision`` is a
# REAL in SQLite). One row per run and kind; a run's rows are read whole.
TABLE: Final = """
    CREATE TABLE IF NOT EXISTS run_records (
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        error TEXT,
        errors TEXT,
        attempts INTEGER NOT NULL,
        worker_group TEXT,
        wake_at DOUBLE PRECISION,
        enqueued_at DOUBLE PRECISION,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        executions TEXT,
        mark TEXT,
        PRIMARY KEY (run_id, kind)
    )
    """

RUN_TABLE: Final = "run_records"
"""The table above, whose rows go with their run when it is pruned."""

_FIELDS: Final = (
    "run_id", "kind", "status", "input", "output", "error", "errors", "attempts",
    "worker_group", "wake_at", "enqueued_at", "started_at", "finished_at", "executions", "mark",
)  # fmt: skip
COLUMNS: Final = ", ".join(_FIELDS)


def record_values(record: RunRecord) -> tuple[Any, ...]:
    return (
        record.run_id, record.kind, record.status, record.input, record.output,
        dump_error(record.error), dump_errors(record.errors) if record.errors else None,
        record.attempts, record.group, record.wake_at, record.enqueued_at, record.started_at,
        record.finished_at, dump_executions(record.executions), dump_mark(record.mark),
    )  # fmt: skip


def load_record(row: Any) -> RunRecord:
    """The `RunRecord` a row of `COLUMNS` holds."""
    return RunRecord(
        run_id=row[0],
        kind=row[1],
        status=row[2],
        input=row[3],
        output=row[4],
        error=load_error(row[5]),
        errors=load_errors(row[6]),
        attempts=row[7],
        group=row[8],
        wake_at=row[9],
        enqueued_at=row[10],
        started_at=row[11],
        finished_at=row[12],
        executions=load_executions(row[13]),
        mark=load_mark(row[14]),
    )


def select_records(p: str) -> str:
    """The statement that reads a run's records, ordered by kind."""
    return f"SELECT {COLUMNS} FROM run_records WHERE run_id = {p} ORDER BY kind"


def upsert_record(p: str) -> str:
    """The statement that inserts or replaces a record (parameters:
    `record_values`), for a dialect whose placeholder is ``p``."""
    marks = ", ".join([p] * len(_FIELDS))
    updates = ", ".join(f"{f} = excluded.{f}" for f in _FIELDS[2:])
    return (
        f"INSERT INTO run_records ({COLUMNS}) VALUES ({marks})"
        f" ON CONFLICT (run_id, kind) DO UPDATE SET {updates}"
    )


def hold_slot(cur: Any, p: str, run_id: str, queue: str) -> None:
    """Keep the record of ``run_id`` holding a slot of ``queue`` as a whole
    run (see `._ops.WHOLE_RUN`)."""
    cur.execute(upsert_record(p), record_values(queue_slot_record(run_id, queue)))


def free_slot(cur: Any, p: str, run_id: str) -> None:
    """Delete the record of ``run_id`` holding a slot as a whole run."""
    cur.execute(f"DELETE FROM run_records WHERE run_id = {p} AND kind = {p}", (run_id, QUEUE_SLOT))


def record_ops(p: str) -> dict[type[Any], Callable[[Any, Any], Any]]:
    """The handlers of `RecordOp`, for a dialect whose placeholder is ``p``."""
    upsert = upsert_record(p)
    select_one = f"SELECT {COLUMNS} FROM run_records WHERE run_id = {p} AND kind = {p}"

    def stored(cur: Any, run_id: str, kind: str) -> RunRecord | None:
        row = cur.execute(select_one, (run_id, kind)).fetchone()
        return None if row is None else load_record(row)

    def put_record(cur: Any, op: PutRecord) -> None:
        cur.execute(upsert, record_values(op.record))

    def claim_record(cur: Any, op: ClaimRecord) -> bool:
        record = op.record
        found = stored(cur, record.run_id, record.kind)
        if found is None or found.status != "pending":
            return False
        if op.attempt is not None and found.attempts != op.attempt:
            return False
        cur.execute(upsert, record_values(record))
        return True

    def settle_record(cur: Any, op: SettleRecord) -> RunRecord | None:
        found = stored(cur, op.run_id, op.kind)
        if found is None or not settle_applies(found, op):
            return None
        if op.unless_run_status:
            row = cur.execute(f"SELECT status FROM runs WHERE id = {p}", (op.run_id,)).fetchone()
            if row is not None and row[0] in op.unless_run_status:
                return None
        done = settled(found, op)
        cur.execute(upsert, record_values(done))
        return done

    def delete_records(cur: Any, op: DeleteRecords) -> None:
        for kind in op.kinds:
            cur.execute(
                f"DELETE FROM run_records WHERE run_id = {p} AND kind = {p}", (op.run_id, kind)
            )

    return {
        PutRecord: put_record,
        ClaimRecord: claim_record,
        SettleRecord: settle_record,
        DeleteRecords: delete_records,
    }


class SQLRecords:
    """The read of run records for `SQLStore`."""

    _commit: GroupCommit[Any]
    _dialect: Dialect[Any]

    async def get_records(self, run_id: str) -> list[RunRecord]:
        statement = select_records(self._dialect.param)

        def work(cur: Any) -> tuple[list[RunRecord], None]:
            rows = cur.execute(statement, (run_id,)).fetchall()
            return [load_record(row) for row in rows], None

        return await self._commit.submit(work, writes=False)
