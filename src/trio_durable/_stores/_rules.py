"""The rules of the store operations, written in Python.

The memory store applies them to its dictionaries, and the SQLite store to
the rows it read in the transaction that writes them (SQLite lets one writer
at a time in, so what it read cannot change meanwhile). The PostgreSQL store
states the same rules in SQL (see `._postgres_ops`), so that the database
applies them to the newest version of a row another engine may be writing.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._base._exceptions import LeaseLostError, StoreError
from .._base._records import Checkpoint, Run
from ._base import WriteConflict
from ._ops import PutValue, RescheduleCheckpoint, SettleCheckpoint, UpdateRun


def holds_lease(run: Run, owner: str, now: float | None) -> bool:
    """Whether ``owner`` holds the run's lease, and it has not lapsed at
    ``now`` (when given)."""
    if run.lease_owner != owner:
        return False
    return now is None or run.lease_expiry is None or run.lease_expiry > now


def take_lease(run: Run, owner: str, expiry: float, now: float, **changes: Any) -> Run | None:
    """``run`` with its lease taken or extended by ``owner`` (and ``changes``
    made), or None while another owner holds a live lease (the rules of
    `LockRun`: taking over another owner's lapsed lease is a recovery)."""
    if run.lease_owner is not None and run.lease_owner != owner:
        if run.lease_expiry is not None and run.lease_expiry > now:
            return None
        recoveries = run.recoveries + 1
    else:
        recoveries = run.recoveries
    return attrs.evolve(
        run, lease_owner=owner, lease_expiry=expiry, recoveries=recoveries, **changes
    )


def expectation_failure(current: Run | None, op: UpdateRun) -> StoreError | None:
    """What an `UpdateRun` of ``current`` (None: no such run) fails with, or
    None if its expectations hold."""
    run_id = op.run_id
    if current is None:
        return WriteConflict(f"run {run_id!r} does not exist")
    if op.expect_status is not None and current.status not in op.expect_status:
        return WriteConflict(
            f"run {run_id!r} is {current.status}, expected one of {sorted(op.expect_status)}"
        )
    if op.expect_owner is not None and not holds_lease(current, op.expect_owner, op.now):
        return LeaseLostError(f"lease of run {run_id!r} is no longer held by {op.expect_owner!r}")
    return None


def is_of(cp: Checkpoint, kind: str | None, name: str | None) -> bool:
    """Whether ``cp`` is of ``kind`` and named ``name`` (each when given)."""
    return (kind is None or cp.kind == kind) and (name is None or cp.name == name)


def settle_applies(
    cp: Checkpoint,
    attempt: int | None,
    kind: str | None,
    name: str | None,
    or_failed_with: str | None = None,
    execution: str | None = None,
    unless_rerun: bool = False,
) -> bool:
    """Whether a `SettleCheckpoint` (or, without ``or_failed_with``, a
    `RescheduleCheckpoint`) with these conditions applies to ``cp``; its
    run's status is the caller's to check."""
    frozen = (
        or_failed_with is not None
        and cp.status == "failed"
        and cp.error is not None
        and cp.error.code == or_failed_with
    )
    if not (cp.status == "pending" or frozen):
        return False
    if attempt is not None and cp.attempts != attempt:
        return False
    if execution is not None and execution not in cp.executions:
        return False
    if unless_rerun and cp.rerun:
        return False
    return is_of(cp, kind, name)


def op_applies(cp: Checkpoint, op: SettleCheckpoint | RescheduleCheckpoint) -> bool:
    """Whether ``op`` applies to ``cp`` (`settle_applies` with its fields)."""
    return settle_applies(
        cp,
        op.attempt,
        op.kind,
        op.name,
        op.or_failed_with if isinstance(op, SettleCheckpoint) else None,
        op.execution,
        op.unless_rerun,
    )


def rescheduled(cp: Checkpoint, op: RescheduleCheckpoint) -> Checkpoint:
    """``cp`` after ``op`` recorded its failed attempt and scheduled the next."""
    return attrs.evolve(
        cp,
        attempts=op.attempt + 1,
        errors=(*cp.errors, op.error),
        started_at=None,
        wake_at=op.wake_at,
    )


def value_conflict(op: PutValue) -> WriteConflict:
    """The error of a strict `PutValue` whose ``expect_version`` failed."""
    if op.expect_version == 0:
        return WriteConflict(f"the value {op.key!r} of scope {op.scope!r} exists already")
    return WriteConflict(
        f"the value {op.key!r} of scope {op.scope!r} is not at version {op.expect_version}"
    )
