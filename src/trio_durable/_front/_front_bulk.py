"""Bulk actions: cancel, retry or terminate every run a selection matches
(`BulkActions`, a method family `Engine` and `Client` share), and what
the bulk prune of `_front_prune` shares with them: the selection, its
checks, the report and the progress.

An action acts on the runs that matched when it began, in batches, each in
one store write that also marks every run it acted on with the
operation's id (a run record of kind `BULK`). An operation is named by its
action and selection (or by the name its caller gives) and by a
generation, kept as a keyed value: it is ``running`` until it went through
every run, then ``finished``. Called again while ``running`` (it was
interrupted), it resumes under the same id and skips the runs marked with
it, so no run is acted on twice, even one that a retry made ``pending``
and that failed again since; called once ``finished``, it starts the next
generation, a new operation.

Retention prunes the keyed value with the event records, by the age of
`Retention.events` since it was last written. A generation counts only
the marks written since it began, so an operation started again after
its value went (its generation counted from 1 again) does not take an
older operation's marks for its own.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final, Literal, final, get_args

import attrs

from .._base._exceptions import InvalidRunStateError, RunNotFoundError, UsageError
from .._base._records import ACTIVE_STATUSES, TERMINAL_STATUSES, Run, RunStatus
from .._base._run_records import value_record
from .._kernel._cancellation import TERMINATE
from .._stores._base import Store, WriteConflict
from .._stores._ops import Op, PutValue
from .._stores._record_ops import PutRecord
from . import _queries
from ._control import RETRYABLE, cancel_ops, retry_ops, terminate_ops
from ._front_core import FrontPart

BulkAction = Literal["cancel", "retry", "terminate", "prune"]

BULK: Final = "bulk"
"""The kind of a run's record of the last bulk operation that acted on it
(its output: ``{"operation": id, "action": action}``), and the scope of
the keyed values that keep each operation's generation and state."""

FIRST_IDS: Final = 10
"""How many run ids a `BulkReport` lists."""

_PAGE: Final = 500
_RUN_STATUSES: Final[frozenset[str]] = frozenset(get_args(RunStatus))
_ACTS_ON: Final[dict[BulkAction, frozenset[RunStatus]]] = {
    "cancel": frozenset({"pending", "running", "suspended"}),
    "retry": RETRYABLE,
    "terminate": ACTIVE_STATUSES,
    "prune": TERMINAL_STATUSES,
}


def _statuses(value: RunStatus | Collection[RunStatus] | None) -> frozenset[RunStatus] | None:
    if value is None:
        return None
    statuses = frozenset({value} if isinstance(value, str) else value)
    unknown = sorted(str(status) for status in statuses - _RUN_STATUSES)
    if unknown:
        raise UsageError(
            f"unknown run status {', '.join(map(repr, unknown))}:"
            f" one of {', '.join(get_args(RunStatus))}"
        )
    return statuses


