"""The SQLite store: one file, one connection, writes committed in groups.

The database is opened in WAL mode with ``synchronous=FULL`` (an acknowledged
write survives a power cut) and a busy timeout, so several engine processes on
one host can share the file. sqlite3 blocks, so under Trio's own clock it
never runs on the Trio thread: every call goes to a worker thread through
`trio.to_thread.run_sync` under a `trio.CapacityLimiter` of one, which also
serializes use of the one connection.

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

Group commit. Every call (a batch of writes from `SQLiteStore.apply` or
`SQLiteStore.begin_turn`, or a read) becomes a *job* on a queue. When no trip
to the thread is in flight, the caller that finds its job still queued leads
one: it takes every queued job and runs them all in the thread, reads first
and then the writes inside ONE transaction, each write batch in its own
savepoint. A batch that fails (a `WriteConflict`, a `LeaseLostError`) is
rolled back to its savepoint alone and its caller gets that exception; the
others commit together, with one fsync. Callers whose jobs rode in another
caller's trip are woken with their results and make no trip of their own.
On the Trio thread (see above) a trip is one synchronous call, which no other
task can interleave with; its leader first yields once, so that the jobs of
tasks that are ready to run join its trip, as they would join a trip waiting
for the worker thread.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, final
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import trio

# Private, but the one way to tell Trio's own clock from a test's; trio is
# pinned, and the tests of this module fail if this stops telling them apart.
from trio._core._run import SystemClock as _SystemClock

from .._exceptions import InvalidURLError, LeaseLostError, StoreError
from .._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    CheckpointStatus,
    Run,
    RunStatus,
    dump_error,
    dump_errors,
)
from .._urls import mask_url
from ._base import (
    STALL_IGNORED_PREFIX,
    AdmitToQueue,
    ClaimCheckpoint,
    CreateRun,
    DeleteCheckpoints,
    DeliverSignal,
    LockRun,
    Op,
    PutCheckpoint,
    ReleaseQueueSlot,
    ReleaseRun,
    RemoveSignalWaiter,
    RescheduleCheckpoint,
    SettleCheckpoint,
    StoreHelpers,
    StoreStatistics,
    TurnState,
    UpdateRun,
    WaitSignal,
    WriteConflict,
    run_due_at,
)
from ._rows import CHECKPOINT_COLUMNS as _CHECKPOINT_COLUMNS
from ._rows import INT64_MAX as _INT64_MAX
from ._rows import INT64_MIN as _INT64_MIN
from ._rows import RUN_FIELDS as _RUN_FIELDS
from ._rows import checkpoint_values as _checkpoint_values
from ._rows import dump_tags as _dump_tags
from ._rows import load_checkpoint as _load_checkpoint
from ._rows import load_run as _load_run
from ._rows import run_row as _run_row

SCHEMA_VERSION: Final = 2
"""The schema version this module writes, kept in ``PRAGMA user_version``.

Version 2 moved runs' inputs out of ``runs`` into ``run_inputs``; a version 1
file is migrated when it is opened."""

BUSY_TIMEOUT: Final = 10.0
"""Seconds a statement waits for another process's lock before failing."""

_SYNCHRONOUS_MODES: Final = {"FULL": 2, "NORMAL": 1}

