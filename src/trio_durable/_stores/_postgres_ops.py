"""The operations of the PostgreSQL store, as SQL on one cursor.

Everything here runs in a worker thread, inside the transaction a trip of
`PostgresStore` opened (or, for reads, outside any). Every decision a write
takes is taken by the write itself: claims, settles, leases and status
expectations are single conditional ``UPDATE`` statements, which PostgreSQL
re-evaluates on the newest row version after waiting for a concurrent
writer, so of several engines racing for a result or a run exactly one wins.
Signal and queue operations, which read several rows before they write, first
take a transaction-scoped advisory lock on their token or queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import psycopg

from .._base._error_json import dump_error
from .._base._exceptions import LeaseLostError, StoreError
from .._base._records import TERMINAL_STATUSES, Checkpoint, Run
from . import _ops
from ._base import TurnState, WriteConflict
from ._group_commit import Counts
from ._hook_sql import RUN_TABLES, hook_ops
from ._ops import Op
from ._postgres_reads import (
    LIST_DUE_RUNS,
    LIST_STALLED,
    NEXT_DUE_TIME,
    count_checkpoints_query,
    status_in,
)
from ._postgres_watch import write_announcement
from ._record_ops import ClaimRecord, PutRecord
from ._record_sql import RUN_TABLE as RECORDS_TABLE
from ._record_sql import (
    free_slot,
    hold_slot,
    load_record,
    record_ops,
    record_values,
    select_records,
    upsert_record,
)

# The row codecs are shared with the SQLite store: both keep the same columns.
from ._rows import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FIELDS,
    INT64_MAX,
    INT64_MIN,
    RUN_COLUMNS,
    RUN_FIELDS,
    checkpoint_values,
    encode_run_field,
    load_checkpoint,
    load_run,
    run_row,
)
from ._sql_store import Dialect
from ._values_sql import value_ops

# Seeds of the advisory locks that serialize writes to one signal token or
# one queue (a hash collision only serializes two of them needlessly).
_SIGNAL_LOCK_SEED: Final = 1
_QUEUE_LOCK_SEED: Final = 2

_TERMINAL: Final = sorted(TERMINAL_STATUSES)

_SELECT_RUN: Final = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s"
_INSERT_RUN: Final = (
    f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({', '.join(['%s'] * len(RUN_FIELDS))})"
    " ON CONFLICT (id) DO NOTHING"
)
SELECT_CHECKPOINTS: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"
    " WHERE run_id = %s AND seq >= %s AND seq <= %s ORDER BY seq"
)
_UPSERT_CHECKPOINT: Final = (
    f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS})"
    f" VALUES ({', '.join(['%s'] * len(CHECKPOINT_FIELDS))})"
    " ON CONFLICT (run_id, seq) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in CHECKPOINT_FIELDS[2:])
)
_CLAIM_CHECKPOINT: Final = (
    "UPDATE checkpoints SET "
    + ", ".join(f"{column} = %s" for column in CHECKPOINT_FIELDS[2:])
    + " WHERE run_id = %s AND seq = %s AND status = 'pending'"
    " AND (%s::bigint IS NULL OR attempts = %s::bigint) RETURNING true"
)
# The conditions of a settle or a reschedule, each off when its parameter is
# NULL (or the status list empty), so one prepared statement serves them all.
# The code of a stored error. Its message may hold a NUL, which JSON text
# spells \u0000 and PostgreSQL's JSON functions refuse to read: spelled as
# another escape of the same length first, it leaves the text valid JSON
# (an escaped backslash before "u0000" stays one) and the code as it was.
_ERROR_CODE: Final = "replace(error, '\\u0000', '\\u0020')::jsonb ->> 'code'"
_CONDITIONS: Final = (
    " WHERE run_id = %(run_id)s AND seq = %(seq)s"
    " AND (status = 'pending' OR (status = 'failed'"
    f" AND {_ERROR_CODE} = %(or_failed_with)s::text))"
    " AND (%(attempt)s::bigint IS NULL OR attempts = %(attempt)s::bigint)"
    " AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)"
    " AND (%(name)s::text IS NULL OR name = %(name)s::text)"
    # ``executions`` is a JSON array of strings (NULL for none), whose
    # elements the jsonb operator ``?`` looks among.
    " AND (%(execution)s::text IS NULL OR executions::jsonb ? %(execution)s::text)"
    " AND NOT (%(unless_rerun)s::boolean AND rerun)"
    " AND NOT EXISTS (SELECT FROM runs"
    " WHERE id = %(run_id)s AND status = ANY(%(unless)s::text[]))"
)
# ``errors`` is the compact JSON text `dump_errors` writes, so appending one
# more error is text surgery: the result equals dump_errors(errors + (e,)).
_ERRORS_APPENDED: Final = (
    "CASE WHEN errors IS NULL OR errors = '[]' THEN '[' || %(error)s || ']'"
    " ELSE left(errors, -1) || ',' || %(error)s || ']' END"
)
_SETTLE_CHECKPOINT: Final = (
    "UPDATE checkpoints SET status = %(status)s, output = %(output)s, error = %(error)s,"
    " mark = NULL,"
    f" errors = CASE WHEN %(append_error)s THEN {_ERRORS_APPENDED} ELSE errors END,"
    f" finished_at = %(finished_at)s::double precision{_CONDITIONS}"
    f" RETURNING {CHECKPOINT_COLUMNS}"
)
_RESCHEDULE_CHECKPOINT: Final = (
    f"UPDATE checkpoints SET attempts = attempts + 1, errors = {_ERRORS_APPENDED},"
    f" started_at = NULL, wake_at = %(wake_at)s::double precision{_CONDITIONS}"
    f" RETURNING {CHECKPOINT_COLUMNS}"
)
_SETTLE_SIGNAL: Final = (
    "UPDATE checkpoints SET status = 'completed', output = %s, error = NULL, finished_at = %s,"
    " mark = NULL WHERE run_id = %s AND seq = %s AND status = 'pending'"
)
# The rules of `LockRun` in one statement: taken when free, lapsed or ours,
# and a takeover from another owner counts a recovery.
_LEASE_ASSIGNMENTS: Final = (
    "lease_owner = %(owner)s, lease_expiry = %(expiry)s,"
    " recoveries = recoveries"
    " + CASE WHEN lease_owner IS NOT NULL AND lease_owner <> %(owner)s THEN 1 ELSE 0 END"
)
_LEASE_FREE: Final = (
    "(lease_owner IS NULL OR lease_owner = %(owner)s OR lease_expiry IS NULL"
    " OR lease_expiry <= %(now)s)"
)
_LOCK_RUN: Final = f"UPDATE runs SET {_LEASE_ASSIGNMENTS} WHERE id = %(run_id)s AND {_LEASE_FREE}"
_BEGIN_TURN: Final = (
    f"UPDATE runs SET {_LEASE_ASSIGNMENTS},"
    " status = CASE WHEN status IN ('pending', 'suspended') THEN 'running' ELSE status END"
    f" WHERE id = %(run_id)s AND status <> ALL(%(terminal)s::text[]) AND {_LEASE_FREE}"
    f" RETURNING {RUN_COLUMNS}"
)
LOCK_RUNS: Final = "SELECT FROM runs WHERE id = ANY(%s::text[]) ORDER BY id FOR NO KEY UPDATE"
# -- writes -------------------------------------------------------------------------


_update_run_sql: dict[tuple[tuple[str, ...], bool, bool, bool], str] = {}


def select_run(cur: psycopg.Cursor[Any], run_id: str) -> Run | None:
    row = cur.execute(_SELECT_RUN, (run_id,)).fetchone()
    return None if row is None else load_run(row)


_UPSERT_RECORD: Final = upsert_record("%s")


def _create_run(cur: psycopg.Cursor[Any], op: _ops.CreateRun) -> Any:
    cur.execute(_INSERT_RUN, run_row(op.run)[:-1])
    if cur.rowcount == 1:
        if op.checkpoints:
            cur.executemany(_UPSERT_CHECKPOINT, [_checkpoint_row(cp) for cp in op.checkpoints])
        if op.records:
            cur.executemany(_UPSERT_RECORD, [record_values(r) for r in op.records])
        return (op.run, True)
    return (select_run(cur, op.run.id), False)


def _update(cur: psycopg.Cursor[Any], op: _ops.UpdateRun) -> Any:
    fields = tuple(op.changes)
    for field in fields:
        # Also keeps the SQL text built from the names to known columns.
        if field not in RUN_FIELDS:
            raise TypeError(f"Run has no field {field!r}")
    key = (fields, op.expect_status is not None, op.expect_owner is not None, op.now is not None)
    statement = _update_run_sql.get(key)
    if statement is None:
        # With no changes the row is still written, so that it is locked and
        # the expectations are checked by the one statement.
        assignments = ", ".join(f"{field} = %s" for field in fields) or "status = status"
        conditions = ["id = %s"]
        if key[1]:
            conditions.append("status = ANY(%s::text[])")
        if key[2]:
            conditions.append("lease_owner = %s")
            if key[3]:
                conditions.append("(lease_expiry IS NULL OR lease_expiry > %s)")
        statement = _update_run_sql[key] = (
            f"UPDATE runs SET {assignments} WHERE {' AND '.join(conditions)}"
        )
    params: list[Any] = []
    params.extend(encode_run_field(field, value) for field, value in op.changes.items())
    params.append(op.run_id)
    if op.expect_status is not None:
        params.append(sorted(op.expect_status))
    if op.expect_owner is not None:
        params.append(op.expect_owner)
        if op.now is not None:
            params.append(op.now)
    cur.execute(statement, params)
    if cur.rowcount == 1:
        return True
    if op.strict:
        raise _why_not_updated(cur, op)
    return False


def _why_not_updated(cur: psycopg.Cursor[Any], op: _ops.UpdateRun) -> StoreError:
    """The error an `UpdateRun` whose statement changed nothing raises."""
    run_id = op.run_id
    current = select_run(cur, run_id)
    if current is None:
        return WriteConflict(f"run {run_id!r} does not exist")
    if op.expect_status is not None and current.status not in op.expect_status:
        return WriteConflict(
            f"run {run_id!r} is {current.status}, expected one of {sorted(op.expect_status)}"
        )
    if op.expect_owner is not None:
        return LeaseLostError(f"lease of run {run_id!r} is no longer held by {op.expect_owner!r}")
    # The row changed between the update and this read (another engine wrote
    # it): report what the update saw as a conflict.
    return WriteConflict(f"run {run_id!r} changed concurrently")  # pragma: no cover


def _claim_params(op: _ops.ClaimCheckpoint) -> tuple[Any, ...]:
    cp = op.checkpoint
    return (*checkpoint_values(cp), cp.run_id, cp.seq, op.attempt, op.attempt)


def _settle_params(op: _ops.SettleCheckpoint) -> dict[str, Any]:
    return {
        "run_id": op.run_id,
        "seq": op.seq,
        "status": op.status,
        "output": op.output,
        "error": dump_error(op.error),
        "finished_at": op.finished_at,
        "attempt": op.attempt,
        "kind": op.kind,
        "name": op.name,
        "unless": sorted(op.unless_run_status or ()),
        "or_failed_with": op.or_failed_with,
        "append_error": op.append_error and op.error is not None,
        "execution": op.execution,
        "unless_rerun": op.unless_rerun,
    }


def _reschedule_params(op: _ops.RescheduleCheckpoint) -> dict[str, Any]:
    return {
        "run_id": op.run_id,
        "seq": op.seq,
        "error": dump_error(op.error),
        "wake_at": op.wake_at,
        "attempt": op.attempt,
        "kind": op.kind,
        "name": op.name,
        "unless": sorted(op.unless_run_status or ()),
        "or_failed_with": None,
        "execution": op.execution,
        "unless_rerun": op.unless_rerun,
    }


def _reschedule(cur: psycopg.Cursor[Any], op: _ops.RescheduleCheckpoint) -> Any:
    row = cur.execute(_RESCHEDULE_CHECKPOINT, _reschedule_params(op)).fetchone()
    return None if row is None else load_checkpoint(row)


def _lock(cur: psycopg.Cursor[Any], key: str, seed: int) -> None:
    cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (key, seed))


def _slot_done(cur: psycopg.Cursor[Any], run_id: str, seq: int) -> bool:
    """Whether a step (or, at `WHOLE_RUN`, a run) no longer needs a queue
    slot: its checkpoint is settled (or gone), or its run ended."""
    if seq == _ops.WHOLE_RUN:
        found = cur.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
        return found is None or found[0] in TERMINAL_STATUSES
    row = cur.execute(
        "SELECT c.status, r.status FROM checkpoints c LEFT JOIN runs r ON r.id = c.run_id"
        " WHERE c.run_id = %s AND c.seq = %s",
        (run_id, seq),
    ).fetchone()
    return row is None or row[0] != "pending" or row[1] in TERMINAL_STATUSES


def _unmark(cur: psycopg.Cursor[Any], run_id: str, seq: int) -> None:
    # Due at once: its run's next turn sends it, not its next look.
    cur.execute(
        "UPDATE checkpoints SET mark = NULL, error = NULL, wake_at = NULL"
        " WHERE run_id = %s AND seq = %s"
        " AND status = 'pending' AND mark::jsonb ->> 'code' = %s",
        (run_id, seq, _ops.QUEUED),
    )


def _holders(cur: psycopg.Cursor[Any], queue: str) -> int:
    row = cur.execute("SELECT count(*) FROM queue_slots WHERE queue = %s", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def _admit(cur: psycopg.Cursor[Any], op: _ops.AdmitToQueue) -> Any:
    # Counting holders and then taking a slot must not interleave with
    # another transaction doing the same.
    _lock(cur, op.queue, _QUEUE_LOCK_SEED)
    key = (op.queue, op.run_id, op.seq)
    held = cur.execute(
        "SELECT 1 FROM queue_slots WHERE queue = %s AND run_id = %s AND seq = %s", key
    ).fetchone()
    if held is not None:
        _unmark(cur, op.run_id, op.seq)
        return True
    if op.seq == _ops.WHOLE_RUN and _slot_done(cur, op.run_id, op.seq):
        return False  # its run ended: it needs no slot
    holders = _holders(cur, op.queue)
    ahead = cur.execute(
        "SELECT 1 FROM queue_waiters WHERE queue = %s AND priority > %s"
        " AND NOT (run_id = %s AND seq = %s) LIMIT 1",
        (op.queue, op.priority, op.run_id, op.seq),
    ).fetchone()
    if holders < op.limit and ahead is None:
        cur.execute("INSERT INTO queue_slots (queue, run_id, seq) VALUES (%s, %s, %s)", key)
        cur.execute("DELETE FROM queue_waiters WHERE queue = %s AND run_id = %s AND seq = %s", key)
        _unmark(cur, op.run_id, op.seq)
        if op.seq == _ops.WHOLE_RUN:
            hold_slot(cur, "%s", op.run_id, op.queue)
        return True
    cur.execute(
        "INSERT INTO queue_waiters (queue, run_id, seq, priority, at)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (queue, run_id, seq) DO NOTHING",
        (*key, op.priority, op.at),
    )
    return False


def _release_slot(cur: psycopg.Cursor[Any], op: _ops.ReleaseQueueSlot) -> Any:
    if op.seq != _ops.WHOLE_RUN and not _slot_done(cur, op.run_id, op.seq):
        return []
    _lock(cur, op.queue, _QUEUE_LOCK_SEED)
    cur.execute(
        "DELETE FROM queue_slots WHERE queue = %s AND run_id = %s AND seq = %s",
        (op.queue, op.run_id, op.seq),
    )
    if cur.rowcount != 1:
        return []
    if op.seq == _ops.WHOLE_RUN:
        free_slot(cur, "%s", op.run_id)
    holders = _holders(cur, op.queue)
    admitted: list[tuple[str, int]] = []
    while holders < op.limit:
        row = cur.execute(
            "DELETE FROM queue_waiters WHERE id = (SELECT id FROM queue_waiters"
            " WHERE queue = %s ORDER BY priority DESC, at, id LIMIT 1) RETURNING run_id, seq",
            (op.queue,),
        ).fetchone()
        if row is None:
            break
        run_id, seq = row
        if _slot_done(cur, run_id, seq):
            continue  # it ended while waiting: it needs no slot
        cur.execute(
            "INSERT INTO queue_slots (queue, run_id, seq) VALUES (%s, %s, %s)",
            (op.queue, run_id, seq),
        )
        _unmark(cur, run_id, seq)
        if seq == _ops.WHOLE_RUN:
            hold_slot(cur, "%s", run_id, op.queue)
        admitted.append((run_id, seq))
        holders += 1
    return admitted


def _delete_checkpoints(cur: psycopg.Cursor[Any], op: _ops.DeleteCheckpoints) -> Any:
    cur.execute(
        "DELETE FROM checkpoints WHERE run_id = %s AND seq = ANY(%s::bigint[])",
        (op.run_id, list(op.seqs)),
    )
    return None


def _wait_signal(cur: psycopg.Cursor[Any], op: _ops.WaitSignal) -> Any:
    # A wait and a delivery for one token must not interleave, or each could
    # miss the other (a waiter registered and a payload buffered).
    _lock(cur, op.token, _SIGNAL_LOCK_SEED)
    row = cur.execute(
        "DELETE FROM buffered_signals WHERE id = (SELECT id FROM buffered_signals"
        " WHERE token = %s ORDER BY id LIMIT 1) RETURNING payload",
        (op.token,),
    ).fetchone()
    if row is not None:
        (payload,) = row
        # Settled in the same transaction that consumes the payload, so a
        # consumed signal cannot be lost.
        cur.execute(_SETTLE_SIGNAL, (payload, op.at, op.run_id, op.seq))
        return payload
    cur.execute(
        "INSERT INTO signal_waiters (token, run_id, seq) VALUES (%s, %s, %s)"
        " ON CONFLICT (token) DO UPDATE SET run_id = excluded.run_id, seq = excluded.seq",
        (op.token, op.run_id, op.seq),
    )
    return None


def _deliver_signal(cur: psycopg.Cursor[Any], op: _ops.DeliverSignal) -> Any:
    _lock(cur, op.token, _SIGNAL_LOCK_SEED)
    row = cur.execute(
        "DELETE FROM signal_waiters WHERE token = %s RETURNING run_id, seq", (op.token,)
    ).fetchone()
    if row is not None:
        run_id, seq = row
        cur.execute(_SETTLE_SIGNAL, (op.payload, op.at, run_id, seq))
        if cur.rowcount == 1:
            return (run_id, seq)
    # No waiter, or its checkpoint settled already (a timeout won the race):
    # keep the payload for the next wait on this token.
    cur.execute(
        "INSERT INTO buffered_signals (token, payload) VALUES (%s, %s)", (op.token, op.payload)
    )
    return None


def _remove_signal_waiter(cur: psycopg.Cursor[Any], op: _ops.RemoveSignalWaiter) -> Any:
    cur.execute("DELETE FROM signal_waiters WHERE token = %s", (op.token,))
    return None


def _lock_run(cur: psycopg.Cursor[Any], op: _ops.LockRun) -> Any:
    cur.execute(
        _LOCK_RUN, {"run_id": op.run_id, "owner": op.owner, "expiry": op.expiry, "now": op.now}
    )
    return cur.rowcount == 1


def _release_run(cur: psycopg.Cursor[Any], op: _ops.ReleaseRun) -> Any:
    cur.execute(
        "UPDATE runs SET lease_owner = NULL, lease_expiry = NULL"
        " WHERE id = %s AND lease_owner = %s",
        (op.run_id, op.owner),
    )
    return None


_OPS: Final[dict[type[Any], Callable[[psycopg.Cursor[Any], Any], Any]]] = {
    _ops.CreateRun: _create_run,
    _ops.UpdateRun: _update,
    _ops.RescheduleCheckpoint: _reschedule,
    _ops.AdmitToQueue: _admit,
    _ops.ReleaseQueueSlot: _release_slot,
    _ops.DeleteCheckpoints: _delete_checkpoints,
    _ops.WaitSignal: _wait_signal,
    _ops.DeliverSignal: _deliver_signal,
    _ops.RemoveSignalWaiter: _remove_signal_waiter,
    _ops.LockRun: _lock_run,
    _ops.ReleaseRun: _release_run,
    _ops.Announce: write_announcement,
    **hook_ops("%s"),
    **record_ops("%s"),
    **value_ops("%s"),
}


def _each_result(cur: psycopg.Cursor[Any]) -> list[Any]:
    """The first row of each result of an ``executemany(returning=True)``."""
    rows = []
    while True:
        rows.append(cur.fetchone())
        if not cur.nextset():
            return rows


def _run_group(cur: psycopg.Cursor[Any], kind: type[Any], ops: list[Any]) -> list[Any]:
    """Apply a row of consecutive puts, claims or settles in one round trip
    (psycopg pipelines an ``executemany``)."""
    if kind is _ops.PutCheckpoint:
        cur.executemany(_UPSERT_CHECKPOINT, [_checkpoint_row(op.checkpoint) for op in ops])
        return [None] * len(ops)
    params: list[Any]
    if kind is _ops.ClaimCheckpoint:
        statement, params = _CLAIM_CHECKPOINT, [_claim_params(op) for op in ops]
    else:
        statement, params = _SETTLE_CHECKPOINT, [_settle_params(op) for op in ops]
    if len(ops) == 1:
        rows = [cur.execute(statement, params[0]).fetchone()]
    else:
        cur.executemany(statement, params, returning=True)
        rows = _each_result(cur)
    if kind is _ops.ClaimCheckpoint:
        return [row is not None for row in rows]
    return [None if row is None else load_checkpoint(row) for row in rows]


run_group: Final = _run_group
"""`_run_group`, for the layered trips of `._postgres_batch`."""


def _checkpoint_row(cp: Checkpoint) -> tuple[Any, ...]:
    return (cp.run_id, cp.seq, *checkpoint_values(cp))


_GROUPED: Final = (_ops.PutCheckpoint, _ops.ClaimCheckpoint, _ops.SettleCheckpoint)


def runs_written(ops: Sequence[Op]) -> tuple[str, ...]:
    """The runs whose rows (or checkpoints) ``ops`` write."""
    runs: list[str] = []
    for op in ops:
        if isinstance(op, _ops.CreateRun):
            runs.append(op.run.id)
        elif isinstance(op, _ops.PutCheckpoint | _ops.ClaimCheckpoint):
            runs.append(op.checkpoint.run_id)
        elif isinstance(op, PutRecord | ClaimRecord):
            runs.append(op.record.run_id)
        elif isinstance(op, _ops.Announce):
            # Writes no row: a NOTIFY.
            continue
        else:
            # Unknown objects are refused later, inside the transaction.
            run_id = getattr(op, "run_id", None)
            if isinstance(run_id, str):
                runs.append(run_id)
    return tuple(runs)


def apply_ops(cur: psycopg.Cursor[Any], ops: Sequence[Op]) -> list[Any]:
    results: list[Any] = []
    group: list[Any] = []
    for op in ops:
        kind = type(op)
        if group and type(group[0]) is not kind:
            results.extend(_run_group(cur, type(group[0]), group))
            group = []
        if kind in _GROUPED:
            group.append(op)
            continue
        handler = _OPS.get(kind)
        if handler is None:
            raise TypeError(f"unknown store operation {op!r}")
        results.append(handler(cur, op))
    if group:
        results.extend(_run_group(cur, type(group[0]), group))
    return results


_SELECT_RECORDS: Final = select_records("%s")


def begin_turn(
    cur: psycopg.Cursor[Any], run_id: str, owner: str, expiry: float, now: float
) -> tuple[TurnState | None, Counts | None]:
    row = cur.execute(
        _BEGIN_TURN,
        {"run_id": run_id, "owner": owner, "expiry": expiry, "now": now, "terminal": _TERMINAL},
    ).fetchone()
    if row is None:
        return None, None
    run = load_run(row)
    # A statement of its own (not a join in the update): it reads the
    # checkpoints as committed after the update waited out any other writer
    # of the run, while the update's own snapshot predates that wait.
    rows = cur.execute(SELECT_CHECKPOINTS, (run_id, INT64_MIN, INT64_MAX)).fetchall()
    checkpoints = tuple(map(load_checkpoint, rows))
    records = tuple(map(load_record, cur.execute(_SELECT_RECORDS, (run_id,)).fetchall()))
    state = TurnState(run=run, checkpoints=checkpoints, records=records)
    return state, (1, 0, 1, len(checkpoints))


DIALECT: Final = Dialect[psycopg.Cursor[Any]](
    param="%s",
    select_runs=f"SELECT {RUN_COLUMNS} FROM runs r",
    select_run=_SELECT_RUN,
    select_checkpoints=SELECT_CHECKPOINTS,
    list_due_runs=LIST_DUE_RUNS,
    next_due_time=NEXT_DUE_TIME,
    list_stalled_runs=LIST_STALLED,
    buffered_signals="SELECT payload FROM buffered_signals WHERE token = %s ORDER BY id",
    signal_waiter="SELECT run_id, seq FROM signal_waiters WHERE token = %s",
    status_in=status_in,
    count_checkpoints_query=count_checkpoints_query,
    apply_ops=apply_ops,
    begin_turn=begin_turn,
    runs_written=runs_written,
    run_tables=(*RUN_TABLES, RECORDS_TABLE),
    run_columns=", ".join(f"r.{field}" for field in RUN_FIELDS),
    # Tokens compare as bytes whatever the database's collation.
    bytewise=' COLLATE "C"',
    lock_skipping=" FOR UPDATE OF r SKIP LOCKED",
)
"""The PostgreSQL store's statements, for `SQLStore`."""
