"""The SQL stores' queries for people and tools: finding runs, counting them
by status, summing up fans, reading checkpoint pages, pruning ended runs
(by age, or given by id).

SQLite and PostgreSQL answer them with the same statements, which the
indexes of their schemas serve (their tests assert the plans):

- runs newest first by ``(created_at, id)``: ``runs_created``, or with a
  filter the index that leads with it (``runs_status``, ``runs_workflow``,
  ``runs_namespace``, ``runs_parent``), walked backwards from the cursor;
- runs with tags: ``run_tags``, one row per tag of a run keyed by
  ``(tag, created_at, run_id)`` (triggers on ``runs`` keep it), walked
  backwards for the first tag, the others looked up by key;
- runs by search attributes: ``run_search`` (see `._search_sql`), walked
  for the first equality if no tag is given, the other conditions probed
  per run;
- a fan's members by status, a fan summed up and a run's stamp:
  ``checkpoints_status``, which covers the columns they read (``(run_id,
  status, seq, attempts, enqueued_at, started_at, finished_at)``); ended
  runs by age: ``runs_ended``; runs to delete by id: the primary key.

Several statuses are read one status at a time, each in index order, and
merged: never a sort of every matching run.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, get_args

import trio

from .._base._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    CheckpointStatus,
    FanCounts,
    QueueDepth,
    Run,
    RunFilter,
    RunStamp,
    RunStatus,
    signal_token_prefix,
)
from ._group_commit import Counts, GroupCommit
from ._rows import CHECKPOINT_COLUMNS, load_checkpoint, load_run
from ._search_sql import probe as search_probe
from ._search_sql import walk as search_walk

if TYPE_CHECKING:
    from ._sql_store import Dialect

# A run's fans, one row each (first seq, size, kind, name, read from its
# lowest recorded member), found by hopping: from one fan's member, the next
# fan starts at or after its first seq plus its size, since a fan's members
# hold the consecutive seqs from its first. Each hop reads rows by the
# primary key, from the end of the last fan: the fans' members are never
# walked, only the checkpoints between fans. A member outside its fan's
# range, or without a size, only makes the hop go on from the next seq (a
# fan may then be found twice: `_fan_ranges` merges them).
_FANS = """
    WITH RECURSIVE hop(seq) AS (
        SELECT (SELECT seq FROM checkpoints WHERE run_id = {p} AND parallel_group IS NOT NULL
            ORDER BY seq LIMIT 1)
        UNION ALL
        SELECT (SELECT c.seq FROM checkpoints c WHERE c.run_id = {p}
            AND c.seq >= CASE WHEN f.parallel_group + f.parallel_size > f.seq
                THEN f.parallel_group + f.parallel_size ELSE f.seq + 1 END
            AND c.parallel_group IS NOT NULL
            ORDER BY c.seq LIMIT 1)
        FROM hop JOIN checkpoints f ON f.run_id = {p} AND f.seq = hop.seq
    )
    SELECT f.parallel_group, f.parallel_size, f.kind, f.name, f.seq
    FROM hop JOIN checkpoints f ON f.run_id = {p} AND f.seq = hop.seq
"""

# One fan's members of one status summed up: a range of the covering index
# ``checkpoints_status`` (run, status, seq) read in order, never a table
# row, never sorted or hashed (one status per statement, so no grouping).
_FAN_STATUS = """
    SELECT {fan}, '{status}', count(*), min(seq), max(seq), sum(attempts), min(enqueued_at),
        max(finished_at)
    FROM checkpoints WHERE run_id = {p} AND status = '{status}' AND seq >= {p} AND seq <= {p}
"""

_STATUSES: tuple[CheckpointStatus, ...] = tuple(sorted(get_args(CheckpointStatus)))

# Fans summed up per statement: a bound on its size and its parameters.
_FANS_PER_STATEMENT = 64

# The run's state columns (never its input, output or error).
_RUN_STATE = """
    SELECT namespace, status, updated_at, lease_owner, lease_expiry, wake_at, recoveries
    FROM runs WHERE id = {p}
"""

# Its checkpoints' status, attempts, seqs and times (never their payloads),
# one status at a time: read from the covering index ``checkpoints_status``
# alone.
_CHECKPOINT_STAMP = """
    SELECT '{status}', count(*), sum(attempts), sum(seq), max(enqueued_at), max(started_at),
        max(finished_at)
    FROM checkpoints WHERE run_id = {p} AND status = '{status}'
