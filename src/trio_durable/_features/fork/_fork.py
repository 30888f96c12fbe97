"""Running a run again from one of its steps: a fork into a new run, or a
retry in place (`Engine.fork`, `Engine.retry` with ``from_seq``).

A fork creates a run of the same workflow, version, namespace, input and
tags (on-error tags aside) that holds copies of the original's settled body
checkpoints before ``from_seq``: its replay returns their recorded results
(a recorded failure raises again), and it executes from ``from_seq`` on, as
DBOS's ``fork_workflow`` does. The original is not written. A retry from a
seq deletes the run's body checkpoints at and after it and puts the run back
to ``pending``; what is before stays, and what it deleted or rewrote is kept
in the run's history (`_features.lifecycle._retried`).

Both check the seq first and write nothing when it is refused (see
`ForkPointError`). The fork's row, its copied history and its provenance (a
``forked_from`` record, `FORKED_FROM`) go in one batch,
fenced so that an id another run took meanwhile rolls it all back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

import attrs

from ..._base._bounds import shown
from ..._base._exceptions import (
    ForkPointError,
    InvalidRunStateError,
    LeaseLostError,
    RunConflictError,
)
from ..._base._on_error import HANDOFF_BASE, RETIRED_PREFIX, without_on_error_tags
from ..._base._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    Run,
    StoredValue,
    signal_token,
)
from ..._base._run_records import RunRecord, value_record
from ..._kernel._builds import build_record, placement
from ..._kernel._cancellation import CANCEL_SENT, CANCELLED_AT, TERMINATE
from ..._kernel._decision_record import ask_afresh
from ..._kernel._executions import rerun_record
from ..._kernel._handlers import UPDATES_NAME, read_log
from ..._kernel._markers import BODY_SEQ_LIMIT
from ..._kernel._options import check_id
from ..._kernel._run_reads import Also, read_run
from ..._stores._base import WriteConflict
from ..._stores._ops import (
    CreateRun,
    DeleteCheckpoints,
    Op,
    PutCheckpoint,
    PutValue,
    RemoveSignalWaiter,
    UpdateRun,
)
from ..._stores._record_ops import DeleteRecords, PutRecord
from ..determinism._argument_check import CHECKED_FROM
from ..flow_control._admission import creation_ops, start_controls
from ..lifecycle._lifecycle import (
    DEADLINE,
    continued_to,
    deadline_ops,
    started_output,
    workflow_timeout,
)
from ..lifecycle._retried import keep_replaced, next_retry
from ..messages._published import event_scope
from ..messages._streams import PAGE, STREAM_HEAD, stream_scope

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry
    from ..._stores._base import Store

FORKED_FROM: Final = "forked_from"
"""The kind of a fork's record of where it came from: its input
``{"run_id", "from_seq"}``, its output the original's id."""


