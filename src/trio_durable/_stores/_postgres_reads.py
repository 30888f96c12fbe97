"""The PostgreSQL store's reads that its tests check the plans of: the due
listing, the stalled runs, and the counts the join barrier takes."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from .._base._records import CheckpointStatus

LIST_STALLED: Final = (
    "SELECT r.id FROM runs r WHERE r.status = 'suspended' AND r.wake_at IS NULL"
    " AND NOT EXISTS (SELECT FROM checkpoints c WHERE c.run_id = r.id"
    " AND c.status IN ('pending', 'running') AND NOT (c.kind = 'child' AND EXISTS"
    " (SELECT FROM runs k WHERE k.id = c.child_id"
    " AND (k.parent_seq IS NULL OR k.parent_seq <> c.seq))))"
    " ORDER BY r.created_at, r.id LIMIT %s"
)
"""The stalled runs (see `Store.list_stalled_runs`); a pending child
checkpoint whose child was detached from it waits for nothing."""


LIST_DUE_RUNS: Final = "SELECT id FROM runs WHERE due_at <= %s ORDER BY due_at, id LIMIT %s"
"""The due listing; the partial index ``runs_due`` answers it (see the tests)."""

NEXT_DUE_TIME: Final = "SELECT min(due_at) FROM runs WHERE due_at IS NOT NULL"


def status_in(statuses: list[str]) -> tuple[str, list[Any]]:
    # One parameter, however many statuses: one prepared statement.
    return "r.status = ANY(%s::text[])", [statuses]


def count_checkpoints_query(
    run_id: str,
    from_seq: int,
    to_seq: int,
    statuses: Collection[CheckpointStatus],
    limit: int | None = None,
) -> tuple[str, list[Any]]:
    """The statement and parameters of `Store.count_checkpoints` (the tests
    show its plan); the index ``checkpoints_status`` answers it."""
    matching = (
        "FROM checkpoints WHERE run_id = %s AND status = ANY(%s::text[])"
        " AND seq >= %s AND seq <= %s"
    )
    params: list[Any] = [run_id, sorted(set(statuses)), from_seq, to_seq]
    if limit is None:
        return f"SELECT count(*) {matching}", params
    # The barrier only needs to know whether a threshold is reached: stop
    # reading the index there.
    params.append(max(limit, 0))
    return f"SELECT count(*) FROM (SELECT 1 {matching} LIMIT %s) AS reached", params
