"""Reading runs for people and tools: finding runs, a run's history, its
detail with fans folded, and pages of a fan's members.

Each query is a function of a `Store`, so every front end (`Engine`, a
client of another process, the command line) answers it the same way.
They check their arguments (`UsageError`), find the run (`RunNotFoundError`)
and read O(page) rows: a fan of 100,000 members costs a few aggregate rows
and one page, never its members one by one.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, get_args

import attrs
import trio

from .._base._bounds import MAX_INTEGER, check_integer, check_name, is_finite, shown
from .._base._exceptions import RunNotFoundError, UsageError
from .._base._index_text import refuse_nul
from .._base._on_error import HANDOFF_BASE
from .._base._records import Checkpoint, CheckpointStatus, Run, RunFilter, RunStatus
from .._base._run_records import RunRecord
from .._features.fork._fork import fork_origin
from .._features.lifecycle._lifecycle import CONTINUED_AS
from .._features.lifecycle._retried import retried_histories
from .._features.search._search_attributes import filter_conditions
from .._kernel._decision_record import decision_of
from .._kernel._options import check_id
from .._kernel._views import (
    FIRST_FAILURES,
    FOLD_WIDTH,
    MAX_PAGE,
    FanPage,
    FanStats,
    HistoryEntry,
    RunDetail,
    RunHistory,
    RunPage,
)
from .._stores._base import Store

_RUN_STATUSES: Final[frozenset[str]] = frozenset(get_args(RunStatus))
_CHECKPOINT_STATUSES: Final[tuple[CheckpointStatus, ...]] = get_args(CheckpointStatus)
_FAILED: Final[tuple[CheckpointStatus, ...]] = ("failed",)


async def find_run(store: Store, run_id: str, namespace: str | None = None) -> Run:
    """The run, checked to be in ``namespace`` if one is given.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      UsageError: ``namespace`` is malformed, or ``run_id`` holds a NUL
        character.
    """
    if namespace is not None:
        check_id("namespace", namespace)
    refuse_nul("run_id", run_id)
    run = await store.get_run(run_id) if isinstance(run_id, str) else None
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    if namespace is not None and run.namespace != namespace:
        # Worded as for a missing run: another tenant's run stays unseen.
        raise RunNotFoundError(f"no run {run_id!r} in namespace {namespace!r}")
    return run


# -- finding runs -------------------------------------------------------------------


def encode_cursor(run: Run) -> str:
    """The cursor of the page after ``run``: opaque text for callers."""
    key = json.dumps([run.created_at, run.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(key.encode()).decode()


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The ``(created_at, id)`` a cursor continues after.

    Raises:
      UsageError: It is not a cursor a `RunPage` gave.
    """
    try:
        created_at, run_id = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
        if not isinstance(run_id, str) or isinstance(created_at, bool):
            raise ValueError
        if not is_finite(created_at):
            raise ValueError
        # No run id holds a NUL; a forged one must not reach an index.
        refuse_nul("a cursor's run id", run_id)
        return float(created_at), run_id
    except (ValueError, TypeError, UnicodeError, binascii.Error):
        raise UsageError(
            f"malformed cursor {shown(cursor)}: pass a RunPage's next_cursor"
        ) from None