def _body(checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
    return [cp for cp in checkpoints if 0 < cp.seq < BODY_SEQ_LIMIT]


def check_from_seq(
    run: Run, checkpoints: Sequence[Checkpoint], records: Sequence[RunRecord], from_seq: object
) -> int:
    """``from_seq`` checked against the run's history; returns it.

    Raises:
      ForkPointError: It is not a whole number from 1 to one past the last
        body seq, falls inside a fan, or an operation before it has not
        settled.
    """
    if isinstance(from_seq, bool) or not isinstance(from_seq, int):
        raise ForkPointError(f"from_seq must be a whole number, not {from_seq!r}")
    body = _body(checkpoints)
    last = max((cp.seq for cp in body), default=0)
    if not 1 <= from_seq <= last + 1:
        # One past the last seq runs nothing again: the replay goes on.
        raise ForkPointError(
            f"from_seq {shown(from_seq)} is out of range: run {run.id!r} can run again from 1"
            f" to {last + 1}"
        )
    for cp in body:
        first, size = cp.parallel_group, cp.parallel_size
        if first is not None and size is not None and first < from_seq < first + size:
            raise ForkPointError(
                f"from_seq {from_seq} is inside the fan of {cp.name!r} at seqs"
                f" {first} to {first + size - 1} of run {run.id!r}:"
                f" run from {first} (the whole fan) or from {first + size}"
            )
    delivered = _recorded_seq(records, CANCELLED_AT)
    if delivered is not None and from_seq > delivered:
        # Past it are the body's cleanup steps, which only a body that gets
        # `Cancelled` there replays.
        raise ForkPointError(
            f"run {run.id!r} got its cancellation at seq {delivered} and cleaned up after it:"
            f" run from seq {delivered} or before"
        )
    for cp in body:
        if cp.seq < from_seq and cp.status not in ("completed", "failed"):
            raise ForkPointError(
                f"the {cp.kind} {cp.name!r} at seq {cp.seq} of run {run.id!r} has not settled"
                f" (it is {cp.status}): run from seq {cp.seq} or before"
            )
    return from_seq


def _recorded_seq(records: Sequence[RunRecord], kind: str) -> int | None:
    """The seq the run's record of ``kind`` holds as its output, or None."""
    for record in records:
        if record.kind == kind and record.output is not None:
            return int(json.loads(record.output))
    return None


def _update_log(records: Sequence[RunRecord], from_seq: int) -> tuple[str | None, bool]:
    """The run's update log with only the updates applied before
    ``from_seq`` (None: none), and whether it dropped any."""
    for record in records:
        if record.kind == UPDATES_NAME:
            log = read_log(record)
            kept = [attrs.asdict(item) for item in log if item.at < from_seq]
            text = json.dumps(kept, separators=(",", ":")) if kept else None
            return text, len(kept) < len(log)
    return None, False


def _published(checkpoints: Sequence[Checkpoint], from_seq: int) -> dict[str, str]:
    """The values published (`Context.set_event`) before ``from_seq``, the
    last one of each key, as JSON text."""
    values: dict[str, str] = {}
    for cp in sorted(checkpoints, key=lambda cp: cp.seq):
        event = cp.kind == "signal" and cp.name.startswith("event:")
        if event and 0 < cp.seq < from_seq and cp.input is not None:
            values[cp.name[len("event:") :]] = cp.input
    return values


def _carried(
    checkpoints: Sequence[Checkpoint],
    records: Sequence[RunRecord],
    fork_id: str,
    from_seq: int,
    now: float,
) -> list[Op]:
    """The writes that give a fork the original's records of what came
    before ``from_seq`` other than its body checkpoints: the updates applied
    then (replayed at the same points), the values published then, the
    start of the argument check if it began before, and the build of a
    pinned original (see `_builds`)."""
    ops: list[Op] = []
    log, _ = _update_log(records, from_seq)
    checked = _recorded_seq(records, CHECKED_FROM)
    placed = placement({record.kind: record for record in records})
    if placed is not None and placed.versioning == "pinned":
        # The history it keeps was made by that build's code: the fork runs
        # there too, listed among the build's open runs at its first turn.
        unlisted = attrs.evolve(placed, listed=False)
        ops.append(PutRecord(build_record(fork_id, unlisted, now)))
    for record in records:
        if record.kind == UPDATES_NAME and log is not None:
            ops.append(PutRecord(attrs.evolve(record, run_id=fork_id, output=log)))
        elif record.kind == CHECKED_FROM and checked is not None and checked < from_seq:
            ops.append(PutRecord(attrs.evolve(record, run_id=fork_id)))
    scope = event_scope(fork_id)
    for key, value in _published(checkpoints, from_seq).items():
        ops.append(PutValue(scope, key, value, now, run_id=fork_id))
    return ops


async def _reset_records(
    store: Store,
    run: Run,
    checkpoints: Sequence[Checkpoint],
    records: Sequence[RunRecord],
    from_seq: int,
    now: float,
) -> tuple[list[Op], dict[tuple[str, str], str]]:
    """What a retry in place from ``from_seq`` deletes of the run's reserved
    records and rewrites of its keyed values, so that they say what its
    history before ``from_seq`` says: the writes, and the keyed values they
    may replace as they are now (by scope and key)."""
    ops: list[Op] = []
    values: dict[tuple[str, str], str] = {}
    log, dropped = _update_log(records, from_seq)
    checked = _recorded_seq(records, CHECKED_FROM)
    kinds = {record.kind for record in records}
    # The delivery point of a cancellation the run may get again, a remote
    # workflow's record of its cancel sent, and the stream's head (the
    # replay writes the stream again from offset 0); the start of the
    # argument check if it began at or after from_seq, and the update log
    # if it drops every update.
    gone: list[str] = [
        kind for kind in (CANCELLED_AT, CANCEL_SENT, TERMINATE, STREAM_HEAD) if kind in kinds
    ]
    if checked is not None and checked >= from_seq:
        gone.append(CHECKED_FROM)
    for record in records:
        if record.kind == UPDATES_NAME and dropped:
            if log is None:
                gone.append(UPDATES_NAME)
            else:
                ops.append(PutRecord(attrs.evolve(record, output=log)))
    if gone:
        ops.append(DeleteRecords(run.id, tuple(gone)))
    published = _published(checkpoints, from_seq)
    scope = event_scope(run.id)
    for stored in await _all_values(store, scope):
        values[scope, stored.key] = stored.value
        value = published.get(stored.key)
        if value != stored.value:
            ops.append(PutValue(scope, stored.key, value, now, run_id=run.id))
    scope = stream_scope(run.id)
    for stored in await _all_values(store, scope):
        values[scope, stored.key] = stored.value
        ops.append(PutValue(scope, stored.key, None, now))
    return ops, values


async def _all_values(store: Store, scope: str) -> list[StoredValue]:
    found: list[StoredValue] = []
    while page := await store.list_values(
        scope, after=found[-1].key if found else None, limit=PAGE
    ):
        found.extend(page)
        if len(page) < PAGE:
            break
    return found


def _undone(checkpoints: Sequence[Checkpoint]) -> set[int]:
    """Seqs of steps whose undo ran: their effect is gone, so they run again."""
    return {-cp.seq for cp in checkpoints if cp.seq < 0}


# -- fork -------------------------------------------------------------------------------


async def fork_run(
    store: Store,
    app: Registry | None,
    now: float,
    run_id: str,
    from_seq: int,
    new_run_id: str | None,
    namespace: str | None,
    origin: str,
    also: Also,
) -> Run:
    """Create the fork of ``run_id`` from ``from_seq`` (see `Engine.fork`);
    returns it as stored, ``pending``, leased to none.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      ForkPointError: ``from_seq`` is refused.
      RunConflictError: ``new_run_id`` belongs to a run already.
      UsageError: ``new_run_id`` or ``namespace`` is malformed.
    """
    if new_run_id is not None:
        check_id("new_run_id", new_run_id)
    original = await read_run(store, run_id, namespace)
    checkpoints = await store.get_checkpoints(original.id)
    records = await store.get_records(original.id)
    check_from_seq(original, checkpoints, records, from_seq)
    undone = _undone(checkpoints)
    kept = [cp for cp in _body(checkpoints) if cp.seq < from_seq and cp.seq not in undone]
    timeout = _timeout(app, original, records)
    controls = None
    wf = None if app is None else app.find_workflow(original.workflow, original.version)
    if wf is not None:
        controls = start_controls(wf, original.input)
    serial = 0
    while True:
        serial += 1
        fork_id = new_run_id
        if fork_id is None:
            fork_id = f"{original.id}.fork.{serial}"
            if await store.get_run(fork_id) is not None:
                continue
        fork = Run(
            id=fork_id,
            workflow=original.workflow,
            version=original.version,
            namespace=original.namespace,
            status="pending",
            input=original.input,
            tags=without_on_error_tags(original.tags),
            # As the original has them now: upserts before from_seq replay
            # without writing, so the fork would otherwise lack them.
            search_attributes=original.search_attributes,
            created_at=now,
            updated_at=now,
        )
        # Created leased to a name only this call uses, then released in
        # the same batch: if the id was taken meanwhile, the release finds
        # another lease and rolls the whole batch back, so nothing is
        # written into the run that holds the id.
        fence = f"fork:{origin}:{fork_id}"
        ops: list[Op] = [
            CreateRun(attrs.evolve(fork, lease_owner=fence, lease_expiry=now + 60.0)),
            UpdateRun(
                fork_id, {"lease_owner": None, "lease_expiry": None}, expect_owner=fence, now=now
            ),
            PutRecord(_provenance(fork_id, original.id, from_seq, now)),
            *(PutCheckpoint(_copied(cp, fork_id)) for cp in kept),
            *_carried(checkpoints, records, fork_id, from_seq, now),
            *deadline_ops(fork, timeout),
            *([] if controls is None else creation_ops(fork_id, controls, now)),
            *also([fork]),
        ]
        try:
            await store.apply(ops)
        except (LeaseLostError, WriteConflict) as exc:
            if new_run_id is None:
                continue
            raise RunConflictError(f"run id {new_run_id!r} is taken") from exc
        return fork


def _copied(cp: Checkpoint, fork_id: str) -> Checkpoint:
    copy = attrs.evolve(cp, run_id=fork_id)
    if cp.kind == "child" and cp.child_id is not None and cp.status == "completed":
        data = json.loads(cp.output) if cp.output else None
        if isinstance(data, dict) and data.get("cancel_with_parent") is True:
            # A child the original started stays the original's: cancelling
            # the fork does not cancel it.
            copy = attrs.evolve(copy, output=started_output(cp.child_id, False))
    return copy


def _provenance(fork_id: str, original: str, from_seq: int, now: float) -> RunRecord:
    where = json.dumps({"run_id": original, "from_seq": from_seq})
    return value_record(fork_id, FORKED_FROM, json.dumps(original), now, input=where)


def _timeout(app: Registry | None, run: Run, records: Sequence[RunRecord]) -> float | None:
    """The fork's whole-run timeout: the original's (counted again from the
    fork's creation), else its workflow's."""
    for record in records:
        if record.kind == DEADLINE and record.input:
            timeout = json.loads(record.input).get("timeout")
            if isinstance(timeout, int | float):
                return float(timeout)
    return workflow_timeout(app, run.workflow, run.version)


async def forked_from_of(store: Store, run_id: str) -> tuple[str, int] | None:
    """The run and seq ``run_id`` was forked from, or None."""
    return fork_origin(await store.get_records(run_id))


def fork_origin(records: Iterable[RunRecord]) -> tuple[str, int] | None:
    """The run and seq a run was forked from, as its ``records`` say; None
    if it is no fork."""
    for record in records:
        if record.kind == FORKED_FROM and record.input:
            data = json.loads(record.input)
            return str(data["run_id"]), int(data["from_seq"])
    return None


# -- retry from a seq -------------------------------------------------------------------


async def retry_from(
    store: Store,
    now: float,
    run_id: str,
    from_seq: int,
    namespace: str | None,
    also: Also,
) -> Run:
    """Put an ended run back to ``pending`` with its body checkpoints at and
    after ``from_seq`` deleted (see `Engine.retry`); returns the run as
    written.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run has not ended, continued as new, or
        changed meanwhile; nothing changed.
      ForkPointError: ``from_seq`` is refused.
    """
    run = await read_run(store, run_id, namespace)
    if run.status not in TERMINAL_STATUSES:
        raise InvalidRunStateError(
            f"run {run_id!r} is {run.status}; only a run that ended can be retried from a seq"
        )
    if await continued_to(store, run) is not None:
        raise InvalidRunStateError(
            f"run {run_id!r} continued as new; retry its latest generation, or fork it"
        )
    checkpoints = await store.get_checkpoints(run.id)
    records = await store.get_records(run.id)
    check_from_seq(run, checkpoints, records, from_seq)
    children = [cp for cp in _body(checkpoints) if cp.seq >= from_seq and cp.child_id is not None]
    if children:
        first = children[0]
        raise ForkPointError(
            f"run {run_id!r} started the child run {first.child_id!r} at seq {first.seq}:"
            f" a retry in place from seq {from_seq} would start it again under that id."
            f" Fork the run instead, or retry from seq {children[-1].seq + 1} or later"
        )
    undone = _undone(checkpoints)
    retry = await next_retry(store, run.id)
    deletes: list[int] = []
    ops: list[Op] = []
    for cp in checkpoints:
        if cp.seq < 0 or (0 < cp.seq < BODY_SEQ_LIMIT and (cp.seq >= from_seq or cp.seq in undone)):
            deletes.append(cp.seq)
            if cp.kind == "signal" and cp.status == "pending" and cp.seq > 0:
                token = signal_token(run.id, cp.name)
                if await store.signal_waiter(token) == (run.id, cp.seq):
                    ops.append(RemoveSignalWaiter(token))
        elif cp.seq >= HANDOFF_BASE and not cp.name.startswith(RETIRED_PREFIX):
            # Retired as `plan_retry` does: kept in the timeline, never
            # followed again.
            ops.append(PutCheckpoint(attrs.evolve(cp, name=f"{RETIRED_PREFIX}{cp.child_id}")))
            if cp.child_id is not None:
                ops.append(UpdateRun(cp.child_id, {"parent_seq": None}, strict=False))
    # A remote workflow's run asks a worker afresh (as `plan_retry`).
    ops.extend(ask_afresh(records))
    rewrites, values = await _reset_records(store, run, checkpoints, records, from_seq, now)
    ops.extend(rewrites)
    if deletes:
        ops.append(DeleteCheckpoints(run.id, tuple(deletes)))
        # What the run records at these seqs again is marked `rerun`: a
        # result without an execution id cannot tell it from what was
        # deleted (one with an id never settles it).
        ops.extend(rerun_record(run.id, records, checkpoints, deletes, now))
    changes: dict[str, object] = {
        "status": "pending",
        "error": None,
        "output": None,
        "wake_at": None,
        "compensate": False,
        "recoveries": 0,
        "lease_owner": None,
        "lease_expiry": None,
        "tags": without_on_error_tags(run.tags),
        "updated_at": now,
    }
    ops.append(UpdateRun(run.id, changes, expect_status=frozenset({run.status})))
    # What it deletes or rewrites stays in the run's history (as
    # `plan_retry` keeps it), after the fenced update.
    ops.append(keep_replaced(run, retry, now, from_seq, ops, checkpoints, records, values))
    retried = attrs.evolve(
        run,
        status="pending",
        error=None,
        output=None,
        wake_at=None,
        compensate=False,
        recoveries=0,
        lease_owner=None,
        lease_expiry=None,
        tags=without_on_error_tags(run.tags),
        updated_at=now,
    )
    try:
        await store.apply([*ops, *also([retried])])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run_id!r} changed while being retried") from exc
    return retried
