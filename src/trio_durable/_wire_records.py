"""How a run's records that a worker reads or writes travel in a decision
(or query) task and in its decision.

A worker replaying a body needs two of the run's records: where its body
got `Cancelled` (``cancelled_at``, to deliver it at the same seq again) and
where its argument check began (``checked_from``); a worker's decision
carries either back when the body wrote it. The releases before kept them
in checkpoints at reserved seqs and carried them so, in the history and in
the decision's local checkpoints; they still travel so, as completed
``local`` entries at those seqs, so that engines and workers of either
release read each other (docs/remote-workflows.md, rolling upgrades). This
module is the only one that knows those seqs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ._records import Checkpoint
from ._run_records import RunRecord

WIRE_SEQS: Final = {"checked_from": 999_999_980, "cancelled_at": 999_999_981}
"""The records that travel, and the seq each travels at."""

_KINDS: Final = {seq: kind for kind, seq in WIRE_SEQS.items()}


def records_on_wire(records: Iterable[RunRecord]) -> list[Checkpoint]:
    """The entries of a history (or of a decision's local checkpoints)
    that carry those of ``records`` a worker reads or writes."""
    return [
        Checkpoint(
            run_id=record.run_id,
            seq=WIRE_SEQS[record.kind],
            name=record.kind,
            kind="local",
            status=record.status,
            output=record.output,
            enqueued_at=record.enqueued_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
        )
        for record in records
        if record.kind in WIRE_SEQS
    ]


def is_record_on_wire(cp: Checkpoint) -> bool:
    """Whether ``cp``, as a history or a decision carries it, is a record."""
    return cp.seq in _KINDS


def record_off_wire(cp: Checkpoint) -> RunRecord:
    """The record an entry that `is_record_on_wire` carries."""
    return RunRecord(
        run_id=cp.run_id,
        kind=_KINDS[cp.seq],
        status=cp.status,
        output=cp.output,
        enqueued_at=cp.enqueued_at,
        started_at=cp.started_at,
        finished_at=cp.finished_at,
    )
