"""A trip of the PostgreSQL store in a few statements, whatever its size.

A trip takes every job queued since the last one: on a busy engine, a
hundred starts, turn ends and reads. Run one by one, each of their
operations is a statement, a round trip and, on the client, the better
part of a hundred microseconds of psycopg's Python holding the GIL that the
engine's Trio thread needs. This module runs the common jobs of a trip as a
few multi-row statements instead:

- every `Store.get_run` of the trip is one ``SELECT ... WHERE id = ANY``;
- the writes of the trip's `Store.apply` and `Store.begin_turn` jobs, when
  each of their operations is one this module knows, are *layered*: an
  operation goes into the layer after the last one holding an operation on
  the same run, and each layer runs one statement per kind of operation
  (an ``INSERT ... SELECT`` of every run created, one of every checkpoint
  put, an ``UPDATE ... FROM`` per shape of run update, each taking its rows
  as one JSON parameter). Every such operation reads and writes the rows of its own run
  only (its run row and its checkpoints), so two operations on different
  runs commute, and the order of the operations on each run is kept: the
  transaction ends in the state the operations one by one would leave.
  Announcements (``NOTIFY``) go last, in one statement: PostgreSQL delivers
  them at commit whatever their place in the transaction.

Whatever this path cannot answer exactly as the one-by-one path would (an
operation it does not know, a strict update that found its expectation
broken, a create that found the id taken, any database error), it leaves to
that path: the caller rolls the transaction back and runs the trip's jobs
one by one, which raises the very errors (`WriteConflict`,
`LeaseLostError`) and drops the very batch it always did. So nothing of the
durability rules changes: one transaction per trip, committed before any
caller hears of it, the runs locked in order of id first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final, final

import attrs
import psycopg

from .._base._records import Run
from . import _ops
from ._base import TurnState
from ._group_commit import Counts, Job
from ._ops import Op
from ._postgres_ops import apply_ops, begin_turn, run_group
from ._postgres_watch import CHANNEL, announcement_payload
from ._record_sql import record_values, upsert_record
from ._rows import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FIELDS,
    RUN_COLUMNS,
    RUN_FIELDS,
    checkpoint_values,
    encode_run_field,
    load_run,
    run_row,
)

# -- the jobs this module recognizes -----------------------------------------------


@final
@attrs.frozen(eq=False)
class ApplyWork:
    """The work of a `Store.apply` job: its operations, one by one when
    called (the path every trip can take)."""

    ops: tuple[Op, ...]

    def __call__(self, cur: psycopg.Cursor[Any]) -> tuple[list[Any], Counts]:
        return apply_ops(cur, self.ops), (1, len(self.ops), 0, 0)


@final
@attrs.frozen(eq=False)
class BeginTurnWork:
    """The work of a `Store.begin_turn` job."""

    run_id: str
    owner: str
    expiry: float
    now: float

    def __call__(self, cur: psycopg.Cursor[Any]) -> tuple[TurnState | None, Counts | None]:
        return begin_turn(cur, self.run_id, self.owner, self.expiry, self.now)


_SELECT_RUN: Final = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s"
_SELECT_RUNS: Final = f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ANY(%s::text[])"


@final
@attrs.frozen(eq=False)
class RunRead:
    """The work of a `Store.get_run` job."""

    run_id: str

    def __call__(self, cur: psycopg.Cursor[Any]) -> tuple[Run | None, Counts]:
        row = cur.execute(_SELECT_RUN, (self.run_id,)).fetchone()
        run = None if row is None else load_run(row)
        return run, (0, 0, run is not None, 0)


def _read_of(job: Job[psycopg.Cursor[Any], Any]) -> str:
    work = job.work
    assert isinstance(work, RunRead)
    return work.run_id


def read_runs(cur: psycopg.Cursor[Any], jobs: Sequence[Job[psycopg.Cursor[Any], Any]]) -> None:
    """Answer every `RunRead` job of ``jobs`` with one statement.

    Raises:
      psycopg.Error: The statement failed (the caller fails the jobs).
    """
    wanted = [_read_of(job) for job in jobs]
    ids = sorted(set(wanted))
    rows = cur.execute(_SELECT_RUNS, (ids,)).fetchall()
    # One record per run, shared by the jobs that asked for it: it is frozen.
    found = {row[0]: load_run(row) for row in rows}
    for job, run_id in zip(jobs, wanted, strict=True):
        run = found.get(run_id)
        job.value = (run, (0, 0, run is not None, 0))
        job.error = None


# -- layering ----------------------------------------------------------------------

_MERGED: Final = (
    _ops.CreateRun,
    _ops.PutCheckpoint,
    _ops.UpdateRun,
    _ops.SettleCheckpoint,
    _ops.ClaimCheckpoint,
    _ops.Announce,
)


_SHARED: Final = (_ops.PutCheckpoint, _ops.ClaimCheckpoint, _ops.SettleCheckpoint)


def mergeable(jobs: Sequence[Job[psycopg.Cursor[Any], Any]]) -> bool:
    """Whether every write job of a trip can run layered."""
    for job in jobs:
        work = job.work
        if isinstance(work, BeginTurnWork):
            continue
        if not isinstance(work, ApplyWork):
            return False
        for op in work.ops:
            if type(op) not in _MERGED:
                return False
    return True


def _run_of(op: Any) -> str:
    if isinstance(op, _ops.CreateRun):
        return op.run.id
    if isinstance(op, _ops.PutCheckpoint | _ops.ClaimCheckpoint):
        return op.checkpoint.run_id
    return str(op.run_id)


# Where an operation's result goes: (job index, operation index), the
# operation index -1 for a begin_turn job.
_Slot = tuple[int, int]


@attrs.define(eq=False)
class _Layer:
    creates: list[tuple[_Slot, _ops.CreateRun]] = attrs.Factory(list)
    puts: list[tuple[_Slot, _ops.PutCheckpoint]] = attrs.Factory(list)
    put_keys: set[tuple[str, int]] = attrs.Factory(set)
    updates: dict[tuple[Any, ...], list[tuple[_Slot, _ops.UpdateRun]]] = attrs.Factory(dict)
    settles: list[tuple[_Slot, _ops.SettleCheckpoint]] = attrs.Factory(list)
    claims: list[tuple[_Slot, _ops.ClaimCheckpoint]] = attrs.Factory(list)
    turns: list[tuple[_Slot, BeginTurnWork]] = attrs.Factory(list)


class _Fallback(Exception):
    """The layered path cannot answer as the one-by-one path would."""


def _update_key(op: _ops.UpdateRun) -> tuple[Any, ...]:
    by_owner = op.expect_owner is not None
    return (
        tuple(op.changes),
        op.expect_status is not None,
        by_owner,
        by_owner and op.now is not None,
    )


def _layers(
    jobs: Sequence[Job[psycopg.Cursor[Any], Any]],
) -> tuple[list[_Layer], list[_ops.Announce]]:
    layers: list[_Layer] = []
    announces: list[_ops.Announce] = []
    # The layer of the last operation on each run, and its kind.
    last: dict[str, tuple[int, type[Any]]] = {}

    def place(run_id: str, kind: type[Any], put_key: tuple[str, int] | None = None) -> _Layer:
        previous = last.get(run_id)
        if previous is None:
            index = 0
        elif (
            previous[1] is kind
            and kind in _SHARED
            and (put_key is None or put_key not in layers[previous[0]].put_keys)
        ):
            # Consecutive puts, claims or settles of one run share their
            # layer's statement, which applies them in order (puts each
            # checkpoint once: one INSERT cannot upsert a row twice).
            index = previous[0]
        else:
            index = previous[0] + 1
        while len(layers) <= index:
            layers.append(_Layer())
        last[run_id] = (index, kind)
        return layers[index]

    for i, job in enumerate(jobs):
        work = job.work
        if isinstance(work, BeginTurnWork):
            place(work.run_id, BeginTurnWork).turns.append(((i, -1), work))
            continue
        assert isinstance(work, ApplyWork)
        for j, op in enumerate(work.ops):
            slot = (i, j)
            if isinstance(op, _ops.Announce):
                announces.append(op)
            elif isinstance(op, _ops.PutCheckpoint):
                key = (op.checkpoint.run_id, op.checkpoint.seq)
                layer = place(key[0], _ops.PutCheckpoint, key)
                layer.puts.append((slot, op))
                layer.put_keys.add(key)
            elif isinstance(op, _ops.CreateRun):
                place(op.run.id, _ops.CreateRun).creates.append((slot, op))
            elif isinstance(op, _ops.UpdateRun):
                layer = place(op.run_id, _ops.UpdateRun)
                layer.updates.setdefault(_update_key(op), []).append((slot, op))
            elif isinstance(op, _ops.SettleCheckpoint):
                place(op.run_id, _ops.SettleCheckpoint).settles.append((slot, op))
            else:
                assert isinstance(op, _ops.ClaimCheckpoint)
                place(op.checkpoint.run_id, _ops.ClaimCheckpoint).claims.append((slot, op))
    return layers, announces


# -- the statements ----------------------------------------------------------------

# The type of each column, for the arrays `unnest` takes.
_RUN_TYPES: Final[dict[str, str]] = {
    "parent_seq": "bigint",
    "lease_expiry": "double precision",
    "wake_at": "double precision",
    "compensate": "boolean",
    "recoveries": "integer",
    "created_at": "double precision",
    "updated_at": "double precision",
}
_CHECKPOINT_TYPES: Final[dict[str, str]] = {
    "seq": "bigint",
    "attempts": "integer",
    "parallel_group": "bigint",
    "parallel_size": "bigint",
    "wake_at": "double precision",
    "enqueued_at": "double precision",
    "started_at": "double precision",
    "finished_at": "double precision",
    "rerun": "boolean",
}
_FLOAT: Final = "double precision"


def _select(types: Sequence[str], names: Sequence[str] | None = None) -> str:
    """The rows of the statement's one parameter, a JSON array of arrays
    (see `_rows_param`), as columns of ``types`` (named ``names``)."""
    columns = ", ".join(
        f"(r->>{i})::{t}" + ("" if names is None else f" AS {names[i]}")
        for i, t in enumerate(types)
    )
    return f"SELECT {columns} FROM json_array_elements(%s::json) AS e(r)"


def _types(columns: Sequence[str], types: dict[str, str]) -> list[str]:
    return [types.get(column, "text") for column in columns]


def _rows_param(rows: Sequence[Sequence[Any]], types: Sequence[str]) -> str:
    """Rows as the one JSON text a multi-row statement takes: psycopg dumps
    a list parameter item by item in Python, where `json.dumps` writes them
    all in C, and the server reads them back with ``json_array_elements``.
    JSON has no infinities or NaN: a float column spells them as
    PostgreSQL's text does."""
    try:
        return json.dumps(rows, allow_nan=False, separators=(",", ":"))
    except ValueError:
        floats = [i for i, t in enumerate(types) if t == _FLOAT]
        spelled = [list(row) for row in rows]
        for row in spelled:
            for i in floats:
                value = row[i]
                if value is not None and not math.isfinite(value):
                    row[i] = (
                        "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
                    )
        return json.dumps(spelled, allow_nan=False, separators=(",", ":"))


