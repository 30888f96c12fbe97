"""The migration that moves a run's own records out of the reserved seqs of
its checkpoints, where the releases before kept them, into ``run_records``
(see `._record_sql`): SQLite schema 10, PostgreSQL schema 9. The same
statements serve both stores.

Only this module knows the seqs those releases used; each row keeps every
field (its seq becomes its kind), and leaves the checkpoints.
"""

from __future__ import annotations

from typing import Final

MOVED_TO_RECORDS: Final = {
    999_999_950: "forked_from",
    999_999_960: "stream",
    999_999_970: "updates",
    999_999_982: "cancel_sent",
    999_999_980: "checked_from",
    999_999_981: "cancelled_at",
    999_999_983: "rerun",
    999_999_991: "deadline",
    999_999_992: "continued",
    999_999_993: "continued_from",
}
"""The reserved seqs whose rows become records, with the kind each becomes."""

_COLUMNS: Final = (
    "status, input, output, error, errors, attempts, worker_group, wake_at, enqueued_at,"
    " started_at, finished_at, executions"
)
_SEQS: Final = ", ".join(str(seq) for seq in MOVED_TO_RECORDS)
_KIND: Final = (
    "CASE seq "
    + " ".join(f"WHEN {seq} THEN '{kind}'" for seq, kind in MOVED_TO_RECORDS.items())
    + " END"
)

MOVE_TO_RECORDS: Final = (
    f"INSERT INTO run_records (run_id, kind, {_COLUMNS})"
    f" SELECT run_id, {_KIND}, {_COLUMNS} FROM checkpoints WHERE seq IN ({_SEQS})",
    f"DELETE FROM checkpoints WHERE seq IN ({_SEQS})",
)
"""The statements of the move, in order."""