_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        version TEXT NOT NULL,
        namespace TEXT NOT NULL,
        status TEXT NOT NULL,
        output TEXT,
        error TEXT,
        tags TEXT NOT NULL,
        parent_id TEXT,
        parent_seq INTEGER,
        lease_owner TEXT,
        lease_expiry REAL,
        wake_at REAL,
        compensate INTEGER NOT NULL,
        recoveries INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        due_at REAL
    )
    """,
    # A run's input, written once, when the run is created. SQLite writes a
    # row whole, overflow pages and all, whichever columns change: in the
    # runs row, which several writes of every turn change, a 5 MB input was
    # written again by each of them.
    """
    CREATE TABLE IF NOT EXISTS run_inputs (
        run_id TEXT PRIMARY KEY,
        input TEXT NOT NULL
    )
    """,
    # Partial: terminal runs (most rows, in time) are never due and stay out
    # of the index. Ordered by id too, so ties come out as in MemoryStore and
    # `list_due_runs` reads the index alone.
    "CREATE INDEX IF NOT EXISTS runs_due ON runs (due_at, id) WHERE due_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at, id)",
    # Partial: the few runs a reconcile pass may find stalled.
    """
    CREATE INDEX IF NOT EXISTS runs_waiting ON runs (created_at, id)
    WHERE status = 'suspended' AND wake_at IS NULL
    """,
    """
    CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL
    """,
    """
    CREATE TABLE IF NOT EXISTS checkpoints (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        error TEXT,
        errors TEXT,
        attempts INTEGER NOT NULL,
        worker_group TEXT,
        child_id TEXT,
        compensation TEXT,
        parallel_group INTEGER,
        parallel_size INTEGER,
        parallel_mode TEXT,
        wake_at REAL,
        enqueued_at REAL,
        started_at REAL,
        finished_at REAL,
        PRIMARY KEY (run_id, seq)
    )
    """,
    # The join barrier counts a fan's settled members by status over a seq
    # range; this index answers that without touching the rows.
    "CREATE INDEX IF NOT EXISTS checkpoints_status ON checkpoints (run_id, status, seq)",
    """
    CREATE TABLE IF NOT EXISTS signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    )
    """,
    # The rowid orders a token's payloads: a new row's rowid is larger than
    # every row present, so FIFO order holds without AUTOINCREMENT.
    """
    CREATE TABLE IF NOT EXISTS buffered_signals (
        id INTEGER PRIMARY KEY,
        token TEXT NOT NULL,
        payload TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS buffered_signals_token ON buffered_signals (token, id)",
    # Flow-control queues: who holds a slot, and who waits in line (by
    # priority, then arrival, which the rowid orders).
    """
    CREATE TABLE IF NOT EXISTS queue_slots (
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (queue, run_id, seq)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS queue_waiters (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        at REAL NOT NULL,
        UNIQUE (queue, run_id, seq)
    )
    """,
    "CREATE INDEX IF NOT EXISTS queue_waiters_line ON queue_waiters (queue, priority DESC, at, id)",
)

_MIGRATIONS: Final = {
    # From version 1, which kept the input in the runs row.
    1: (
        "INSERT INTO run_inputs (run_id, input) SELECT id, input FROM runs",
        "ALTER TABLE runs DROP COLUMN input",
    ),
}

# A run is its runs row joined with its input.
_RUNS: Final = "runs r JOIN run_inputs i ON i.run_id = r.id"
_RUN_SELECT: Final = ", ".join("i.input" if f == "input" else f"r.{f}" for f in _RUN_FIELDS)
_SELECT_RUN: Final = f"SELECT {_RUN_SELECT} FROM {_RUNS} WHERE r.id = ?"
# The run without its input (read as ''), for writes that only check and
# change its state: reading a large input there would be wasted.
_SELECT_RUN_STATE: Final = (
    "SELECT "
    + ", ".join("''" if f == "input" else f"r.{f}" for f in _RUN_FIELDS)
    + " FROM runs r WHERE r.id = ?"
)
_INPUT_INDEX: Final = _RUN_FIELDS.index("input")
_INSERT_RUN: Final = (
    "INSERT INTO runs ("
    + ", ".join(f for f in _RUN_FIELDS if f != "input")
    # As many values as fields: all but the input, and due_at.
    + f", due_at) VALUES ({', '.join('?' * len(_RUN_FIELDS))})"
    " ON CONFLICT (id) DO NOTHING"
)
_INSERT_INPUT: Final = "INSERT INTO run_inputs (run_id, input) VALUES (?, ?)"
_SELECT_CHECKPOINTS: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints"
    " WHERE run_id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
)
_UPSERT_CHECKPOINT: Final = (
    f"INSERT INTO checkpoints ({_CHECKPOINT_COLUMNS}) VALUES ({', '.join('?' * 20)})"
    " ON CONFLICT (run_id, seq) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _CHECKPOINT_COLUMNS.split(", ")[2:])
)
_CLAIM_CHECKPOINT: Final = (
    "UPDATE checkpoints SET "
    + ", ".join(f"{column} = ?" for column in _CHECKPOINT_COLUMNS.split(", ")[2:])
    + " WHERE run_id = ? AND seq = ? AND status = 'pending'"
)
_SETTLE_CHECKPOINT: Final = (
    "UPDATE checkpoints SET status = ?, output = ?, error = ?, finished_at = ?"
    f" WHERE run_id = ? AND seq = ? AND status = 'pending' RETURNING {_CHECKPOINT_COLUMNS}"
)
# A settle whose conditions `_conditions_hold` checked in the same
# transaction (it may settle a checkpoint that is not pending).
_SETTLE_CHECKED: Final = (
    "UPDATE checkpoints SET status = ?, output = ?, error = ?, finished_at = ?"
    f" WHERE run_id = ? AND seq = ? RETURNING {_CHECKPOINT_COLUMNS}"
)
_SETTLE_SIGNAL: Final = (
    "UPDATE checkpoints SET status = 'completed', output = ?, error = NULL, finished_at = ?"
    " WHERE run_id = ? AND seq = ? AND status = 'pending'"
)