_RUN_COLUMN_TYPES: Final = _types(RUN_FIELDS, _RUN_TYPES)
_CHECKPOINT_COLUMN_TYPES: Final = _types(CHECKPOINT_FIELDS, _CHECKPOINT_TYPES)
_CREATE_RUNS: Final = (
    f"INSERT INTO runs ({RUN_COLUMNS}) {_select(_RUN_COLUMN_TYPES)}"
    " ON CONFLICT (id) DO NOTHING RETURNING id"
)
_PUT_CHECKPOINTS: Final = (
    f"INSERT INTO checkpoints ({CHECKPOINT_COLUMNS}) {_select(_CHECKPOINT_COLUMN_TYPES)}"
    " ON CONFLICT (run_id, seq) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in CHECKPOINT_FIELDS[2:])
)
_UPSERT_RECORD: Final = upsert_record("%s")
_NOTIFY_ALL: Final = (
    f"SELECT pg_notify(c.channel, p.payload) FROM ({CHANNEL} AS channel) AS c,"
    " json_array_elements_text(%s::json) WITH ORDINALITY AS p(payload, n) ORDER BY p.n"
)

_update_sql: dict[tuple[Any, ...], str] = {}


def _update_statement(key: tuple[Any, ...]) -> str:
    statement = _update_sql.get(key)
    if statement is not None:
        return statement
    fields, by_status, by_owner, now = key
    names = ["id", *(f"c{i}" for i in range(len(fields)))]
    types = ["text", *(_RUN_TYPES.get(field, "text") for field in fields)]
    conditions = ["r.id = v.id"]
    if by_status:
        names.append("expect_status")
        types.append("text")
        conditions.append("r.status = ANY(string_to_array(v.expect_status, ','))")
    if by_owner:
        names.append("expect_owner")
        types.append("text")
        conditions.append("r.lease_owner = v.expect_owner")
        if now:
            names.append("now")
            types.append(_FLOAT)
            conditions.append("(r.lease_expiry IS NULL OR r.lease_expiry > v.now)")
    # With no changes the row is still written: locked, its expectations
    # checked by the one statement (as `_postgres_ops` does).
    assignments = ", ".join(f"{field} = v.c{i}" for i, field in enumerate(fields))
    statement = _update_sql[key] = (
        f"UPDATE runs AS r SET {assignments or 'status = r.status'}"
        f" FROM ({_select(types, names)}) AS v"
        f" WHERE {' AND '.join(conditions)} RETURNING r.id"
    )
    _update_types[key] = types
    return statement


