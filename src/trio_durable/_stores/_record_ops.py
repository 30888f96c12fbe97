"""The store operations of a run's own records (part of `Op`; see
`_run_records`).

A run has at most one record of each kind. A put replaces it; a claim
writes it only if the stored one is still pending (of several writers
racing, one wins); a settle ends a pending one in place, under the same
conditions a result settles a checkpoint by. Records go with their run:
pruning a run deletes them.
"""

from __future__ import annotations

from typing import final

import attrs

from .._base._records import CheckpointStatus, ErrorInfo, RunStatus
from .._base._run_records import RunRecord


@final
@attrs.define(frozen=True)
class PutRecord:
    """Insert or replace the record of its run and kind. Result: None."""

    record: RunRecord


@final
@attrs.define(frozen=True)
class ClaimRecord:
    """Replace a record only if the stored one is ``pending`` (and, with
    ``attempt``, its ``attempts`` equal it). Result: True if it was
    written."""

    record: RunRecord
    attempt: int | None = None


@final
@attrs.define(frozen=True)
class SettleRecord:
    """Settle a ``pending`` record in place, keeping its other fields.

    With ``attempt``, its ``attempts`` must equal it; with ``execution``,
    its ``executions`` must hold it; with ``unless_run_status``, nothing
    happens if the run is in one of those statuses (as `SettleCheckpoint`).
    Result: the settled record, or None if it was missing or no longer
    pending, or a condition did not hold.
    """

    run_id: str
    kind: str
    status: CheckpointStatus
    output: str | None = None
    error: ErrorInfo | None = None
    finished_at: float | None = None
    attempt: int | None = None
    execution: str | None = None
    unless_run_status: frozenset[RunStatus] | None = None


@final
@attrs.define(frozen=True)
class DeleteRecords:
    """Delete the records of ``kinds`` of a run (those it has). Result:
    None."""

    run_id: str
    kinds: tuple[str, ...]


RecordOp = PutRecord | ClaimRecord | SettleRecord | DeleteRecords
"""The operations of a run's records."""


def settle_applies(record: RunRecord, op: SettleRecord) -> bool:
    """Whether ``op`` settles ``record`` (the run's status aside)."""
    if record.status != "pending":
        return False
    if op.attempt is not None and record.attempts != op.attempt:
        return False
    return op.execution is None or op.execution in record.executions


def settled(record: RunRecord, op: SettleRecord) -> RunRecord:
    """``record`` as ``op`` settles it."""
    return attrs.evolve(
        record,
        status=op.status,
        output=op.output,
        error=op.error,
        finished_at=op.finished_at,
        mark=None,
    )