def _tags(value: Collection[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise UsageError("tags is a collection of tags, not one string")
    return tuple(value)


@final
@attrs.define(frozen=True, kw_only=True)
class RunSelection:
    """Which runs a bulk action (`Engine.cancel_many`, `retry_many`,
    `terminate_many`, `prune_many`) acts on: those matching every filter
    given, as `Engine.list_runs` filters them, among those the action
    applies to (cancel: pending, running or suspended runs; retry: failed
    or dead ones; terminate: any that has not ended; prune: any that has
    ended, whose parent has ended too or is gone).

    Attributes:
      status: A run status, or a collection of them.
      workflow: The workflow's name.
      namespace: The runs' namespace.
      tags: Runs having all of these tags.
      created_after: Runs created at or after this (durable seconds since
        the epoch, or an aware datetime).
      created_before: Runs created before this.
      search_attributes: Runs whose search attributes match, as
        `Engine.list_runs` takes them.
      code: Runs whose error has this code (a failed run's `FatalError`
        code, ``dead``, ...).
      top_level: Only runs without a parent: no child run, fan member or
        on-error handler's run.
      id_prefix: Runs whose id starts with this.
      parent_id: Only the runs this run started (its children and
        on-error handlers); excludes ``top_level``.
    """

    status: frozenset[RunStatus] | None = attrs.field(default=None, converter=_statuses)
    workflow: str | None = None
    namespace: str | None = None
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tags)
    created_after: float | datetime.datetime | None = None
    created_before: float | datetime.datetime | None = None
    search_attributes: Mapping[str, Any] | None = None
    code: str | None = None
    top_level: bool = False
    id_prefix: str | None = None
    parent_id: str | None = None

    def key(self, action: BulkAction) -> str:
        """The name of the operation of ``action`` on this selection, when
        its caller gives none: the same for the same action and filters."""
        described = json.dumps(
            {"action": action, **attrs.asdict(self)}, sort_keys=True, default=_plain
        )
        return f"{action}-{hashlib.sha256(described.encode()).hexdigest()[:16]}"


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return repr(value)


@final
@attrs.define(frozen=True, kw_only=True)
class BulkProgress:
    """How far a bulk action went, as its ``on_progress`` is told after
    each batch.

    Attributes:
      operation: The operation's id.
      done: Runs dealt with so far (acted on, or refused as changed).
      total: Runs it acts on in all.
    """

    operation: str
    done: int
    total: int


@final
@attrs.define(frozen=True, kw_only=True)
class BulkReport:
    """What a bulk action did (or, on a dry run, would do).

    Attributes:
      action: ``cancel``, ``retry``, ``terminate`` or ``prune``.
      operation: The operation's id (its name and generation); rerun
        with the same name while it has not finished, it resumes. A
        prune's is its name alone: it keeps no state, since a run it
        deleted is gone and cannot be deleted twice.
      dry_run: Whether nothing was written.
      matched: Runs it acts on (or would): those matching the selection
        that it had not acted on before.
      acted: Runs it acted on in this call (0 on a dry run).
      skipped: Runs matching the selection that this operation acted on
        in an earlier call (it was interrupted), that a terminate was
        already asked for, or (a prune) whose parent has not ended: left
        alone.
      refused: Runs that changed between the selection and the action
        (they ended, were retried or were deleted, say): left alone.
      first_ids: The first run ids it acts on (or would), at most 10.
      finished: Whether the operation went through every run (False on a
        dry run).
    """

    action: BulkAction
    operation: str
    dry_run: bool
    matched: int
    acted: int
    skipped: int
    refused: int
    first_ids: tuple[str, ...]
    finished: bool


Progress = Callable[[BulkProgress], None]


class BulkActions(FrontPart):
    """Cancelling, retrying and terminating the runs a `RunSelection`
    matches, resumably (see `_front_bulk`)."""

    async def cancel_many(
        self,
        selection: RunSelection,
        *,
        compensate: bool = False,
        dry_run: bool = False,
        operation: str | None = None,
        batch_size: int = 100,
        on_progress: Progress | None = None,
    ) -> BulkReport:
        """Cancel every run ``selection`` matches that is pending, running
        or suspended, as `cancel` cancels one.

        A call that was interrupted, made again with the same selection
        (or ``operation``), resumes: a run is never acted on twice.

        Args:
          selection: Which runs.
          compensate: Run the undos of each run's completed steps first.
          dry_run: Write nothing: count the runs and list the first ids.
          operation: The operation's name (default: one made of the action
            and the selection, so the same call resumes it).
          batch_size: Runs acted on per store write, 1 to 1000.
          on_progress: Called after each batch.

        Raises:
          UsageError: A filter, ``batch_size`` or ``operation`` is
            malformed; nothing changed.
          SearchAttributeError: A search attribute filter is refused.
        """
        return await self._bulk(
            "cancel", selection, dry_run, operation, batch_size, on_progress, compensate=compensate
        )

    async def retry_many(
        self,
        selection: RunSelection,
        *,
        dry_run: bool = False,
        operation: str | None = None,
        batch_size: int = 100,
        on_progress: Progress | None = None,
    ) -> BulkReport:
        """Retry every run ``selection`` matches that failed or is dead, as
        `retry` retries one (what each retry replaces stays in its history).

        A call that was interrupted, made again with the same selection
        (or ``operation``), resumes: a run is never retried twice by one
        operation, even one that failed again since.

        Args:
          selection: Which runs (``code=`` picks the failures of one code).
          dry_run: Write nothing: count the runs and list the first ids.
          operation: The operation's name (default: one made of the action
            and the selection, so the same call resumes it).
          batch_size: Runs acted on per store write, 1 to 1000.
          on_progress: Called after each batch.

        Raises:
          UsageError: A filter, ``batch_size`` or ``operation`` is
            malformed; nothing changed.
          SearchAttributeError: A search attribute filter is refused.
        """
        return await self._bulk("retry", selection, dry_run, operation, batch_size, on_progress)

    async def terminate_many(
        self,
        selection: RunSelection,
        *,
        reason: str | None = None,
        dry_run: bool = False,
        operation: str | None = None,
        batch_size: int = 100,
        on_progress: Progress | None = None,
    ) -> BulkReport:
        """Terminate every run ``selection`` matches that has not ended, as
        `terminate` terminates one.

        A call that was interrupted, made again with the same selection
        (or ``operation``), resumes: a run is never acted on twice.

        Args:
          selection: Which runs.
          reason: Why, for people (each run's error message).
          dry_run: Write nothing: count the runs and list the first ids.
          operation: The operation's name (default: one made of the action
            and the selection, so the same call resumes it).
          batch_size: Runs acted on per store write, 1 to 1000.
          on_progress: Called after each batch.

        Raises:
          UsageError: A filter, ``batch_size``, ``operation`` or
            ``reason`` is malformed; nothing changed.
          SearchAttributeError: A search attribute filter is refused.
        """
        if reason is not None and not isinstance(reason, str):
            raise UsageError(f"a terminate's reason is a string, not {type(reason).__name__}")
        return await self._bulk(
            "terminate", selection, dry_run, operation, batch_size, on_progress, reason=reason
        )

    async def _bulk(
        self,
        action: BulkAction,
        selection: RunSelection,
        dry_run: bool,
        operation: str | None,
        batch_size: int,
        on_progress: Progress | None,
        **options: Any,
    ) -> BulkReport:
        core = self._core
        core.check_open()
        key = operation_name(action, selection, operation, batch_size)
        store = core.store
        stored = await store.get_value(BULK, key)
        state = {} if stored is None else json.loads(stored.value)
        generation = int(state.get("generation", 0))
        # Durable time the generation began; None for a value written
        # before it was kept.
        started: float | None = state.get("started")
        if state.get("state") != "running":
            generation += 1
            started = core.clock.now()
        op_id = f"{key}.{generation}"

        async def acted_on(run: Run) -> bool:
            return await _acted_on(store, run, action, op_id, started)

        ids, skipped = await select_runs(store, action, selection, acted_on)
        if dry_run:
            return BulkReport(
                action=action,
                operation=op_id,
                dry_run=True,
                matched=len(ids),
                acted=0,
                skipped=skipped,
                refused=0,
                first_ids=tuple(ids[:FIRST_IDS]),
                finished=False,
            )
        version = 0 if stored is None else stored.version
        version = await self._state(key, generation, "running", started, version)
        acted = refused = 0
        for start in range(0, len(ids), batch_size):
            done, changed = await self._act(action, ids[start : start + batch_size], op_id, options)
            acted += done
            refused += changed
            if on_progress is not None:
                on_progress(BulkProgress(operation=op_id, done=acted + refused, total=len(ids)))
        await self._state(key, generation, "finished", started, version)
        return BulkReport(
            action=action,
            operation=op_id,
            dry_run=False,
            matched=len(ids),
            acted=acted,
            skipped=skipped,
            refused=refused,
            first_ids=tuple(ids[:FIRST_IDS]),
            finished=True,
        )

    async def _state(
        self, key: str, generation: int, state: str, started: float | None, version: int
    ) -> int:
        """Write the operation's state; returns the version written.

        Raises:
          UsageError: Another call of the same operation wrote it meanwhile.
        """
        core = self._core
        value = json.dumps({"generation": generation, "state": state, "started": started})
        try:
            [written] = await core.store.apply(
                [PutValue(BULK, key, value, core.clock.now(), expect_version=version)]
            )
        except WriteConflict as exc:
            raise UsageError(
                f"the bulk operation {key!r} is being run by another call at the same time"
            ) from exc
        return int(written)

    async def _act(
        self, action: BulkAction, ids: list[str], op_id: str, options: dict[str, Any]
    ) -> tuple[int, int]:
        """Act on ``ids`` in one write (run by run if one of them changed
        meanwhile); returns how many were acted on and how many refused."""
        core = self._core
        now = core.clock.now()
        mark = json.dumps({"operation": op_id, "action": action})
        planned: list[tuple[list[Op], list[Run]]] = []
        refused = 0
        for run_id in ids:
            try:
                ops, runs = await self._plan(action, run_id, now, options)
            except (InvalidRunStateError, RunNotFoundError):
                # It changed since it was selected: it ended, or was deleted.
                refused += 1
                continue
            ops.append(PutRecord(value_record(runs[-1].id, BULK, mark, now)))
            planned.append((ops, runs))
        wake = core.waker.cancel_ops if action != "retry" else core.waker.wake_ops
        batch = [op for ops, _ in planned for op in ops]
        woken = [run for _, runs in planned for run in runs]
        try:
            await core.store.apply([*batch, *wake(woken)])
        except WriteConflict:
            # One of them changed since it was read: each on its own, so
            # that one refuses only itself.
            applied: list[tuple[list[Op], list[Run]]] = []
            for ops, runs in planned:
                try:
                    await core.store.apply([*ops, *wake(runs)])
                except WriteConflict:
                    refused += 1
                else:
                    applied.append((ops, runs))
            planned = applied
        for _, runs in planned:
            for run in runs:
                if action == "retry":
                    core.waker.woke(run)
                else:
                    core.waker.cancelled(run)
        return len(planned), refused

    async def _plan(
        self, action: BulkAction, run_id: str, now: float, options: dict[str, Any]
    ) -> tuple[list[Op], list[Run]]:
        store = self._core.store
        if action == "cancel":
            run, ops = await cancel_ops(store, now, run_id, options["compensate"], None)
            return ops, [run]
        if action == "terminate":
            run, ops = await terminate_ops(store, now, run_id, options["reason"], None)
            return ops, [run]
        run = await self.get(run_id)
        return await retry_ops(store, self._core.types, now, run)


def operation_name(
    action: BulkAction, selection: RunSelection, operation: str | None, batch_size: int
) -> str:
    """The name of a bulk action's operation, its arguments checked.

    Raises:
      UsageError: ``selection``, ``operation`` or ``batch_size`` is malformed.
    """
    if not isinstance(selection, RunSelection):
        raise UsageError("a bulk action takes a RunSelection")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise UsageError("batch_size is a whole number from 1 to 1000")
    if not 1 <= batch_size <= 1000:
        raise UsageError("batch_size is a whole number from 1 to 1000")
    key = selection.key(action) if operation is None else operation
    if not isinstance(key, str) or not key or len(key) > 200:
        raise UsageError("an operation's name is a string of 1 to 200 characters")
    return key


async def select_runs(
    store: Store,
    action: BulkAction,
    selection: RunSelection,
    left_alone: Callable[[Run], Awaitable[bool]],
) -> tuple[list[str], int]:
    """The ids of the runs ``action`` acts on, newest first, and how many
    that match were ``left_alone`` (acted on already, say)."""
    acts_on = _ACTS_ON[action]
    wanted = acts_on if selection.status is None else acts_on & selection.status
    ids: list[str] = []
    skipped = 0
    if not wanted:
        return ids, skipped
    cursor: str | None = None
    while True:
        page = await _queries.list_runs(
            store,
            status=wanted,
            workflow=selection.workflow,
            namespace=selection.namespace,
            tags=selection.tags,
            created_after=selection.created_after,
            created_before=selection.created_before,
            search_attributes=selection.search_attributes,
            top_level=selection.top_level,
            id_prefix=selection.id_prefix,
            parent_id=selection.parent_id,
            limit=_PAGE,
            cursor=cursor,
        )
        for run in page.runs:
            if selection.code is not None and (
                run.error is None or run.error.code != selection.code
            ):
                continue
            if await left_alone(run):
                skipped += 1
            else:
                ids.append(run.id)
        cursor = page.next_cursor
        if cursor is None:
            return ids, skipped


async def _acted_on(
    store: Any, run: Run, action: BulkAction, op_id: str, started: float | None
) -> bool:
    """Whether ``run`` is to be left alone: this operation (the one of
    ``op_id`` that began at ``started``) acted on it, or (for a terminate)
    a terminate of it was asked for already."""
    for record in await store.get_records(run.id):
        if record.kind == TERMINATE and action == "terminate":
            return True
        if (
            record.kind == BULK
            and record.output is not None
            and json.loads(record.output).get("operation") == op_id
            and (started is None or (record.finished_at or 0.0) >= started)
        ):
            return True
    return False