# What a job adds to the statistics once it is committed:
# (batches, ops, run_rows_read, checkpoint_rows_read).
_Counts = tuple[int, int, int, int]
_Work = Callable[[sqlite3.Cursor], tuple[Any, "_Counts | None"]]


_RUN_ENCODERS: Final[dict[str, Callable[[Any], Any]]] = {
    "error": dump_error,
    "tags": _dump_tags,
}
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
    values = []
    for field in fields:
        value = getattr(run, field)
        encode = _RUN_ENCODERS.get(field)
        values.append(value if encode is None else encode(value))
    values.append(run_due_at(run))
    values.append(run.id)
    cur.execute(sql, values)


def _select_run(cur: sqlite3.Cursor, run_id: str, *, with_input: bool = True) -> Run | None:
    """The run, or None; with ``with_input=False`` its input reads as ``''``."""
    row = cur.execute(_SELECT_RUN if with_input else _SELECT_RUN_STATE, (run_id,)).fetchone()
    return None if row is None else _load_run(row)


def _take_lease(run: Run, owner: str, expiry: float, now: float, **changes: Any) -> Run | None:
    """``run`` with its lease taken or extended by ``owner`` (and ``changes``
    made), or None while another owner holds a live lease (the rules of
    `LockRun`)."""
    if run.lease_owner is not None and run.lease_owner != owner:
        if run.lease_expiry is not None and run.lease_expiry > now:
            return None
        recoveries = run.recoveries + 1
    else:
        recoveries = run.recoveries
    return attrs.evolve(
        run, lease_owner=owner, lease_expiry=expiry, recoveries=recoveries, **changes
    )


_LEASE_FIELDS: Final = ("lease_owner", "lease_expiry", "recoveries")
_TURN_FIELDS: Final = ("lease_owner", "lease_expiry", "recoveries", "status")


def _holds(run: Run, owner: str, now: float | None) -> bool:
    if run.lease_owner != owner:
        return False
    return now is None or run.lease_expiry is None or run.lease_expiry > now


# -- operations (run in a trip) ----------------------------------------------------


def _create_run(cur: sqlite3.Cursor, op: CreateRun) -> Any:
    row = _run_row(op.run)
    cur.execute(_INSERT_RUN, row[:_INPUT_INDEX] + row[_INPUT_INDEX + 1 :])
    if cur.rowcount == 1:
        cur.execute(_INSERT_INPUT, (op.run.id, op.run.input))
        return (op.run, True)
    return (_select_run(cur, op.run.id), False)


def _update(cur: sqlite3.Cursor, op: UpdateRun) -> Any:
    run_id = op.run_id
    current = _select_run(cur, run_id, with_input=False)
    problem: StoreError | None = None
    if current is None:
        problem = WriteConflict(f"run {run_id!r} does not exist")
    elif op.expect_status is not None and current.status not in op.expect_status:
        problem = WriteConflict(
            f"run {run_id!r} is {current.status}, expected one of {sorted(op.expect_status)}"
        )
    elif op.expect_owner is not None and not _holds(current, op.expect_owner, op.now):
        problem = LeaseLostError(
            f"lease of run {run_id!r} is no longer held by {op.expect_owner!r}"
        )
    if problem is not None:
        if op.strict:
            raise problem
        return False
    assert current is not None
    # evolve() rejects names that are not Run fields, which also keeps them
    # out of the SQL text built from them.
    _update_run(cur, attrs.evolve(current, **op.changes), tuple(op.changes))
    return True


def _claim(cur: sqlite3.Cursor, op: ClaimCheckpoint) -> Any:
    cp = op.checkpoint
    cur.execute(_CLAIM_CHECKPOINT, (*_checkpoint_values(cp), cp.run_id, cp.seq))
    return cur.rowcount == 1