"""

# Holders and waiters of each queue, counted in one pass over both tables.
_QUEUE_DEPTHS = """
    SELECT queue, sum(admitted), sum(waiting) FROM (
        SELECT queue, 1 AS admitted, 0 AS waiting FROM queue_slots
        UNION ALL SELECT queue, 0 AS admitted, 1 AS waiting FROM queue_waiters
    ) AS depths GROUP BY queue ORDER BY queue
"""

_QUEUE_POSITION = """
    SELECT 1
        + (SELECT COUNT(*) FROM queue_waiters a
           WHERE a.queue = w.queue AND a.priority > w.priority)
        + (SELECT COUNT(*) FROM queue_waiters a
           WHERE a.queue = w.queue AND a.priority = w.priority AND (a.at, a.id) < (w.at, w.id))
    FROM queue_waiters w WHERE w.queue = {p} AND w.run_id = {p} AND w.seq = {p}
"""
"""A waiter's place in its queue's line, in the order of release
(``priority DESC, at, id``): the waiters ahead of it counted as two
ranges of the index ``queue_waiters_line`` (a higher priority; the same
priority and an earlier ``(at, id)``), never the whole line."""


def _where(
    d: Dialect[Any],
    where: RunFilter,
    statuses: Collection[str] | None,
    before: tuple[float, str] | None,
    runs: str,
) -> tuple[str, list[Any], str]:
    """The FROM and WHERE of a query of ``runs`` (the runs table as ``r``,
    and what it joins), its parameters, and its ORDER BY (newest first by
    the keys of the index it walks)."""
    p = d.param
    clauses: list[str] = []
    params: list[Any] = []
    if where.tags:
        # Walk run_tags for the first tag; it carries created_at, so the
        # order and the cursor are its own index's.
        created, ident = "t.created_at", "t.run_id"
        # CROSS JOIN: SQLite keeps run_tags the outer loop.
        source = f"run_tags t CROSS JOIN {runs}"
        clauses.append(f"t.tag = {p} AND r.id = t.run_id")
        params.append(where.tags[0])
        for tag in where.tags[1:]:
            # A probe of run_tags' key per run walked. The OFFSET keeps
            # PostgreSQL from making it a join (hashed, then sorted).
            clauses.append(
                f"EXISTS (SELECT 1 FROM run_tags x WHERE x.tag = {p}"
                " AND x.created_at = t.created_at AND x.run_id = t.run_id LIMIT 1 OFFSET 0)"
            )
            params.append(tag)
    else:
        created, ident, source = "r.created_at", "r.id", runs
    search = list(where.search)
    walked = None if where.tags else next((c for c in search if c.op == "="), None)
    if walked is not None:
        # Walk run_search for an equality, as run_tags for a tag.
        search.remove(walked)
        table, condition, values = search_walk(p, walked)
        created, ident = "s.created_at", "s.run_id"
        source = f"{table} CROSS JOIN {runs}"
        clauses.append(f"{condition} AND r.id = s.run_id")
        params.extend(values)
    for other in search:
        condition, values = search_probe(p, other, ident)
        clauses.append(condition)
        params.extend(values)
    if statuses is not None:
        wanted = sorted(statuses)
        clauses.append(f"r.status IN ({', '.join([p] * len(wanted))})")
        params.extend(wanted)
    for column, value in (
        ("r.workflow", where.workflow),
        ("r.namespace", where.namespace),
        ("r.parent_id", where.parent_id),
    ):
        if value is not None:
            clauses.append(f"{column} = {p}")
            params.append(value)
    if where.top_level:
        clauses.append("r.parent_id IS NULL")
    if where.id_prefix is not None:
        # The range walks the primary key; substr (counting characters in
        # both dialects) is the exact test, whatever the collation.
        clauses.append(f"r.id{d.bytewise} >= {p} AND substr(r.id, 1, {p}) = {p}")
        params.extend((where.id_prefix, len(where.id_prefix), where.id_prefix))
    if where.created_after is not None:
        clauses.append(f"{created} >= {p}")
        params.append(where.created_after)
    # Past the cursor, the cursor bounds the walk; an upper bound above it
    # would only make the index walk start higher and skip what it passed.
    if where.created_before is not None and (before is None or before[0] >= where.created_before):
        clauses.append(f"{created} < {p}")
        params.append(where.created_before)
    if before is not None:
        clauses.append(f"({created}, {ident}) < ({p}, {p})")
        params.extend(before)
    condition = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"FROM {source}{condition}", params, f" ORDER BY {created} DESC, {ident} DESC"


def find_runs_statements(
    d: Dialect[Any], where: RunFilter, before: tuple[float, str] | None, limit: int
) -> list[tuple[str, list[Any]]]:
    """The statements of `Store.find_runs`: one, or one per status."""
    each: list[list[str] | None] = (
        [None] if where.statuses is None else [[status] for status in sorted(where.statuses)]
    )
    statements = []
    for statuses in each:
        source, params, order = _where(d, where, statuses, before, d.run_from)
        statements.append(
            (f"SELECT {d.run_columns} {source}{order} LIMIT {d.param}", [*params, limit])
        )
    return statements


def count_runs_statement(d: Dialect[Any], where: RunFilter) -> tuple[str, list[Any]]:
    """The statement of `Store.count_runs`."""
    source, params, _ = _where(d, where, where.statuses, None, "runs r")
    return f"SELECT r.status, count(*) {source} GROUP BY r.status ORDER BY r.status", params


def find_checkpoints_statement(
    d: Dialect[Any],
    run_id: str,
    from_seq: int,
    to_seq: int,
    statuses: Collection[CheckpointStatus] | None,
    offset: int,
    limit: int,
) -> tuple[str, list[Any]]:
    """The statement of `Store.find_checkpoints`."""
    p = d.param
    condition = f"run_id = {p} AND seq >= {p} AND seq <= {p}"
    params: list[Any] = [run_id, from_seq, to_seq]
    if statuses is not None:
        wanted = sorted(set(statuses))
        condition += f" AND status IN ({', '.join([p] * len(wanted))})"
        params.extend(wanted)
    params.extend((max(limit, 0), max(offset, 0)))
    return (
        f"SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE {condition}"
        f" ORDER BY seq LIMIT {p} OFFSET {p}"
    ), params


def prune_candidates_statement(d: Dialect[Any]) -> str:
    """Ended runs of one status older than a time, oldest first, whose
    parent (if any) has ended too: the ``runs_ended`` index."""
    p = d.param
    terminal = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
    return (
        # The IN list of the partial index's own predicate lets the planner
        # see that the index holds every row asked for.
        f"SELECT r.id FROM runs r WHERE r.status = {p} AND r.status IN ({terminal})"
        f" AND r.updated_at < {p}"
        " AND NOT EXISTS (SELECT 1 FROM runs q WHERE q.id = r.parent_id"
        f" AND q.status NOT IN ({terminal}))"
        f" ORDER BY r.updated_at, r.id LIMIT {p}{d.lock_skipping}"
    )


def prune(
    cur: Any, d: Dialect[Any], older_than: Mapping[RunStatus, float], limit: int
) -> list[str]:
    """Delete the runs `Store.prune_runs` names (in a write transaction)."""
    candidates = prune_candidates_statement(d)
    doomed: list[str] = []
    for status, cutoff in sorted(older_than.items()):
        if status not in TERMINAL_STATUSES or len(doomed) >= limit:
            continue
        rows = cur.execute(candidates, (status, cutoff, limit - len(doomed))).fetchall()
        doomed.extend(row[0] for row in rows)
    delete_run_rows(cur, d, doomed)
    return sorted(doomed)


_IDS_PER_SELECT: Final = 500
"""Run ids per select of `delete_runs` (well under SQLite's limit of
parameters per statement)."""


def deletable_statement(d: Dialect[Any], count: int) -> str:
    """Of ``count`` run ids, those of ended runs whose parent (if any) has
    ended too: what `RunDeleter.delete_runs` deletes."""
    p = d.param
    terminal = ", ".join(f"'{status}'" for status in sorted(TERMINAL_STATUSES))
    return (
        f"SELECT r.id FROM runs r WHERE r.id IN ({', '.join([p] * count)})"
        f" AND r.status IN ({terminal})"
        " AND NOT EXISTS (SELECT 1 FROM runs q WHERE q.id = r.parent_id"
        f" AND q.status NOT IN ({terminal}))"
        f" ORDER BY r.id{d.lock_skipping}"
    )


def delete_runs(cur: Any, d: Dialect[Any], run_ids: Sequence[str]) -> list[str]:
    """Delete the runs `RunDeleter.delete_runs` names (in a write transaction)."""
    wanted = sorted(set(run_ids))
    doomed: list[str] = []
    for start in range(0, len(wanted), _IDS_PER_SELECT):
        chunk = wanted[start : start + _IDS_PER_SELECT]
        rows = cur.execute(deletable_statement(d, len(chunk)), chunk).fetchall()
        doomed.extend(row[0] for row in rows)
    delete_run_rows(cur, d, doomed)
    return sorted(doomed)


def delete_run_rows(cur: Any, d: Dialect[Any], doomed: Sequence[str]) -> None:
    """Delete the runs ``doomed`` with every row of theirs (in a write
    transaction): what pruning a run deletes."""
    if not doomed:
        return
    p = d.param
    by_run = [(run_id,) for run_id in doomed]
    # The keyed values that go with a run (claims, windows, published and
    # stream values, updates) by ``durable_values_run``.
    for table in ("checkpoints", "queue_slots", "queue_waiters", "durable_values", *d.run_tables):
        cur.executemany(f"DELETE FROM {table} WHERE run_id = {p}", by_run)
    # A run's signal tokens share a prefix (see `signal_token`): a range of
    # the token indexes, compared byte by byte.
    tokens = []
    for run_id in doomed:
        prefix = signal_token_prefix(run_id)
        tokens.append((prefix, prefix[:-1] + chr(ord(",") + 1)))
    for table in ("signal_waiters", "buffered_signals"):
        cur.executemany(
            f"DELETE FROM {table} WHERE token{d.bytewise} >= {p} AND token{d.bytewise} < {p}",
            tokens,
        )
    # The runs last: their triggers delete their run_tags rows.
    cur.executemany(f"DELETE FROM runs WHERE id = {p}", by_run)


class SQLQueries:
    """The query methods of `SQLStore` (see `Store.find_runs` and after)."""

    _commit: GroupCommit[Any]
    _dialect: Dialect[Any]

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[Run]:
        limit = max(limit, 0)
        statements = find_runs_statements(self._dialect, where, before, limit)

        def work(cur: Any) -> tuple[list[Run], Counts]:
            runs: list[Run] = []
            for statement, params in statements:
                runs.extend(load_run(row) for row in cur.execute(statement, params).fetchall())
            read = len(runs)
            if len(statements) > 1:
                runs.sort(key=lambda run: (run.created_at, run.id), reverse=True)
                del runs[limit:]
            return runs, (0, 0, read, 0)

        return await self._commit.submit(work, writes=False)

    async def count_runs(self, where: RunFilter) -> dict[RunStatus, int]:
        statement, params = count_runs_statement(self._dialect, where)

        def work(cur: Any) -> tuple[dict[RunStatus, int], None]:
            return {row[0]: int(row[1]) for row in cur.execute(statement, params).fetchall()}, None

        return await self._commit.submit(work, writes=False)

    async def fan_counts(self, run_id: str) -> list[FanCounts]:
        p = self._dialect.param
        fans_statement = _FANS.format(p=p)

        def work(cur: Any) -> tuple[list[FanCounts], None]:
            fans = _fan_ranges(cur.execute(fans_statement, (run_id,) * 4).fetchall())
            rows: list[FanCounts] = []
            for start in range(0, len(fans), _FANS_PER_STATEMENT):
                chunk = fans[start : start + _FANS_PER_STATEMENT]
                arms: list[str] = []
                params: list[Any] = []
                for i, (fan, _, _, _, last) in enumerate(chunk):
                    for status in _STATUSES:
                        arms.append(_FAN_STATUS.format(fan=i, status=status, p=p))
                        params.extend((run_id, fan, last))
                for row in cur.execute(" UNION ALL ".join(arms), params).fetchall():
                    if row[2]:
                        fan, size, kind, name, _ = chunk[row[0]]
                        rows.append(_fan_counts(fan, size, kind, name, row[1:]))
            rows.sort(key=lambda row: (row.fan, row.status))
            return rows, None

        return await self._commit.submit(work, writes=False)

    async def queue_depths(self) -> list[QueueDepth]:
        def work(cur: Any) -> tuple[list[QueueDepth], None]:
            rows = cur.execute(_QUEUE_DEPTHS).fetchall()
            return [
                QueueDepth(queue=row[0], admitted=int(row[1]), waiting=int(row[2])) for row in rows
            ], None

        return await self._commit.submit(work, writes=False)

    async def queue_position(self, queue: str, run_id: str, seq: int) -> int | None:
        statement = _QUEUE_POSITION.format(p=self._dialect.param)

        def work(cur: Any) -> tuple[int | None, None]:
            row = cur.execute(statement, (queue, run_id, seq)).fetchone()
            return None if row is None else int(row[0]), None

        return await self._commit.submit(work, writes=False)

    async def run_stamp(self, run_id: str) -> RunStamp | None:
        run_statement = _RUN_STATE.format(p=self._dialect.param)
        checkpoints_statement = " UNION ALL ".join(
            _CHECKPOINT_STAMP.format(p=self._dialect.param, status=status) for status in _STATUSES
        )

        def work(cur: Any) -> tuple[RunStamp | None, Counts]:
            # One read transaction: the run and its checkpoints as of one
            # moment.
            row = cur.execute(run_statement, (run_id,)).fetchone()
            if row is None:
                return None, (0, 0, 0, 0)
            by_status = [
                found
                for found in cur.execute(checkpoints_statement, (run_id,) * len(_STATUSES))
                if found[1]
            ]
            return _run_stamp(run_id, row, by_status), (0, 0, 1, 0)

        return await self._commit.submit(work, writes=False)

    async def find_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        *,
        statuses: Collection[CheckpointStatus] | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[Checkpoint]:
        statement, params = find_checkpoints_statement(
            self._dialect, run_id, from_seq, to_seq, statuses, offset, limit
        )

        def work(cur: Any) -> tuple[list[Checkpoint], Counts]:
            found = [load_checkpoint(row) for row in cur.execute(statement, params).fetchall()]
            return found, (0, 0, 0, len(found))

        return await self._commit.submit(work, writes=False)

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        dialect = self._dialect
        older = dict(older_than)

        def work(cur: Any) -> tuple[list[str], Counts]:
            return prune(cur, dialect, older, max(limit, 0)), (1, 0, 0, 0)

        return await self._commit.submit(work, writes=True)

    async def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        dialect = self._dialect
        wanted = list(run_ids)
        if not wanted:
            await trio.lowlevel.checkpoint()
            return []

        def work(cur: Any) -> tuple[list[str], Counts]:
            return delete_runs(cur, dialect, wanted), (1, 0, 0, 0)

        return await self._commit.submit(work, writes=True)


def _fan_ranges(found: list[Any]) -> list[tuple[int, int, Any, Any, int]]:
    """Each fan the hops found, once: its first seq, size, kind, name and
    the last seq of its range (its size's, or its last member found)."""
    fans: dict[int, tuple[int, int, Any, Any, int]] = {}
    for group, size, kind, name, seq in found:
        first, size = int(group), int(size or 0)
        last = max(first + size - 1, int(seq))
        if first in fans:
            _, known, kind, name, end = fans[first]
            size, last = max(size, known), max(last, end)
        fans[first] = (first, size, kind, name, last)
    return list(fans.values())


def _fan_counts(fan: Any, size: Any, kind: Any, name: Any, row: Any) -> FanCounts:
    status, count, first, last, attempts, enqueued, finished = row
    return FanCounts(
        fan=int(fan),
        status=status,
        count=int(count),
        size=int(size or 0),
        first_seq=int(first),
        last_seq=int(last),
        attempts=int(attempts or 0),
        first_enqueued_at=enqueued,
        last_finished_at=finished,
        kind=kind,
        name=name,
    )


def _run_stamp(run_id: str, row: Any, by_status: list[Any]) -> RunStamp:
    (namespace, status, updated_at, owner, expiry, wake_at, recoveries) = row
    counts = {name: int(count) for name, count, *_ in by_status}
    return RunStamp(
        run_id=run_id,
        namespace=namespace,
        status=status,
        updated_at=updated_at,
        lease_owner=owner,
        lease_expiry=expiry,
        wake_at=wake_at,
        recoveries=int(recoveries),
        checkpoints=sum(counts.values()),
        pending=counts.get("pending", 0),
        running=counts.get("running", 0),
        completed=counts.get("completed", 0),
        failed=counts.get("failed", 0),
        attempts=sum(int(r[2] or 0) for r in by_status),
        seq_sum=sum(int(r[3]) for r in by_status),
        last_enqueued_at=_latest(r[4] for r in by_status),
        last_started_at=_latest(r[5] for r in by_status),
        last_finished_at=_latest(r[6] for r in by_status),
    )


def _latest(values: Iterable[float | None]) -> float | None:
    return max((value for value in values if value is not None), default=None)
