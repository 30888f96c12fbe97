"""The memory store's run records (see `_run_records`): the rows, the
writes of `RecordOp` with their undos, and the read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

from .._base._run_records import RunRecord
from ._record_ops import (
    ClaimRecord,
    DeleteRecords,
    PutRecord,
    RecordOp,
    SettleRecord,
    settle_applies,
    settled,
)

_Undo = Callable[[], None]


@final
class MemoryRecords:
    """The records of each run, by kind."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, RunRecord]] = {}

    def of(self, run_id: str) -> tuple[RunRecord, ...]:
        """``run_id``'s records, ordered by kind."""
        table = self.rows.get(run_id)
        if not table:
            return ()
        return tuple(table[kind] for kind in sorted(table))

    def apply(self, op: RecordOp, run_status: str | None, journal: list[_Undo]) -> Any:
        """Apply ``op`` (the status of its run is ``run_status``)."""
        match op:
            case PutRecord(record):
                self._set(record.run_id, record.kind, record, journal)
                return None
            case ClaimRecord(record, attempt):
                stored = self.rows.get(record.run_id, {}).get(record.kind)
                if stored is None or stored.status != "pending":
                    return False
                if attempt is not None and stored.attempts != attempt:
                    return False
                self._set(record.run_id, record.kind, record, journal)
                return True
            case SettleRecord():
                stored = self.rows.get(op.run_id, {}).get(op.kind)
                if stored is None or not settle_applies(stored, op):
                    return None
                if op.unless_run_status and run_status in op.unless_run_status:
                    return None
                done = settled(stored, op)
                self._set(op.run_id, op.kind, done, journal)
                return done
            case DeleteRecords(run_id, kinds):
                for kind in kinds:
                    if kind in self.rows.get(run_id, {}):
                        self._set(run_id, kind, None, journal)
                return None

    def forget(self, run_id: str) -> None:
        """Delete every record of a pruned run."""
        self.rows.pop(run_id, None)

    def _set(self, run_id: str, kind: str, record: RunRecord | None, journal: list[_Undo]) -> None:
        table = self.rows.setdefault(run_id, {})
        old = table.get(kind)
        _put(table, kind, record)

        def undo() -> None:
            _put(table, kind, old)

        journal.append(undo)


def _put(table: dict[str, RunRecord], kind: str, record: RunRecord | None) -> None:
    if record is None:
        table.pop(kind, None)
    else:
        table[kind] = record