def _time(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise UsageError(f"{name} must be an aware datetime (with a tzinfo), not {value!r}")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not is_finite(value):
        raise UsageError(f"{name} must be seconds since the epoch or a datetime, not {value!r}")
    return float(value)


def _text(name: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise UsageError(f"{name} must be a non-empty string, not {value!r}")
    refuse_nul(name, value)
    return value


def _statuses(status: object) -> frozenset[RunStatus] | None:
    if status is None:
        return None
    wanted = [status] if isinstance(status, str) else status
    if not isinstance(wanted, Iterable) or isinstance(wanted, bytes | dict):
        raise UsageError(f"status must be a run status or a collection of them, not {status!r}")
    found = frozenset(wanted)
    unknown = sorted(repr(s) for s in found if s not in _RUN_STATUSES)
    if unknown or not found:
        raise UsageError(
            f"status must name one or more of {', '.join(sorted(_RUN_STATUSES))}; got {status!r}"
        )
    return found


def run_filter(
    *,
    status: RunStatus | Collection[RunStatus] | None = None,
    workflow: str | None = None,
    namespace: str | None = None,
    tags: Collection[str] = (),
    created_after: float | datetime.datetime | None = None,
    created_before: float | datetime.datetime | None = None,
    parent_id: str | None = None,
    top_level: bool = False,
    id_prefix: str | None = None,
) -> RunFilter:
    """The `RunFilter` of `Engine.list_runs`'s arguments, checked.

    Raises:
      UsageError: An argument is malformed.
    """
    if namespace is not None:
        check_id("namespace", namespace)
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise UsageError(f"tags must be a collection of strings, not {tags!r}")
    tag_list = list(tags)
    if not all(isinstance(tag, str) and tag for tag in tag_list):
        raise UsageError(f"tags must be non-empty strings, not {shown(tags)}")
    for tag in tag_list:
        check_name("a tag", tag)
    if not isinstance(top_level, bool):
        raise UsageError(f"top_level must be a bool, not {top_level!r}")
    if top_level and parent_id is not None:
        raise UsageError("top_level and parent_id exclude each other: a child has a parent")
    return RunFilter(
        statuses=_statuses(status),
        workflow=_text("workflow", workflow),
        namespace=namespace,
        tags=tuple(sorted(set(tag_list))),
        created_after=_time("created_after", created_after),
        created_before=_time("created_before", created_before),
        parent_id=_text("parent_id", parent_id),
        top_level=_flag("top_level", top_level),
        id_prefix=_text("id_prefix", id_prefix),
    )


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be True or False, not {value!r}")
    return value


def _limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise UsageError(f"limit must be an integer from 1 to {MAX_PAGE}, not {limit!r}")
    return limit


async def list_runs(
    store: Store,
    *,
    status: RunStatus | Collection[RunStatus] | None = None,
    workflow: str | None = None,
    namespace: str | None = None,
    tags: Collection[str] = (),
    created_after: float | datetime.datetime | None = None,
    created_before: float | datetime.datetime | None = None,
    parent_id: str | None = None,
    top_level: bool = False,
    id_prefix: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
    facets: bool = False,
    search_attributes: Mapping[str, Any] | None = None,
) -> RunPage:
    """A page of the runs matching every filter given, newest first (see
    `Engine.list_runs`).

    Raises:
      SearchAttributeError: A search attribute filter is malformed.
      UsageError: A filter, the limit or the cursor is malformed.
    """
    where = run_filter(
        status=status,
        workflow=workflow,
        namespace=namespace,
        tags=tags,
        created_after=created_after,
        created_before=created_before,
        parent_id=parent_id,
        top_level=top_level,
        id_prefix=id_prefix,
    )
    limit = _limit(limit)
    before = None if cursor is None else decode_cursor(_text("cursor", cursor) or "")
    search = await filter_conditions(store, search_attributes)
    if search:
        where = attrs.evolve(where, search=search)
    # One more than the page tells whether another page follows.
    runs = await store.find_runs(where, before=before, limit=limit + 1)
    page = tuple(runs[:limit])
    next_cursor = encode_cursor(page[-1]) if len(runs) > limit else None
    counts = None
    if facets:
        counts = await store.count_runs(attrs.evolve(where, statuses=None))
    return RunPage(runs=page, next_cursor=next_cursor, facets=counts)


async def count_runs(
    store: Store,
    *,
    status: RunStatus | Collection[RunStatus] | None = None,
    workflow: str | None = None,
    namespace: str | None = None,
    tags: Collection[str] = (),
    created_after: float | datetime.datetime | None = None,
    created_before: float | datetime.datetime | None = None,
    parent_id: str | None = None,
    top_level: bool = False,
    id_prefix: str | None = None,
    search_attributes: Mapping[str, Any] | None = None,
) -> dict[RunStatus, int]:
    """How many runs match every filter given, per status (see
    `Engine.count_runs`).

    Raises:
      SearchAttributeError: A search attribute filter is malformed.
      UsageError: A filter is malformed.
    """
    where = run_filter(
        status=status,
        workflow=workflow,
        namespace=namespace,
        tags=tags,
        created_after=created_after,
        created_before=created_before,
        parent_id=parent_id,
        top_level=top_level,
        id_prefix=id_prefix,
    )
    search = await filter_conditions(store, search_attributes)
    if search:
        where = attrs.evolve(where, search=search)
    return await store.count_runs(where)


# -- a run's history and detail -----------------------------------------------------


def _links(
    checkpoints: Iterable[Checkpoint], records: Iterable[RunRecord]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The child runs and the on-error handlers among ``checkpoints``, the
    generation the run continued as (its record among ``records``, if it
    continued) listed last of its children."""
    children: list[str] = []
    handlers: list[str] = []
    for cp in checkpoints:
        if cp.kind == "child" and cp.child_id is not None:
            (handlers if cp.seq >= HANDOFF_BASE else children).append(cp.child_id)
    for record in records:
        if record.kind == CONTINUED_AS and record.output is not None:
            children.append(json.loads(record.output))
    return tuple(children), tuple(handlers)


async def handed_to(store: Store, runs: Iterable[Run]) -> dict[str, str]:
    """The on-error handler each of ``runs`` was last handed to, for those
    handed to one (their status is their handler's outcome, so a list shows
    them as failed and handled instead): one read of the handoff seqs per
    run, as `run_detail` finds its handlers, all at once (a store that
    groups its calls reads them in one trip)."""
    handed: dict[str, str] = {}

    async def read(run_id: str) -> None:
        _, handlers = _links(await store.get_checkpoints(run_id, HANDOFF_BASE), ())
        if handlers:
            handed[run_id] = handlers[-1]

    async with trio.open_nursery() as nursery:
        for run in runs:
            nursery.start_soon(read, run.id)
    return handed


async def history(store: Store, run_id: str, *, namespace: str | None = None) -> RunHistory:
    """Every checkpoint of the run, by seq, without payloads, and what each
    retry of it replaced (see `Engine.history`).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
    """
    run = await find_run(store, run_id, namespace)
    checkpoints = await store.get_checkpoints(run.id)
    records = await store.get_records(run.id)
    children, handlers = _links(checkpoints, records)
    return RunHistory(
        run=run,
        entries=tuple(HistoryEntry.of(cp) for cp in checkpoints),
        children=children,
        handlers=handlers,
        retried=await retried_histories(store, run.id),
        waiting=decision_waits(records),
    )


async def fan_stats(store: Store, run_id: str) -> list[FanStats]:
    """The stats of every fan of a run, by first seq: one aggregate row per
    fan and status, and the first failures of each fan that has some."""
    grouped: dict[int, list[Any]] = {}
    for row in await store.fan_counts(run_id):
        grouped.setdefault(row.fan, []).append(row)
    stats: list[FanStats] = []
    for fan, rows in grouped.items():
        counts = {row.status: row.count for row in rows}
        first = min(row.first_seq for row in rows)
        last = max(row.last_seq for row in rows)
        failures: tuple[HistoryEntry, ...] = ()
        if counts.get("failed"):
            found = await store.find_checkpoints(
                run_id, first, last, statuses=_FAILED, limit=FIRST_FAILURES
            )
            failures = tuple(HistoryEntry.of(cp) for cp in found)
        stats.append(
            FanStats(
                # A fan is known by its first seq, the parallel_group of
                # its members (recorded or not).
                first_seq=fan,
                last_seq=last,
                size=max(max(row.size for row in rows), sum(counts.values())),
                kind=min(row.kind for row in rows),
                name=min(row.name for row in rows),
                counts=counts,
                attempts=sum(row.attempts for row in rows),
                first_enqueued_at=min(
                    _present(row.first_enqueued_at for row in rows), default=None
                ),
                last_finished_at=max(_present(row.last_finished_at for row in rows), default=None),
                first_failures=failures,
            )
        )
    return stats


def _present(values: Iterable[float | None]) -> list[float]:
    return [value for value in values if value is not None]


async def run_detail(store: Store, run_id: str, *, namespace: str | None = None) -> RunDetail:
    """The run with its fans summed up and wide fans folded (see
    `Engine.run_detail`).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
    """
    run = await find_run(store, run_id, namespace)
    fans = await fan_stats(store, run.id)
    wide = [fan for fan in fans if fan.size > FOLD_WIDTH]
    # The checkpoints outside wide fans are the seq ranges between them
    # (a fan's members hold consecutive seqs): read those ranges only.
    checkpoints: list[Checkpoint] = []
    timeline: list[HistoryEntry | FanStats] = []
    start: int | None = None
    for fan in wide:
        low = fan.first_seq
        high = max(fan.last_seq, fan.first_seq + fan.size - 1)
        if start is None or start < low:
            found = await store.get_checkpoints(run.id, start, low - 1)
            checkpoints.extend(found)
            timeline.extend(HistoryEntry.of(cp) for cp in found)
        timeline.append(fan)
        start = high + 1
    found = await store.get_checkpoints(run.id, start)
    checkpoints.extend(found)
    timeline.extend(HistoryEntry.of(cp) for cp in found)
    records = await store.get_records(run.id)
    children, handlers = _links(checkpoints, records)
    return RunDetail(
        run=run,
        timeline=tuple(timeline),
        fans=tuple(fans),
        children=children,
        handlers=handlers,
        parent_id=run.parent_id,
        forked_from=fork_origin(records),
        retried=await retried_histories(store, run.id),
        waiting=decision_waits(records),
    )


def decision_waits(records: Iterable[RunRecord]) -> str | None:
    """What a remote workflow's run waits for before its next decision
    task is sent (blocked for a live worker of its build, the broker
    after a refused send), from its decision record; None if the task is
    out, or none waits."""
    marker = decision_of({record.kind: record for record in records})
    if marker is None or marker.status != "pending" or marker.started_at is not None:
        return None
    return None if marker.mark is None else marker.mark.message


async def fan_page(
    store: Store,
    run_id: str,
    fan: int,
    *,
    offset: int = 0,
    limit: int = 100,
    failed: bool = False,
    namespace: str | None = None,
) -> FanPage:
    """A page of the members of the run's fan whose first seq is ``fan``
    (see `Engine.fan_page`).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      UsageError: The run has no fan at ``fan``, or ``offset`` or
        ``limit`` is out of range.
    """
    check_integer("offset", offset, 0)
    limit = _limit(limit)
    check_integer("fan", fan, -MAX_INTEGER)
    run = await find_run(store, run_id, namespace)
    head = await store.get_checkpoints(run.id, fan, fan)
    if not head or head[0].parallel_group != fan:
        raise UsageError(f"run {run.id!r} has no fan starting at seq {fan}")
    last = fan + max((head[0].parallel_size or 1) - 1, 0)
    statuses = _FAILED if failed else _CHECKPOINT_STATUSES
    total = await store.count_checkpoints(run.id, fan, last, statuses)
    if failed:
        members = await store.find_checkpoints(
            run.id, fan, last, statuses=statuses, offset=offset, limit=limit
        )
    else:
        # Member i sits at seq fan + i: the page is a seq range, read from
        # its start, however deep.
        members = await store.find_checkpoints(run.id, fan + offset, last, limit=limit)
    return FanPage(
        run_id=run.id,
        fan=fan,
        offset=offset,
        limit=limit,
        total=total,
        members=tuple(HistoryEntry.of(cp) for cp in members),
    )
