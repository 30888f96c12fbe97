"""The migrations that move a run's own records out of the reserved seqs of
its checkpoints, where the releases before kept them, into ``run_records``
(see `._record_sql`): SQLite schemas 10 to 12, PostgreSQL schemas 9 to 11;
and the one that gives the marks of what pending checkpoints and records
wait for, kept in their ``error`` before, a column of their own
(``mark``): SQLite schema 13, PostgreSQL schema 12. The same statements
serve both stores.

Only this module knows the seqs those releases used (the wire reads them
here, for the tasks that still carry records at them); each row keeps every
field (its seq becomes its kind), and leaves the checkpoints.
"""

from __future__ import annotations

from typing import Final

from ._ops import QUEUE_SLOT, WHOLE_RUN

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

SEQ_BEFORE: Final = {kind: seq for seq, kind in MOVED_TO_RECORDS.items()}
"""The seq at which the releases before kept each record of
`MOVED_TO_RECORDS` (a decision task still carries some at these seqs,
`.._wire._wire_records`)."""

RESERVED_FROM: Final = 999_999_000
"""The first of the seqs those releases reserved for a run's own records;
a body's operations take seqs below it."""

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


ADMISSION_SEQ: Final = 999_999_990
"""The seq of a run's admission checkpoint in the releases before SQLite
schema 11 and PostgreSQL schema 10; the run held or waited for its queue
slot under it too."""


def move_admission(error_code: str, quoted_queue: str) -> tuple[str, ...]:
    """The statements that move runs' admission checkpoints into records of
    kind ``admission`` (SQLite schema 11, PostgreSQL schema 10), in order,
    given the dialect's expressions of the code of the ``error`` column and
    of ``queue`` as JSON text.

    The checkpoint marked its run's wait in its error's code: ``queued``
    (in line) or ``rate_limited`` (a time reserved ahead, which its output
    holds). The record keeps no mark: the run holds or waits for its slot
    under `._ops.WHOLE_RUN`, and holds one while it has a `._ops.QUEUE_SLOT`
    record; a time reserved ahead is waited for while it is ahead.
    """
    seq = ADMISSION_SEQ
    return (
        "UPDATE checkpoints SET error = NULL"
        f" WHERE seq = {seq} AND status = 'pending'"
        f" AND {error_code} IN ('queued', 'rate_limited')",
        f"INSERT INTO run_records (run_id, kind, {_COLUMNS})"
        f" SELECT run_id, 'admission', {_COLUMNS} FROM checkpoints WHERE seq = {seq}",
        f"DELETE FROM checkpoints WHERE seq = {seq}",
        f"UPDATE queue_slots SET seq = {WHOLE_RUN} WHERE seq = {seq}",
        f"UPDATE queue_waiters SET seq = {WHOLE_RUN} WHERE seq = {seq}",
        "INSERT INTO run_records (run_id, kind, status, input, attempts)"
        f" SELECT run_id, '{QUEUE_SLOT}', 'completed', {quoted_queue}, 0"
        f" FROM queue_slots WHERE seq = {WHOLE_RUN}",
    )


DECISION_SEQ: Final = 999_999_999
"""The seq of a remote workflow's decision checkpoint in the releases before
SQLite schema 12 and PostgreSQL schema 11."""

MOVE_DECISIONS: Final = (
    f"INSERT INTO run_records (run_id, kind, {_COLUMNS})"
    f" SELECT run_id, 'decision', {_COLUMNS} FROM checkpoints WHERE seq = {DECISION_SEQ}",
    f"DELETE FROM checkpoints WHERE seq = {DECISION_SEQ}",
)
"""The statements that move remote workflows' decision checkpoints into
records of kind ``decision`` (SQLite schema 12, PostgreSQL schema 11), in
order: every field is kept (a decision task out stays out, and its answer
settles the record)."""


MARKS: Final = (
    "out",
    "broker_unavailable",
    "queued",
    "rate_limited",
    "blocked",
    "fan_window",
    "resend",
    "paused",
    "continued",
)
"""The codes of the marks that the releases before SQLite schema 13 and
PostgreSQL schema 12 kept in a pending checkpoint's (or record's) error."""


def move_marks(error_code: str) -> tuple[str, ...]:
    """The statements that copy the marks of pending checkpoints and records
    from ``error`` into ``mark`` (a column the migration adds before), given
    the dialect's expression of the code of the ``error`` column. A mark's
    JSON (code, message, details) is the error's as it was written; the
    error stays, as a pending row's error shows its mark."""
    codes = ", ".join(f"'{code}'" for code in MARKS)
    return tuple(
        f"UPDATE {table} SET mark = error WHERE status = 'pending' AND {error_code} IN ({codes})"
        for table in ("checkpoints", "run_records")
    )
