"""How a run's records that a worker reads or writes travel in a decision
(or query) task and in its decision.

A worker replaying a body needs four of the run's records: where its body
got `Cancelled` (``cancelled_at``, to deliver it at the same seq again),
where its argument check began (``checked_from``), how many values its
stream holds (``stream``, so that it sends only those past it) and the
updates it applied (``updates``, applied again where they were); a
worker's decision carries the first two back when the body wrote them (the
emitted values and the update log travel in fields of their own). The
releases before kept them in checkpoints at reserved seqs and carried them
so, in the history and in the decision's local checkpoints; they still
travel so, as completed entries at those seqs (of the checkpoint kind and
name those releases gave them), so that engines and workers of either
release read each other (docs/remote-workflows.md, rolling upgrades). This
module is the only one outside the store's migrations
(`.._stores._migrations_records`, where it reads them) that uses those
seqs.

A decision task (and a query's task) and its result carry the seq at which
those releases kept the run's decision checkpoint, `DECISION_ON_WIRE`: the
engine keeps the decision in a record now, and settles it by its kind
whatever seq the result carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .._base._records import Checkpoint, CheckpointKind
from .._base._run_records import RunRecord
from .._stores._migrations_records import DECISION_SEQ, RESERVED_FROM, SEQ_BEFORE

WIRE_SEQS: Final[dict[str, tuple[int, str, CheckpointKind]]] = {
    "stream": (SEQ_BEFORE["stream"], "stream", "local"),
    "updates": (SEQ_BEFORE["updates"], "updates", "signal"),
    "checked_from": (SEQ_BEFORE["checked_from"], "check_arguments", "local"),
    "cancelled_at": (SEQ_BEFORE["cancelled_at"], "cancelled_at", "local"),
}
"""The records that travel: the seq each travels at (where the releases
before kept it), and the name and kind of checkpoint it travels as."""

BODY_SEQ_LIMIT: Final = RESERVED_FROM
"""Body operations take seqs from 1 up to (not including) this; past it
are the seqs at which a run's records travel (and at which the releases
before kept them)."""

DECISION_ON_WIRE: Final = DECISION_SEQ
"""The seq of a decision or query task, and of its result, on the wire."""

_KINDS: Final = {seq: kind for kind, (seq, _, _) in WIRE_SEQS.items()}

DECIDED: Final = frozenset({"checked_from", "cancelled_at"})
"""The records a decision carries back among its local checkpoints (the
stream's values and the update log travel in fields of their own)."""


def records_on_wire(
    records: Iterable[RunRecord], kinds: Iterable[str] = WIRE_SEQS
) -> list[Checkpoint]:
    """The entries of a history that carry those of ``records`` a worker
    reads (of a decision's local checkpoints, with ``kinds`` `DECIDED`)."""
    wanted = frozenset(kinds)
    return [
        Checkpoint(
            run_id=record.run_id,
            seq=WIRE_SEQS[record.kind][0],
            name=WIRE_SEQS[record.kind][1],
            kind=WIRE_SEQS[record.kind][2],
            status=record.status,
            output=record.output,
            enqueued_at=record.enqueued_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
        )
        for record in records
        if record.kind in wanted
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
