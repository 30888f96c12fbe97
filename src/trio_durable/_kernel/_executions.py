"""Execution ids: which dispatch of a step a result answers.

Every dispatch of a remote step (its first attempt, a retry after a
failure, a redispatch, a send again after its broker was lost or its run
was retried) and of a remote workflow's decision task mints an execution
id: 128 bits from the engine's seeded random source, so unique in the
store for its whole life (and the simulation stays deterministic). The
write that claims the dispatch adds it to the checkpoint's ``executions``;
the task carries it, the worker echoes it in the result, and the
signature covers it with the run id, seq and attempt.

A result settles its checkpoint only if the checkpoint holds its execution
id (see `result_conditions`): a result of an execution before a retry of
the run (which deleted the checkpoint, so the new one never held that id),
of another run that had the same id before it was pruned, or of another
checkpoint never settles it. Within one checkpoint's dispatches, a success
of an earlier one still settles it (the step did run; docs/brokers.md and
docs/failure-handling.md promise it, and refusing it could starve a step
whose worker is slower than ``remote_redispatch``), while a failure must
be the latest attempt's, as before.

A result without an execution id (from a worker older than them, during a
rolling upgrade) settles only a checkpoint at its attempt that is not
`Checkpoint.rerun`: a retry that deleted a remote step's checkpoint leaves
the run's record of kind `RERUN` (the highest such seq), and every remote
step the run records again at or below it is marked ``rerun``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._base._records import Checkpoint
from .._base._run_records import RunRecord, value_record
from .._stores._record_ops import PutRecord

if TYPE_CHECKING:
    import random

    from .._wire._messages import Result

RERUN: Final = "rerun"
"""The kind of a run's ``rerun`` record: its output is the highest seq
(compensations by their absolute value) at which a retry of the run
deleted a remote step's checkpoint."""


def new_execution(rng: random.Random) -> str:
    """A new execution id: 128 bits of ``rng`` in lower-case hex."""
    return f"{rng.getrandbits(128):032x}"


def rerun_through(records: Mapping[str, RunRecord]) -> int:
    """The highest seq a retry of the run deleted (0 if none did), as its
    ``rerun`` record among ``records`` says."""
    found = records.get(RERUN)
    if found is None or found.output is None:
        return 0
    return int(json.loads(found.output))


def is_rerun(records: Mapping[str, RunRecord], seq: int) -> bool:
    """Whether a checkpoint the run records at ``seq`` now runs what a retry
    deleted there."""
    return abs(seq) <= rerun_through(records)


def rerun_record(
    run_id: str,
    records: Iterable[RunRecord],
    checkpoints: Iterable[Checkpoint],
    deleted: Iterable[int],
    now: float,
) -> list[PutRecord]:
    """The write that a retry deleting the checkpoints at ``deleted`` adds,
    given the run's ``records`` and ``checkpoints`` as read: its ``rerun``
    record raised to the highest seq of a remote step among them (the only
    checkpoints a result settles, the run's decision checkpoint aside,
    which a retry keeps); none if no remote step is deleted, or the record
    is high enough already."""
    gone = set(deleted)
    highest = max(
        (abs(cp.seq) for cp in checkpoints if cp.seq in gone and cp.kind == "remote"),
        default=0,
    )
    if highest <= rerun_through({record.kind: record for record in records}):
        return []
    return [PutRecord(value_record(run_id, RERUN, json.dumps(highest), now))]


def result_conditions(result: Result) -> dict[str, Any]:
    """The conditions of the claim that settles (or reschedules) a
    checkpoint with ``result``, as `SettleCheckpoint` fields: a result with
    an execution id needs the checkpoint to hold it (a failure, or a
    decision, at its attempt too); one without needs the checkpoint at its
    attempt and not ``rerun``."""
    if result.execution is None:
        return {"attempt": result.attempt, "unless_rerun": True}
    if result.status == "completed" and result.kind == "step":
        return {"execution": result.execution}
    return {"execution": result.execution, "attempt": result.attempt}


def awaited(cp: Checkpoint | RunRecord, result: Result) -> bool:
    """Whether pending ``cp`` (a step's checkpoint, or a decision record)
    still waits for ``result``: a result that settled nothing then did so
    because its run ended (it is dropped); otherwise it is stale (see
    `_settle`)."""
    if cp.status != "pending":
        return False
    if result.execution is None:
        rerun = isinstance(cp, Checkpoint) and cp.rerun
        return cp.attempts == result.attempt and not rerun
    if result.status == "completed" and result.kind == "step":
        return result.execution in cp.executions
    return result.execution in cp.executions and cp.attempts == result.attempt
