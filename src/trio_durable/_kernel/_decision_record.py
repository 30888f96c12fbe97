"""A remote workflow's decision record: where its run stands with the
workers that decide its turns (see `_decision_turn`).

A run whose body runs on workers keeps one record of kind `DECISION`. It is
an `._carrier.Attempt`, as a remote step's checkpoint is: ``pending`` while
a decision task is out (``attempts`` numbers the tasks), ``completed`` with
the worker's decision in ``output`` until a turn applies it, ``completed``
with what the applied decision waits on in ``input`` after, ``failed`` if
no worker could decide. A decision's result settles it by a claim at the
task's attempt and execution (`settle_decision`), so a duplicate or a
stale decision changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from .._base._records import CheckpointStatus, ErrorInfo, RunStatus
from .._base._run_records import RunRecord
from .._stores._record_ops import PutRecord, SettleRecord

if TYPE_CHECKING:
    from .._stores._base import Store
    from .._wire._messages import Result

DECISION: Final = "decision"
"""The kind of a remote workflow's decision record."""


def decision_of(records: Mapping[str, RunRecord]) -> RunRecord | None:
    """The run's decision record, if it has one."""
    return records.get(DECISION)


def settle_decision(
    result: Result,
    status: CheckpointStatus,
    output: str | None,
    error: ErrorInfo | None,
    now: float,
    unless_run_status: frozenset[RunStatus],
) -> SettleRecord:
    """The claim that settles a run's decision record with a worker's
    ``result``: it needs the record pending at the result's attempt (and
    holding its execution, if it names one)."""
    return SettleRecord(
        result.run_id,
        DECISION,
        status,
        output,
        error,
        now,
        attempt=result.attempt,
        execution=result.execution,
        unless_run_status=unless_run_status,
    )


def ask_afresh(records: Iterable[RunRecord]) -> list[PutRecord]:
    """The writes that have a retried (or retried-from-a-seq) run ask a
    worker afresh: its decision record, if any, waits on nothing (its
    attempts count on, so a late answer to an old task is stale)."""
    return [
        PutRecord(
            attrs.evolve(record, status="completed", error=None, mark=None, input=None, output=None)
        )
        for record in records
        if record.kind == DECISION
    ]


async def decided(store: Store, run_id: str) -> bool:
    """Whether ``run_id``'s decision task is no longer out (its answer
    settled the record, or the record is gone): asked once a suspend on it
    committed, since the answer may have come while the turn held the
    lease and woken nobody."""
    for record in await store.get_records(run_id):
        if record.kind == DECISION:
            return record.status != "pending"
    return True