_update_types: dict[tuple[Any, ...], list[str]] = {}


def _create_runs(
    cur: psycopg.Cursor[Any], items: list[tuple[_Slot, _ops.CreateRun]], results: Results
) -> None:
    rows = [run_row(op.run)[:-1] for _, op in items]
    created = {row[0] for row in cur.execute(_CREATE_RUNS, (_rows_param(rows, _RUN_COLUMN_TYPES),))}
    for slot, op in items:
        if op.run.id not in created:
            # Taken: the one-by-one path reads the stored run.
            raise _Fallback
        results[slot] = (op.run, True)
    # Every run was created: their own checkpoints go in with them, before
    # the next layer's operations on those runs.
    rows = [(cp.run_id, cp.seq, *checkpoint_values(cp)) for _, op in items for cp in op.checkpoints]
    if rows:
        cur.execute(_PUT_CHECKPOINTS, (_rows_param(rows, _CHECKPOINT_COLUMN_TYPES),))
    # And their own records (a deadline), few: one statement each.
    records = [record_values(record) for _, op in items for record in op.records]
    if records:
        cur.executemany(_UPSERT_RECORD, records)


def _put_checkpoints(
    cur: psycopg.Cursor[Any], items: list[tuple[_Slot, _ops.PutCheckpoint]], results: Results
) -> None:
    rows = [
        (op.checkpoint.run_id, op.checkpoint.seq, *checkpoint_values(op.checkpoint))
        for _, op in items
    ]
    cur.execute(_PUT_CHECKPOINTS, (_rows_param(rows, _CHECKPOINT_COLUMN_TYPES),))
    for slot, _ in items:
        results[slot] = None