def _conditions_hold(
    cur: sqlite3.Cursor,
    run_id: str,
    seq: int,
    attempt: int | None,
    unless_run_status: frozenset[RunStatus] | None,
    kind: str | None = None,
    name: str | None = None,
    or_failed_with: str | None = None,
) -> Checkpoint | None:
    """The pending checkpoint (or one failed with ``or_failed_with``), if the
    attempt, kind, name and run-status conditions of a settle or reschedule
    hold."""
    rows = cur.execute(_SELECT_CHECKPOINTS, (run_id, seq, seq)).fetchall()
    if not rows:
        return None
    cp = _load_checkpoint(rows[0])
    frozen = (
        or_failed_with is not None
        and cp.status == "failed"
        and cp.error is not None
        and cp.error.code == or_failed_with
    )
    if not (cp.status == "pending" or frozen):
        return None
    if attempt is not None and cp.attempts != attempt:
        return None
    if (kind is not None and cp.kind != kind) or (name is not None and cp.name != name):
        return None
    if unless_run_status:
        row = cur.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is not None and row[0] in unless_run_status:
            return None
    return cp


def _settle(cur: sqlite3.Cursor, op: SettleCheckpoint) -> Any:
    conditional = (
        op.attempt is not None
        or op.unless_run_status
        or op.kind is not None
        or op.name is not None
        or op.or_failed_with is not None
    )
    if conditional:
        cp = _conditions_hold(
            cur,
            op.run_id,
            op.seq,
            op.attempt,
            op.unless_run_status,
            op.kind,
            op.name,
            op.or_failed_with,
        )
        if cp is None:
            return None
    rows = cur.execute(
        _SETTLE_CHECKPOINT if op.or_failed_with is None else _SETTLE_CHECKED,
        (op.status, op.output, dump_error(op.error), op.finished_at, op.run_id, op.seq),
    ).fetchall()
    return _load_checkpoint(rows[0]) if rows else None


def _reschedule(cur: sqlite3.Cursor, op: RescheduleCheckpoint) -> Any:
    cp = _conditions_hold(
        cur, op.run_id, op.seq, op.attempt, op.unless_run_status, op.kind, op.name
    )
    if cp is None:
        return None
    rescheduled = attrs.evolve(
        cp,
        attempts=op.attempt + 1,
        errors=(*cp.errors, op.error),
        started_at=None,
        wake_at=op.wake_at,
    )
    cur.execute(
        "UPDATE checkpoints SET attempts = ?, errors = ?, started_at = NULL, wake_at = ?"
        " WHERE run_id = ? AND seq = ?",
        (rescheduled.attempts, dump_errors(rescheduled.errors), op.wake_at, op.run_id, op.seq),
    )
    return rescheduled


def _slot_done(cur: sqlite3.Cursor, run_id: str, seq: int) -> bool:
    """Whether a step no longer needs a queue slot: its checkpoint is settled
    (or gone), or its run ended."""
    row = cur.execute(
        "SELECT c.status, r.status FROM checkpoints c LEFT JOIN runs r ON r.id = c.run_id"
        " WHERE c.run_id = ? AND c.seq = ?",
        (run_id, seq),
    ).fetchone()
    return row is None or row[0] != "pending" or row[1] in TERMINAL_STATUSES


def _unmark(cur: sqlite3.Cursor, run_id: str, seq: int) -> None:
    # Due at once: its run's next turn sends it, not its next look.
    cur.execute(
        "UPDATE checkpoints SET error = NULL, wake_at = NULL WHERE run_id = ? AND seq = ?"
        " AND status = 'pending' AND json_extract(error, '$.code') = 'queued'",
        (run_id, seq),
    )


def _admit(cur: sqlite3.Cursor, op: AdmitToQueue) -> Any:
    held = cur.execute(
        "SELECT 1 FROM queue_slots WHERE queue = ? AND run_id = ? AND seq = ?",
        (op.queue, op.run_id, op.seq),
    ).fetchone()
    if held is not None:
        _unmark(cur, op.run_id, op.seq)
        return True
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
        return True
    cur.execute(
        "INSERT INTO queue_waiters (queue, run_id, seq, priority, at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (queue, run_id, seq) DO NOTHING",
        (op.queue, op.run_id, op.seq, op.priority, op.at),
    )
    return False


def _release_slot(cur: sqlite3.Cursor, op: ReleaseQueueSlot) -> Any:
    if not _slot_done(cur, op.run_id, op.seq):
        return []
    cur.execute(
        "DELETE FROM queue_slots WHERE queue = ? AND run_id = ? AND seq = ?",
        (op.queue, op.run_id, op.seq),
    )
    if cur.rowcount != 1:
        return []
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
        admitted.append((run_id, seq))
        holders += 1
    return admitted


