"""The operations of the SQLite store, as SQL on one cursor.

Everything here runs in a trip of `SQLiteStore` (in the worker thread, or on
the Trio thread under a test's clock), inside the one write transaction of
the trip, in the savepoint of its batch (or, for reads, outside any). SQLite
lets one writer in at a time, so what a write reads stays as it read it until
the transaction ends: the rules of the operations are applied in Python (see
`._rules`) to the rows they read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

import attrs

from .._base._error_json import dump_error, dump_errors
from .._base._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    CheckpointStatus,
    Run,
)
from . import _ops
from ._base import TurnState, run_due_at
from ._group_commit import Counts
from ._hook_sql import RUN_TABLES, hook_ops
from ._ops import Op
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
from ._rows import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FIELDS,
    INT64_MAX,
    INT64_MIN,
    RUN_FIELDS,
    checkpoint_values,
    encode_run_field,
    load_checkpoint,
    load_run,
    run_row,
)
from ._rules import expectation_failure, op_applies, rescheduled, take_lease
from ._sql_store import Dialect
from ._sqlite_watch import write_announcement
from ._values_sql import value_ops

# A run is its runs row joined with its input.
_RUNS: Final = "runs r JOIN run_inputs i ON i.run_id = r.id"
_RUN_SELECT: Final = ", ".join("i.input" if f == "input" else f"r.{f}" for f in RUN_FIELDS)
_SELECT_RUN: Final = f"SELECT {_RUN_SELECT} FROM {_RUNS} WHERE r.id = ?"
# The run without its input (read as ''), for writes that only check and
# change its state: reading a large input there would be wasted.
_SELECT_RUN_STATE: Final = (
    "SELECT "
    + ", ".join("''" if f == "input" else f"r.{f}" for f in RUN_FIELDS)
    + " FROM runs r WHERE r.id = ?"
)
_INPUT_INDEX: Final = RUN_FIELDS.index("input")
_INSERT_RUN: Final = (
    "INSERT INTO runs ("
    + ", ".join(f for f in RUN_FIELDS if f != "input")
    # As many values as fields: all but the input, and due_at.
    + f", due_at) VALUES ({', '.join('?' * len(RUN_FIELDS))})"
    " ON CONFLICT (id) DO NOTHING"
)
_INSERT_INPUT: Final = "INSERT INTO run_inputs (run_id, input) VALUES (?, ?)"
_SELECT_CHECKPOINTS: Final = (
    f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints"
    " WHERE run_id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
)
_UPSERT_CHECKPOINT: Final = (
    f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) VALUES ({', '.join('?' * len(CHECKPOINT_FIELDS))})"
    " ON CONFLICT (run_id, seq) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in CHECKPOINT_COLUMNS.split(", ")[2:])
)
_CLAIM_CHECKPOINT: Final = (
    "UPDATE checkpoints SET "
    + ", ".join(f"{column} = ?" for column in CHECKPOINT_COLUMNS.split(", ")[2:])
    + " WHERE run_id = ? AND seq = ? AND status = 'pending' AND (? IS NULL OR attempts = ?)"
)
_SETTLE_CHECKPOINT: Final = (
    "UPDATE checkpoints SET status = ?, output = ?, error = ?, finished_at = ?, mark = NULL"
    f" WHERE run_id = ? AND seq = ? AND status = 'pending' RETURNING {CHECKPOINT_COLUMNS}"
)
# A settle whose conditions `_conditions_hold` checked in the same
# transaction (it may settle a checkpoint that is not pending).
_SETTLE_CHECKED: Final = (
    "UPDATE checkpoints SET status = ?, output = ?, error = ?, finished_at = ?, mark = NULL"
    f" WHERE run_id = ? AND seq = ? RETURNING {CHECKPOINT_COLUMNS}"
)
_SET_ERRORS: Final = "UPDATE checkpoints SET errors = ? WHERE run_id = ? AND seq = ?"
_SETTLE_SIGNAL: Final = (
    "UPDATE checkpoints SET status = 'completed', output = ?, error = NULL, finished_at = ?,"
    " mark = NULL WHERE run_id = ? AND seq = ? AND status = 'pending'"
)

_update_run_sql: dict[tuple[str, ...], str] = {}


def _update_run(cur: sqlite3.Cursor, run: Run, fields: tuple[str, ...]) -> None:
    """Write ``fields`` of ``run`` (already checked to be `Run` fields) and its
    due time; only the columns that changed, so untouched indexes stay so."""
    if "input" in fields:
        # The engine never changes an input; the store still can.
        cur.execute("UPDATE run_inputs SET input = ? WHERE run_id = ?", (run.input, run.id))
        fields = tuple(field for field in fields if field != "input")
    sql = _update_run_sql.get(fields)
    if sql is None:
        assignments = "".join(f"{field} = ?, " for field in fields)
        sql = _update_run_sql[fields] = f"UPDATE runs SET {assignments}due_at = ? WHERE id = ?"
    values = [encode_run_field(field, getattr(run, field)) for field in fields]
    values.append(run_due_at(run))
    values.append(run.id)
    cur.execute(sql, values)


def _select_run(cur: sqlite3.Cursor, run_id: str, *, with_input: bool = True) -> Run | None:
    """The run, or None; with ``with_input=False`` its input reads as ``''``."""
    row = cur.execute(_SELECT_RUN if with_input else _SELECT_RUN_STATE, (run_id,)).fetchone()
    return None if row is None else load_run(row)


_LEASE_FIELDS: Final = ("lease_owner", "lease_expiry", "recoveries")
_TURN_FIELDS: Final = ("lease_owner", "lease_expiry", "recoveries", "status")


# -- operations (run in a trip) ----------------------------------------------------


_UPSERT_RECORD: Final = upsert_record("?")


def _create_run(cur: sqlite3.Cursor, op: _ops.CreateRun) -> Any:
    row = run_row(op.run)
    cur.execute(_INSERT_RUN, row[:_INPUT_INDEX] + row[_INPUT_INDEX + 1 :])
    if cur.rowcount == 1:
        cur.execute(_INSERT_INPUT, (op.run.id, op.run.input))
        if op.checkpoints:
            cur.executemany(
                _UPSERT_CHECKPOINT,
                [(cp.run_id, cp.seq, *checkpoint_values(cp)) for cp in op.checkpoints],
            )
        if op.records:
            cur.executemany(_UPSERT_RECORD, [record_values(r) for r in op.records])
        return (op.run, True)
    return (_select_run(cur, op.run.id), False)


def _update(cur: sqlite3.Cursor, op: _ops.UpdateRun) -> Any:
    current = _select_run(cur, op.run_id, with_input=False)
    problem = expectation_failure(current, op)
    if problem is not None:
        if op.strict:
            raise problem
        return False
    assert current is not None
    # evolve() rejects names that are not Run fields, which also keeps them
    # out of the SQL text built from them.
    _update_run(cur, attrs.evolve(current, **op.changes), tuple(op.changes))
    return True


def _claim(cur: sqlite3.Cursor, op: _ops.ClaimCheckpoint) -> Any:
    cp = op.checkpoint
    cur.execute(
        _CLAIM_CHECKPOINT, (*checkpoint_values(cp), cp.run_id, cp.seq, op.attempt, op.attempt)
    )
    return cur.rowcount == 1


def _conditions_hold(
    cur: sqlite3.Cursor, op: _ops.SettleCheckpoint | _ops.RescheduleCheckpoint
) -> Checkpoint | None:
    """The pending checkpoint (or one failed with ``or_failed_with``), if the
    attempt, kind, name, execution and run-status conditions of a settle or
    reschedule hold."""
    rows = cur.execute(_SELECT_CHECKPOINTS, (op.run_id, op.seq, op.seq)).fetchall()
    if not rows:
        return None
    cp = load_checkpoint(rows[0])
    if not op_applies(cp, op):
        return None
    if op.unless_run_status:
        row = cur.execute("SELECT status FROM runs WHERE id = ?", (op.run_id,)).fetchone()
        if row is not None and row[0] in op.unless_run_status:
            return None
    return cp


def _settle(cur: sqlite3.Cursor, op: _ops.SettleCheckpoint) -> Any:
    conditional = (
        op.attempt is not None
        or op.unless_run_status
        or op.kind is not None
        or op.name is not None
        or op.or_failed_with is not None
        or op.execution is not None
        or op.unless_rerun
    )
    if conditional and _conditions_hold(cur, op) is None:
        return None
    rows = cur.execute(
        _SETTLE_CHECKPOINT if op.or_failed_with is None else _SETTLE_CHECKED,
        (op.status, op.output, dump_error(op.error), op.finished_at, op.run_id, op.seq),
    ).fetchall()
    if not rows:
        return None
    settled = load_checkpoint(rows[0])
    if op.append_error and op.error is not None:
        # Written in the same transaction, so the row is as just settled.
        settled = attrs.evolve(settled, errors=(*settled.errors, op.error))
        cur.execute(_SET_ERRORS, (dump_errors(settled.errors), op.run_id, op.seq))
    return settled


def _reschedule(cur: sqlite3.Cursor, op: _ops.RescheduleCheckpoint) -> Any:
    cp = _conditions_hold(cur, op)
    if cp is None:
        return None
    retry = rescheduled(cp, op)
    cur.execute(
        "UPDATE checkpoints SET attempts = ?, errors = ?, started_at = NULL, wake_at = ?"
        " WHERE run_id = ? AND seq = ?",
        (retry.attempts, dump_errors(retry.errors), op.wake_at, op.run_id, op.seq),
    )
    return retry


def _slot_done(cur: sqlite3.Cursor, run_id: str, seq: int) -> bool:
    """Whether a step (or, at `WHOLE_RUN`, a run) no longer needs a queue
    slot: its checkpoint is settled (or gone), or its run ended."""
    if seq == _ops.WHOLE_RUN:
        found = cur.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        return found is None or found[0] in TERMINAL_STATUSES
    row = cur.execute(
        "SELECT c.status, r.status FROM checkpoints c LEFT JOIN runs r ON r.id = c.run_id"
        " WHERE c.run_id = ? AND c.seq = ?",
        (run_id, seq),
    ).fetchone()
    return row is None or row[0] != "pending" or row[1] in TERMINAL_STATUSES


def _unmark(cur: sqlite3.Cursor, run_id: str, seq: int) -> None:
    # Due at once: its run's next turn sends it, not its next look.
    cur.execute(
        "UPDATE checkpoints SET mark = NULL, error = NULL, wake_at = NULL"
        " WHERE run_id = ? AND seq = ?"
        " AND status = 'pending' AND json_extract(mark, '$.code') = ?",
        (run_id, seq, _ops.QUEUED),
    )


def _admit(cur: sqlite3.Cursor, op: _ops.AdmitToQueue) -> Any:
    held = cur.execute(
        "SELECT 1 FROM queue_slots WHERE queue = ? AND run_id = ? AND seq = ?",
        (op.queue, op.run_id, op.seq),
    ).fetchone()
    if held is not None:
        _unmark(cur, op.run_id, op.seq)
        return True
    if op.seq == _ops.WHOLE_RUN and _slot_done(cur, op.run_id, op.seq):
        return False  # its run ended: it needs no slot
    (holders,) = cur.execute(
        "SELECT COUNT(*) FROM queue_slots WHERE queue = ?", (op.queue,)
    ).fetchone()
    ahead = cur.execute(
        "SELECT 1 FROM queue_waiters WHERE queue = ? AND priority > ?"
        " AND NOT (run_id = ? AND seq = ?) LIMIT 1",
        (op.queue, op.priority, op.run_id, op.seq),
    ).fetchone()
    if holders < op.limit and ahead is None:
        cur.execute(
            "INSERT INTO queue_slots (queue, run_id, seq) VALUES (?, ?, ?)",
            (op.queue, op.run_id, op.seq),
        )
        cur.execute(
            "DELETE FROM queue_waiters WHERE queue = ? AND run_id = ? AND seq = ?",
            (op.queue, op.run_id, op.seq),
        )
        _unmark(cur, op.run_id, op.seq)
        if op.seq == _ops.WHOLE_RUN:
            hold_slot(cur, "?", op.run_id, op.queue)
        return True
    cur.execute(
        "INSERT INTO queue_waiters (queue, run_id, seq, priority, at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (queue, run_id, seq) DO NOTHING",
        (op.queue, op.run_id, op.seq, op.priority, op.at),
    )
    return False


def _release_slot(cur: sqlite3.Cursor, op: _ops.ReleaseQueueSlot) -> Any:
    if op.seq != _ops.WHOLE_RUN and not _slot_done(cur, op.run_id, op.seq):
        return []
    cur.execute(
        "DELETE FROM queue_slots WHERE queue = ? AND run_id = ? AND seq = ?",
        (op.queue, op.run_id, op.seq),
    )
    if cur.rowcount != 1:
        return []
    if op.seq == _ops.WHOLE_RUN:
        free_slot(cur, "?", op.run_id)
    (holders,) = cur.execute(
        "SELECT COUNT(*) FROM queue_slots WHERE queue = ?", (op.queue,)
    ).fetchone()
    admitted: list[tuple[str, int]] = []
    while holders < op.limit:
        row = cur.execute(
            "SELECT id, run_id, seq FROM queue_waiters WHERE queue = ?"
            " ORDER BY priority DESC, at, id LIMIT 1",
            (op.queue,),
        ).fetchone()
        if row is None:
            break
        waiter_id, run_id, seq = row
        cur.execute("DELETE FROM queue_waiters WHERE id = ?", (waiter_id,))
        if _slot_done(cur, run_id, seq):
            continue  # it ended while waiting: it needs no slot
        cur.execute(
            "INSERT INTO queue_slots (queue, run_id, seq) VALUES (?, ?, ?)", (op.queue, run_id, seq)
        )
        _unmark(cur, run_id, seq)
        if seq == _ops.WHOLE_RUN:
            hold_slot(cur, "?", run_id, op.queue)
        admitted.append((run_id, seq))
        holders += 1
    return admitted


def _delete_checkpoints(cur: sqlite3.Cursor, op: _ops.DeleteCheckpoints) -> Any:
    cur.executemany(
        "DELETE FROM checkpoints WHERE run_id = ? AND seq = ?",
        [(op.run_id, seq) for seq in op.seqs],
    )
    return None


def _wait_signal(cur: sqlite3.Cursor, op: _ops.WaitSignal) -> Any:
    row = cur.execute(
        "SELECT id, payload FROM buffered_signals WHERE token = ? ORDER BY id LIMIT 1",
        (op.token,),
    ).fetchone()
    if row is not None:
        payload_id, payload = row
        cur.execute("DELETE FROM buffered_signals WHERE id = ?", (payload_id,))
        # Settled in the same write that consumes the payload, so a consumed
        # signal cannot be lost.
        cur.execute(_SETTLE_SIGNAL, (payload, op.at, op.run_id, op.seq))
        return payload
    cur.execute(
        "INSERT OR REPLACE INTO signal_waiters (token, run_id, seq) VALUES (?, ?, ?)",
        (op.token, op.run_id, op.seq),
    )
    return None


def _deliver_signal(cur: sqlite3.Cursor, op: _ops.DeliverSignal) -> Any:
    rows = cur.execute(
        "DELETE FROM signal_waiters WHERE token = ? RETURNING run_id, seq", (op.token,)
    ).fetchall()
    if rows:
        run_id, seq = rows[0]
        cur.execute(_SETTLE_SIGNAL, (op.payload, op.at, run_id, seq))
        if cur.rowcount == 1:
            return (run_id, seq)
    # No waiter, or its checkpoint settled already (a timeout won the race):
    # keep the payload for the next wait on this token.
    cur.execute(
        "INSERT INTO buffered_signals (token, payload) VALUES (?, ?)", (op.token, op.payload)
    )
    return None


def _remove_signal_waiter(cur: sqlite3.Cursor, op: _ops.RemoveSignalWaiter) -> Any:
    cur.execute("DELETE FROM signal_waiters WHERE token = ?", (op.token,))
    return None


def _lock_run(cur: sqlite3.Cursor, op: _ops.LockRun) -> Any:
    current = _select_run(cur, op.run_id, with_input=False)
    if current is None:
        return False
    locked = take_lease(current, op.owner, op.expiry, op.now)
    if locked is None:
        return False
    _update_run(cur, locked, _LEASE_FIELDS)
    return True


def _release_run(cur: sqlite3.Cursor, op: _ops.ReleaseRun) -> Any:
    current = _select_run(cur, op.run_id, with_input=False)
    if current is not None and current.lease_owner == op.owner:
        released = attrs.evolve(current, lease_owner=None, lease_expiry=None)
        _update_run(cur, released, _LEASE_FIELDS[:2])
    return None


_OPS: Final[dict[type[Any], Callable[[sqlite3.Cursor, Any], Any]]] = {
    _ops.CreateRun: _create_run,
    _ops.UpdateRun: _update,
    _ops.ClaimCheckpoint: _claim,
    _ops.SettleCheckpoint: _settle,
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
    **hook_ops("?"),
    **record_ops("?"),
    **value_ops("?"),
}


def apply_ops(cur: sqlite3.Cursor, ops: Sequence[Op]) -> list[Any]:
    results: list[Any] = []
    # A fan records its members as a row of puts: write each row of
    # consecutive puts with one executemany, before the next other operation.
    puts: list[tuple[Any, ...]] = []
    for op in ops:
        if isinstance(op, _ops.PutCheckpoint):
            cp = op.checkpoint
            puts.append((cp.run_id, cp.seq, *checkpoint_values(cp)))
            results.append(None)
            continue
        if puts:
            cur.executemany(_UPSERT_CHECKPOINT, puts)
            puts = []
        handler = _OPS.get(type(op))
        if handler is None:
            raise TypeError(f"unknown store operation {op!r}")
        results.append(handler(cur, op))
    if puts:
        cur.executemany(_UPSERT_CHECKPOINT, puts)
    return results


_SELECT_RECORDS: Final = select_records("?")


def begin_turn(
    cur: sqlite3.Cursor, run_id: str, owner: str, expiry: float, now: float
) -> tuple[TurnState | None, Counts | None]:
    current = _select_run(cur, run_id)
    if current is None or current.status in TERMINAL_STATUSES:
        return None, None
    status = "running" if current.status in ("pending", "suspended") else current.status
    locked = take_lease(current, owner, expiry, now, status=status)
    if locked is None:
        return None, None
    _update_run(cur, locked, _TURN_FIELDS)
    rows = cur.execute(_SELECT_CHECKPOINTS, (run_id, INT64_MIN, INT64_MAX)).fetchall()
    checkpoints = tuple(map(load_checkpoint, rows))
    records = tuple(map(load_record, cur.execute(_SELECT_RECORDS, (run_id,)).fetchall()))
    state = TurnState(run=locked, checkpoints=checkpoints, records=records)
    return state, (1, 0, 1, len(checkpoints))


# -- reads --------------------------------------------------------------------------


def _status_in(statuses: list[str]) -> tuple[str, list[Any]]:
    return f"r.status IN ({', '.join('?' * len(statuses))})", statuses


def count_checkpoints_query(
    run_id: str,
    from_seq: int,
    to_seq: int,
    statuses: Collection[CheckpointStatus],
    limit: int | None = None,
) -> tuple[str, list[Any]]:
    """The statement and parameters of `Store.count_checkpoints`; the index
    ``checkpoints_status`` answers it."""
    wanted = sorted(set(statuses))
    matching = (
        "FROM checkpoints WHERE run_id = ?"
        f" AND status IN ({', '.join('?' * len(wanted))}) AND seq >= ? AND seq <= ?"
    )
    params: list[Any] = [run_id, *wanted, from_seq, to_seq]
    if limit is None:
        return f"SELECT COUNT(*) {matching}", params
    # The barrier only needs to know whether a threshold is reached: stop
    # reading the index there.
    params.append(max(limit, 0))
    return f"SELECT COUNT(*) FROM (SELECT 1 {matching} LIMIT ?)", params


DIALECT: Final = Dialect[sqlite3.Cursor](
    param="?",
    select_runs=f"SELECT {_RUN_SELECT} FROM {_RUNS}",
    select_run=_SELECT_RUN,
    select_checkpoints=_SELECT_CHECKPOINTS,
    list_due_runs="SELECT id FROM runs WHERE due_at <= ? ORDER BY due_at, id LIMIT ?",
    next_due_time="SELECT MIN(due_at) FROM runs WHERE due_at IS NOT NULL",
    list_stalled_runs="""
        SELECT id FROM runs
        WHERE status = 'suspended' AND wake_at IS NULL AND NOT EXISTS (
            SELECT 1 FROM checkpoints c
            WHERE c.run_id = runs.id AND c.status IN ('pending', 'running')
            AND NOT (c.kind = 'child' AND EXISTS (
                SELECT 1 FROM runs k WHERE k.id = c.child_id
                AND (k.parent_seq IS NULL OR k.parent_seq <> c.seq)
            ))
        )
        ORDER BY created_at, id LIMIT ?
        """,
    buffered_signals="SELECT payload FROM buffered_signals WHERE token = ? ORDER BY id",
    signal_waiter="SELECT run_id, seq FROM signal_waiters WHERE token = ?",
    status_in=_status_in,
    count_checkpoints_query=count_checkpoints_query,
    apply_ops=apply_ops,
    begin_turn=begin_turn,
    run_columns=_RUN_SELECT,
    run_from=_RUNS,
    run_tables=("run_inputs", *RUN_TABLES, RECORDS_TABLE),
)
"""The SQLite store's statements, for `SQLStore`."""