def _update_runs(
    cur: psycopg.Cursor[Any],
    key: tuple[Any, ...],
    items: list[tuple[_Slot, _ops.UpdateRun]],
    results: Results,
) -> None:
    fields, by_status, by_owner, now = key
    rows: list[list[Any]] = []
    for _, op in items:
        row = [op.run_id, *(encode_run_field(field, op.changes[field]) for field in fields)]
        if by_status:
            row.append(",".join(sorted(op.expect_status or ())))
        if by_owner:
            row.append(op.expect_owner)
            if now:
                row.append(op.now)
        rows.append(row)
    statement = _update_statement(key)
    param = _rows_param(rows, _update_types[key])
    changed = {row[0] for row in cur.execute(statement, (param,))}
    for slot, op in items:
        if op.run_id in changed:
            results[slot] = True
        elif op.strict:
            # The one-by-one path says which expectation broke.
            raise _Fallback
        else:
            results[slot] = False


Results = dict[_Slot, Any]


def _run_layer(cur: psycopg.Cursor[Any], layer: _Layer, results: Results) -> None:
    if layer.creates:
        _create_runs(cur, layer.creates, results)
    for key, items in layer.updates.items():
        _update_runs(cur, key, items, results)
    if layer.puts:
        _put_checkpoints(cur, layer.puts, results)
    for kind, group in (
        (_ops.SettleCheckpoint, layer.settles),
        (_ops.ClaimCheckpoint, layer.claims),
    ):
        if group:
            answers = run_group(cur, kind, [op for _, op in group])
            for (slot, _), answer in zip(group, answers, strict=True):
                results[slot] = answer
    for slot, work in layer.turns:
        results[slot] = work(cur)


def run_layered(cur: psycopg.Cursor[Any], jobs: Sequence[Job[psycopg.Cursor[Any], Any]]) -> bool:
    """Run the write jobs of a trip (inside its transaction, their runs
    locked) layered, and set each job's value. Returns False, having set
    nothing, if the one-by-one path must answer instead (the caller rolls
    back first).

    Raises:
      psycopg.Error: A statement failed.
    """
    layers, announces = _layers(jobs)
    results: Results = {}
    try:
        for layer in layers:
            _run_layer(cur, layer, results)
    except _Fallback:
        return False
    if announces:
        payloads = json.dumps([announcement_payload(op) for op in announces])
        cur.execute(_NOTIFY_ALL, (payloads,))
    for i, job in enumerate(jobs):
        work = job.work
        if isinstance(work, BeginTurnWork):
            job.value = results[(i, -1)]
        else:
            assert isinstance(work, ApplyWork)
            values = [
                None if isinstance(op, _ops.Announce) else results[(i, j)]
                for j, op in enumerate(work.ops)
            ]
            job.value = (values, (1, len(work.ops), 0, 0))
        job.error = None
    return True