def _delete_checkpoints(cur: sqlite3.Cursor, op: DeleteCheckpoints) -> Any:
    cur.executemany(
        "DELETE FROM checkpoints WHERE run_id = ? AND seq = ?",
        [(op.run_id, seq) for seq in op.seqs],
    )
    return None


def _wait_signal(cur: sqlite3.Cursor, op: WaitSignal) -> Any:
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


def _deliver_signal(cur: sqlite3.Cursor, op: DeliverSignal) -> Any:
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


def _remove_signal_waiter(cur: sqlite3.Cursor, op: RemoveSignalWaiter) -> Any:
    cur.execute("DELETE FROM signal_waiters WHERE token = ?", (op.token,))
    return None


def _lock_run(cur: sqlite3.Cursor, op: LockRun) -> Any:
    current = _select_run(cur, op.run_id, with_input=False)
    if current is None:
        return False
    locked = _take_lease(current, op.owner, op.expiry, op.now)
    if locked is None:
        return False
    _update_run(cur, locked, _LEASE_FIELDS)
    return True


def _release_run(cur: sqlite3.Cursor, op: ReleaseRun) -> Any:
    current = _select_run(cur, op.run_id, with_input=False)
    if current is not None and current.lease_owner == op.owner:
        released = attrs.evolve(current, lease_owner=None, lease_expiry=None)
        _update_run(cur, released, _LEASE_FIELDS[:2])
    return None


_OPS: Final[dict[type[Any], Callable[[sqlite3.Cursor, Any], Any]]] = {
    CreateRun: _create_run,
    UpdateRun: _update,
    ClaimCheckpoint: _claim,
    SettleCheckpoint: _settle,
    RescheduleCheckpoint: _reschedule,
    AdmitToQueue: _admit,
    ReleaseQueueSlot: _release_slot,
    DeleteCheckpoints: _delete_checkpoints,
    WaitSignal: _wait_signal,
    DeliverSignal: _deliver_signal,
    RemoveSignalWaiter: _remove_signal_waiter,
    LockRun: _lock_run,
    ReleaseRun: _release_run,
}


def _apply_ops(cur: sqlite3.Cursor, ops: Sequence[Op]) -> list[Any]:
    results: list[Any] = []
    # A fan records its members as a row of puts: write each row of
    # consecutive puts with one executemany, before the next other operation.
    puts: list[tuple[Any, ...]] = []
    for op in ops:
        if isinstance(op, PutCheckpoint):
            cp = op.checkpoint
            puts.append((cp.run_id, cp.seq, *_checkpoint_values(cp)))
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


def _begin_turn(
    cur: sqlite3.Cursor, run_id: str, owner: str, expiry: float, now: float
) -> tuple[TurnState | None, _Counts | None]:
    current = _select_run(cur, run_id)
    if current is None or current.status in TERMINAL_STATUSES:
        return None, None
    status = "running" if current.status in ("pending", "suspended") else current.status
    locked = _take_lease(current, owner, expiry, now, status=status)
    if locked is None:
        return None, None
    _update_run(cur, locked, _TURN_FIELDS)
    rows = cur.execute(_SELECT_CHECKPOINTS, (run_id, _INT64_MIN, _INT64_MAX)).fetchall()
    checkpoints = tuple(map(_load_checkpoint, rows))
    return TurnState(run=locked, checkpoints=checkpoints), (1, 0, 1, len(checkpoints))


# -- group commit -------------------------------------------------------------------


def _threads_keep_time() -> bool:
    """Whether sqlite3 calls may go to worker threads without moving the
    current Trio run's clock: only under Trio's own clock (see the module's
    docstring)."""
    return isinstance(trio.lowlevel.current_clock(), _SystemClock)


@final
@attrs.define(slots=True, eq=False)
class _Job:
    """One caller's unit of work, and its outcome once a trip ran it."""

    work: _Work
    writes: bool
    # Set when a trip took the job (or aclose failed it): from then on it is
    # no longer the caller's to withdraw.
    taken: bool = False
    result: Any = None
    # None when the job adds nothing to the statistics (it failed, or a
    # begin_turn found nothing to do).
    counts: _Counts | None = None
    error: BaseException | None = None
    finished: trio.Event = attrs.Factory(trio.Event)

    def run(self, cur: sqlite3.Cursor) -> bool:
        """Run the work in a trip; return whether it succeeded."""
        try:
            self.result, self.counts = self.work(cur)
        except Exception as exc:
            self.error = exc
            return False
        return True

    def fail(self, error: BaseException) -> None:
        self.result = self.counts = None
        self.error = error

    def unwrap(self) -> Any:
        error, self.error = self.error, None
        if error is None:
            return self.result
        # A value SQLite cannot hold (an integer past 64 bits, a string with a
        # lone surrogate) is refused as a store error too, never let out raw.
        if isinstance(error, sqlite3.Error | OverflowError | UnicodeEncodeError):
            raise StoreError(f"SQLite store failed: {error}") from error
        raise error


@final
class SQLiteStore(StoreHelpers):
    """A `Store` in one SQLite file, shared safely by processes on one host.

    Open it with `open_sqlite_store`; the constructor takes a connection that
    `open_sqlite_store` has prepared (pragmas set, schema checked).

    Attributes:
      path: The database file.
      synchronous: The ``PRAGMA synchronous`` the store runs with: ``"FULL"``
        (the default; a committed write survives a power cut) or ``"NORMAL"``
        (a power cut may lose the last commits, never corrupt the file).
    """

    def __init__(self, connection: sqlite3.Connection, *, path: str, synchronous: str) -> None:
        self.path = path
        # Engines sharing this file share a results queue on the broker.
        self.scope = "sqlite-" + hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:16]
        self.synchronous = synchronous
        self._connection = connection
        self._cursor = connection.cursor()
        self._limiter = trio.CapacityLimiter(1)
        # False under a clock other than Trio's own: then every call runs on
        # the Trio thread (see the module's docstring).
        self._threads = _threads_keep_time()
        self._queue: list[_Job] = []
        # Set while a trip is in flight; set()ed when it ends.
        self._trip: trio.Event | None = None
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
        # Closing must finish even if we are cancelled, or the connection
        # (and the lock on the file) would outlive the store.
        with trio.CancelScope(shield=True):
            while self._trip is not None:
                await self._trip.wait()
            try:
                if self._threads:
                    await trio.to_thread.run_sync(self._connection.close, limiter=self._limiter)
                else:
                    self._connection.close()
            except sqlite3.Error as exc:
                raise StoreError(f"closing the SQLite store failed: {exc}") from exc

    async def _submit(self, work: _Work, *, writes: bool) -> Any:
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(work, writes)
        self._queue.append(job)
        try:
            while not job.taken:
                trip = self._trip
                if trip is None:
                    await self._lead_trip()
                else:
                    await trip.wait()
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
        return job.unwrap()

    async def _lead_trip(self) -> None:
        trip = self._trip = trio.Event()
        jobs: list[_Job] = []
        committed = False
        try:
            if not self._threads:
                # Callers that run before this one resumes queue their jobs
                # and wait for this trip, which takes them along: group commit
                # on the Trio thread. Shielded, so the leader's own job stays
                # queued.
                await trio.lowlevel.cancel_shielded_checkpoint()
            jobs, self._queue = self._queue, []
            for job in jobs:
                job.taken = True
            if not self._threads:
                # One synchronous call: no other task runs, and virtual time
                # does not move, until the trip has committed.
                committed = self._run_trip(jobs)
            else:
                # Shielded: once taken, the jobs must run (or fail) as a
                # whole, and to_thread would raise Cancelled before starting
                # the thread.
                with trio.CancelScope(shield=True):
                    committed = await trio.to_thread.run_sync(
                        self._run_trip, jobs, limiter=self._limiter
                    )
        except BaseException as exc:  # pragma: no cover - a bug in _run_trip
            for job in jobs:
                if job.error is None:
                    job.fail(exc)
            raise
        finally:
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
            self._trip = None
            trip.set()

    def _run_trip(self, jobs: list[_Job]) -> bool:
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
        writes: list[_Job] = []
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

    # -- writes ---------------------------------------------------------------

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        ops = tuple(ops)

        def work(cur: sqlite3.Cursor) -> tuple[Any, _Counts]:
            return _apply_ops(cur, ops), (1, len(ops), 0, 0)

        return await self._submit(work, writes=True)  # type: ignore[no-any-return]

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        def work(cur: sqlite3.Cursor) -> tuple[TurnState | None, _Counts | None]:
            return _begin_turn(cur, run_id, owner, expiry, now)

        return await self._submit(work, writes=True)  # type: ignore[no-any-return]

    # -- reads ----------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        def work(cur: sqlite3.Cursor) -> tuple[Run | None, _Counts]:
            run = _select_run(cur, run_id)
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
            wanted = sorted(set(statuses))
            clauses.append(f"r.status IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        if workflow is not None:
            clauses.append("r.workflow = ?")
            params.append(workflow)
        if parent_id is not None:
            clauses.append("r.parent_id = ?")
            params.append(parent_id)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT {_RUN_SELECT} FROM {_RUNS}{where} ORDER BY r.created_at, r.id LIMIT ?"
        params.append(max(limit, 0))

        def work(cur: sqlite3.Cursor) -> tuple[list[Run], _Counts]:
            runs = [_load_run(row) for row in cur.execute(sql, params).fetchall()]
            return runs, (0, 0, len(runs), 0)

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        params = (
            run_id,
            _INT64_MIN if from_seq is None else from_seq,
            _INT64_MAX if to_seq is None else to_seq,
        )

        def work(cur: sqlite3.Cursor) -> tuple[list[Checkpoint], _Counts]:
            found = [_load_checkpoint(row) for row in cur.execute(_SELECT_CHECKPOINTS, params)]
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
        wanted = sorted(set(statuses))
        matching = (
            "FROM checkpoints WHERE run_id = ?"
            f" AND status IN ({', '.join('?' * len(wanted))}) AND seq >= ? AND seq <= ?"
        )
        params: list[Any] = [run_id, *wanted, from_seq, to_seq]
        if limit is None:
            sql = f"SELECT COUNT(*) {matching}"
        else:
            # The barrier only needs to know whether a threshold is reached:
            # stop reading the index there.
            sql = f"SELECT COUNT(*) FROM (SELECT 1 {matching} LIMIT ?)"
            params.append(max(limit, 0))

        def work(cur: sqlite3.Cursor) -> tuple[int, None]:
            return cur.execute(sql, params).fetchone()[0], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        params = (now, max(limit, 0))

        def work(cur: sqlite3.Cursor) -> tuple[list[str], None]:
            rows = cur.execute(
                "SELECT id FROM runs WHERE due_at <= ? ORDER BY due_at, id LIMIT ?", params
            ).fetchall()
            return [row[0] for row in rows], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def list_stalled_runs(self, limit: int) -> list[str]:
        params = (STALL_IGNORED_PREFIX + "%", max(limit, 0))

        def work(cur: sqlite3.Cursor) -> tuple[list[str], None]:
            rows = cur.execute(
                """
                SELECT id FROM runs
                WHERE status = 'suspended' AND wake_at IS NULL AND NOT EXISTS (
                    SELECT 1 FROM checkpoints
                    WHERE run_id = runs.id AND status IN ('pending', 'running')
                    AND name NOT LIKE ?
                )
                ORDER BY created_at, id LIMIT ?
                """,
                params,
            ).fetchall()
            return [row[0] for row in rows], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def next_due_time(self) -> float | None:
        def work(cur: sqlite3.Cursor) -> tuple[float | None, None]:
            row = cur.execute("SELECT MIN(due_at) FROM runs WHERE due_at IS NOT NULL").fetchone()
            return row[0], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def buffered_signals(self, token: str) -> list[str]:
        def work(cur: sqlite3.Cursor) -> tuple[list[str], None]:
            rows = cur.execute(
                "SELECT payload FROM buffered_signals WHERE token = ? ORDER BY id", (token,)
            ).fetchall()
            return [row[0] for row in rows], None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        def work(cur: sqlite3.Cursor) -> tuple[tuple[str, int] | None, None]:
            row = cur.execute(
                "SELECT run_id, seq FROM signal_waiters WHERE token = ?", (token,)
            ).fetchone()
            return (None if row is None else (row[0], row[1])), None

        return await self._submit(work, writes=False)  # type: ignore[no-any-return]


# -- opening ------------------------------------------------------------------------


def _parse_url(url: str) -> tuple[str, str]:
    """The file path and synchronous mode a ``sqlite://`` URL names."""
    usage = "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
    # Messages show the URL masked and never quote what urllib says about it
    # (a password with an unencoded '#' or '/' would be split across parts).
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidURLError(f"malformed store URL {shown!r} ({usage})") from None
    if parts.scheme.lower() != "sqlite" or not url[len("sqlite:") :].startswith("//"):
        raise InvalidURLError(f"not a sqlite URL: {shown!r} ({usage})")
    if parts.netloc:
        raise InvalidURLError(f"a sqlite URL names a file, not a host: {shown!r} ({usage})")
    if parts.fragment:
        raise InvalidURLError(f"a sqlite URL takes no fragment: {shown!r}")
    path = unquote(parts.path[1:])
    if not path or path.endswith("/"):
        raise InvalidURLError(f"the sqlite URL {shown!r} names no file ({usage})")
    if path == ":memory:" or "\x00" in path:
        raise InvalidURLError(
            f"the sqlite URL {shown!r} must name a file (for an in-memory store use memory://)"
        )
    synchronous = "FULL"
    try:
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURLError(f"malformed query in the sqlite URL {shown!r}") from None
    seen: set[str] = set()
    for name, value in options:
        if name != "synchronous" or name in seen:
            raise InvalidURLError(
                f"unsupported option {name!r} in the sqlite URL {shown!r}"
                " (the only option is synchronous=NORMAL)"
            )
        seen.add(name)
        synchronous = value.upper()
        if synchronous not in _SYNCHRONOUS_MODES:
            raise InvalidURLError(
                f"synchronous={value!r} in the sqlite URL {shown!r} is not supported"
                " (FULL, the default, or NORMAL)"
            )
    return path, synchronous


def _read_version(cur: sqlite3.Cursor, path: str) -> int:
    version: int = cur.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the SQLite store {path!r} has schema version {version}, newer than"
            f" {SCHEMA_VERSION}, the newest this trio-durable knows: upgrade trio-durable"
        )
    return version


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    """Open and prepare the connection (where the store's trips run)."""
    connection = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT,
        # We issue BEGIN, SAVEPOINT and COMMIT ourselves.
        isolation_level=None,
        # One connection used from trio's worker threads, one at a time (the
        # store's limiter sees to that).
        check_same_thread=False,
        cached_statements=256,
    )
    try:
        cur = connection.cursor()
        # Check the version before changing anything in a file we may not
        # understand.
        version = _read_version(cur, path)
        (mode,) = cur.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            raise StoreError(f"the SQLite store {path!r} cannot use WAL mode (it is in {mode})")
        cur.execute(f"PRAGMA synchronous = {synchronous}")
        (level,) = cur.execute("PRAGMA synchronous").fetchone()
        if level != _SYNCHRONOUS_MODES[synchronous]:  # pragma: no cover - sqlite ignored it
            raise StoreError(f"the SQLite store {path!r} refused synchronous={synchronous}")
        if version < SCHEMA_VERSION:
            cur.execute("BEGIN IMMEDIATE")
            # Another process may have created or migrated the schema
            # meanwhile.
            version = _read_version(cur, path)
            if version < SCHEMA_VERSION:
                # Creates what is missing: all of it in a new file, the
                # tables and indexes newer than its version in an older one.
                for statement in _SCHEMA:
                    cur.execute(statement)
                # Version 0 is a new file, which needs no migration.
                for older in range(version, SCHEMA_VERSION) if version else ():
                    for statement in _MIGRATIONS[older]:
                        cur.execute(statement)
                cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            cur.execute("COMMIT")
        cur.close()
    except BaseException:
        connection.close()
        raise
    return connection


@asynccontextmanager
async def open_sqlite_store(url: str) -> AsyncIterator[SQLiteStore]:
    """Open the SQLite store a ``sqlite://`` URL names, and close it on exit.

    The file (but not its directory) is created if missing, with the schema.

    Args:
      url: ``sqlite:///relative/path.db`` (three slashes) or
        ``sqlite:////absolute/path.db`` (four). The one option,
        ``?synchronous=NORMAL``, trades the last commits before a power cut
        for fewer fsyncs.

    Raises:
      InvalidURLError: The URL is malformed or has an unsupported option.
      StoreError: The file cannot be opened, is not a database, or has a
        schema newer than this version of trio-durable knows.
    """
    path, synchronous = _parse_url(url)
    try:
        if _threads_keep_time():
            connection = await trio.to_thread.run_sync(_connect, path, synchronous)
        else:
            # On the Trio thread, as every later call (see the module's
            # docstring), after the checkpoint to_thread would have made.
            await trio.lowlevel.checkpoint()
            connection = _connect(path, synchronous)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from exc
    store = SQLiteStore(connection, path=path, synchronous=synchronous)
    try:
        yield store
    finally:
        await store.aclose()
