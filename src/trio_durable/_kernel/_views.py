"""What queries return: pages of runs, a run's history and detail, fan pages,
and the retention policy that prunes old runs.

These are records for people and tools reading runs from outside their
bodies (`Engine.list_runs`, `Engine.history`, `Engine.run_detail`,
`Engine.fan_page`, `Engine.prune`); `_queries` and `_retention` make them.
Times are durable times (seconds since the Unix epoch). Payloads (inputs,
outputs) stay in the store: a history says what happened, not with what.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from .._base._bounds import is_finite
from .._base._exceptions import UsageError
from .._base._records import (
    Checkpoint,
    CheckpointKind,
    CheckpointStatus,
    ErrorInfo,
    Mark,
    Run,
    RunStatus,
)
from .._payloads._stored_payloads import sealed_for_people, shown_error

FOLD_WIDTH: Final = 20
"""A fan with more members than this is folded into its `FanStats` in a
`RunDetail`'s timeline."""

MAX_PAGE: Final = 500
"""The largest ``limit`` of a `FanPage` or a `RunPage`."""

FIRST_FAILURES: Final = 5
"""How many failed members a `FanStats` lists."""


@final
@attrs.define(frozen=True, kw_only=True)
class RunPage:
    """One page of `Engine.list_runs`.

    Attributes:
      runs: The runs, newest first (by ``created_at``, then id, descending).
      next_cursor: Pass it as ``cursor=`` for the next page; None on the
        last page.
      facets: With ``facets=True``, how many runs match every filter but
        ``status``, per status (statuses with none are left out); else None.
    """

    runs: tuple[Run, ...]
    next_cursor: str | None
    facets: Mapping[RunStatus, int] | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class AttemptEntry:
    """One attempt of a step, as its run's history shows it
    (`HistoryEntry.attempt_log`).

    Attributes:
      number: The attempt's number, from 1.
      status: ``failed``, ``completed``, or ``pending`` while it is out.
      started_at: When it started (durable time): for a remote step, when
        the worker started it (by the worker's clock), or, for the last
        attempt and one no worker answered, when it was sent. None where
        unknown: in a step recorded before attempts had times.
      finished_at: When it ended, or None (unknown, or still out).
      error: Its error, if it failed, else None.
    """

    number: int
    status: CheckpointStatus
    started_at: float | None = None
    finished_at: float | None = None
    error: ErrorInfo | None = None

    @property
    def duration(self) -> float | None:
        """How long it took, if both of its times are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


def attempt_log(cp: Checkpoint, errors: tuple[ErrorInfo, ...]) -> tuple[AttemptEntry, ...]:
    """The attempts of a local or remote step (none for another kind of
    operation): one per error in ``errors`` (the step's, its final one
    included), then the attempt that succeeded or is out, whose times are
    the checkpoint's own (its ``started_at`` is its last attempt's)."""
    if cp.kind not in ("local", "remote"):
        return ()
    log = [
        AttemptEntry(
            number=index,
            status="failed",
            started_at=error.started_at,
            finished_at=error.finished_at,
            error=error,
        )
        for index, error in enumerate(errors, start=1)
    ]
    if cp.status == "completed" or (cp.status != "failed" and cp.started_at is not None):
        started_at = cp.started_at
        if cp.kind == "local" and errors and errors[-1].started_at is None:
            # Recorded before attempts had times: a local step's start was
            # then its first attempt's, not its last one's.
            started_at = None
        log.append(
            AttemptEntry(
                number=len(log) + 1,
                status="completed" if cp.status == "completed" else "pending",
                started_at=started_at,
                finished_at=cp.finished_at if cp.status == "completed" else None,
            )
        )
    return tuple(log)


@final
@attrs.define(frozen=True, kw_only=True)
class HistoryEntry:
    """One durable operation of a run, as its history shows it.

    Attributes:
      seq: Its seq (compensations are negative, on-error handoffs at
        1,000,000,000 and above).
      kind: ``local``, ``remote``, ``timer``, ``signal`` or ``child``.
      name: The step, workflow or signal name, or ``"sleep"``.
      status: ``pending``, ``running``, ``completed`` or ``failed``.
      attempts: How many attempts ran.
      errors: Each failed attempt's error, in order, the final one included.
      error: The final error if the operation failed, else None.
      child_id: The child run (or on-error handler) of a ``child`` operation.
      group: The worker group of a remote step.
      parallel_group: The first seq of the fan it belongs to, if any.
      parallel_size: That fan's size.
      enqueued_at: When it was recorded.
      started_at: When its last attempt started (for a step that is not
        out, but waits to be sent again: None). Rows written before steps
        recorded attempt times hold a local step's first attempt's start.
      finished_at: When it settled.
      wake_at: When a timer, a signal's timeout or a retry is due.
      paused: Whether the run is paused at a breakpoint before this step
        (it is pending until continued or skipped).
      out_on: For a pending remote step (or decision task) whose attempt
        is out: the broker it went out on, its URL without a password
        (None if the engine that sent it did not say). It has been out
        since ``started_at``.
      waiting: For a pending operation not yet sent: what it waits for, in
        words (a slot of a flow-control queue, a live worker that can take
        it, the broker after a refused send, its place in a fan's
        window...), else None.
      attempt_log: A step's attempts, each with its times and error (see
        `AttemptEntry`); empty for other operations.
      queue: For a pending step that waits in the line of a flow-control
        queue: the queue's name (`Engine.queue_position` tells its place),
        else None.
    """

    seq: int
    kind: CheckpointKind
    name: str
    status: CheckpointStatus
    attempts: int = 0
    errors: tuple[ErrorInfo, ...] = ()
    error: ErrorInfo | None = None
    child_id: str | None = None
    group: str | None = None
    parallel_group: int | None = None
    parallel_size: int | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    wake_at: float | None = None
    paused: bool = False
    out_on: str | None = None
    waiting: str | None = None
    attempt_log: tuple[AttemptEntry, ...] = ()
    queue: str | None = None

    @classmethod
    def of(cls, cp: Checkpoint) -> HistoryEntry:
        """The entry of a stored checkpoint (its payloads left out)."""
        failed = cp.status == "failed" and cp.error is not None
        errors = cp.errors
        # A local step records its final error among its attempts' errors;
        # a remote step or a child only as the error.
        if failed and cp.error is not None and (not errors or len(errors) < cp.attempts):
            errors = (*errors, cp.error)
        mark = cp.mark if cp.status == "pending" else None
        # The marks `_carrier.OUT` and `_breakpoints.PAUSED` (this module
        # imports no engine part).
        out = mark is not None and mark.code == "out" and cp.started_at is not None
        details = mark.details if out and mark is not None else None
        broker = details.get("broker") if isinstance(details, dict) else None
        return cls(
            seq=cp.seq,
            kind=cp.kind,
            name=cp.name,
            status=cp.status,
            attempts=cp.attempts,
            errors=errors,
            error=cp.error if failed else None,
            child_id=cp.child_id,
            group=cp.group,
            parallel_group=cp.parallel_group,
            parallel_size=cp.parallel_size,
            enqueued_at=cp.enqueued_at,
            started_at=cp.started_at,
            finished_at=cp.finished_at,
            wake_at=cp.wake_at,
            # The mark `_breakpoints.PAUSED` (this module imports no engine part).
            paused=mark is not None and mark.code == "paused",
            out_on=broker if isinstance(broker, str) else None,
            waiting=(
                mark.message
                if mark is not None and not out and mark.code not in ("out", "paused")
                else None
            ),
            attempt_log=attempt_log(cp, errors),
            queue=_queue_of(mark),
        )


_QUEUE_NAMED: Final = re.compile(r"^waiting for a slot of queue '([^']*)'$")
"""How a ``queued`` mark's message names its queue: the only place marks
written before they carried the queue in their details name it."""


def _queue_of(mark: Mark | None) -> str | None:
    """The flow-control queue in whose line a pending step waits, from its
    mark (`_ops.QUEUED`; this module imports no store part)."""
    if mark is None or mark.code != "queued":
        return None
    if isinstance(mark.details, dict) and isinstance(mark.details.get("queue"), str):
        return str(mark.details["queue"])
    named = _QUEUE_NAMED.match(mark.message)
    return None if named is None else named.group(1)


@final
@attrs.define(frozen=True, kw_only=True)
class RetriedHistory:
    """What one retry of a run replaced (`Engine.retry`): the run as it
    ended before it, and the operations the retry deleted or reset to run
    them again, as they were, with every attempt's error and traceback.

    A retry keeps them in the same write that retries the run, and they go
    only when the run is pruned. Read without the codec that encrypted them
    (``open_client(codec=...)``), only ``retry``, ``retried_at`` and
    ``sealed`` are known.

    Attributes:
      retry: Which retry of the run replaced them: 1 for its first.
      retried_at: When that retry was made.
      from_seq: The seq the retry ran the body again from (``retry`` with
        ``from_seq``), or None for a retry of a failed or dead run from its
        failures.
      status: The run's status when it was retried (None if sealed).
      error: The run's error then, with its traceback, if it had one.
      ended_at: When the run had ended (its ``updated_at`` then).
      entries: The operations the retry deleted (failed ones, those an undo
        had undone, their undos, those at or after ``from_seq``) or reset
        (failed children retried with the run), as they were, by seq.
      sealed: What the codec made of them, if they were read without it:
        ``encrypted_with`` names its key.
    """

    retry: int
    retried_at: float
    from_seq: int | None = None
    status: RunStatus | None = None
    error: ErrorInfo | None = None
    ended_at: float | None = None
    entries: tuple[HistoryEntry, ...] = ()
    sealed: str | None = None

    @property
    def encrypted_with(self) -> str | None:
        """The id of the key that encrypted what a sealed one holds (None if
        it is not sealed, or its codec names no key)."""
        if self.sealed is None:
            return None
        key_id = sealed_for_people(self.sealed).get("encrypted_with")
        return None if key_id is None else str(key_id)


@final
@attrs.define(frozen=True, kw_only=True)
class RunHistory:
    """A run's timeline: `Engine.history`.

    Attributes:
      run: The run as stored.
      entries: Every checkpoint, by seq.
      children: The ids of its child runs, by seq.
      handlers: The ids of the on-error handlers it was handed to, by attempt.
      retried: What each retry of the run replaced, oldest first: the
        failures that made someone retry it (see `RetriedHistory`).
      waiting: What its next decision task waits for, if it is a remote
        workflow's run whose task is not sent (see `RunDetail.waiting`).
    """

    run: Run
    entries: tuple[HistoryEntry, ...]
    children: tuple[str, ...]
    handlers: tuple[str, ...]
    retried: tuple[RetriedHistory, ...] = ()
    waiting: str | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class FanStats:
    """A fan of a run summed up, read by aggregate queries (one row per
    status), never member by member.

    Attributes:
      first_seq: The seq of its first member (the fan's id in `Engine.fan_page`).
      last_seq: The seq of its last member recorded.
      size: How many members it has.
      kind: Its members' kind.
      name: Its members' step or workflow name.
      counts: How many members are in each checkpoint status.
      attempts: The attempts of all its members, summed.
      first_enqueued_at: When its first member was recorded.
      last_finished_at: When its last member settled so far.
      first_failures: Its first failed members (at most 5), by seq.
    """

    first_seq: int
    last_seq: int
    size: int
    kind: CheckpointKind
    name: str
    counts: Mapping[str, int]
    attempts: int
    first_enqueued_at: float | None
    last_finished_at: float | None
    first_failures: tuple[HistoryEntry, ...] = ()


@final
@attrs.define(frozen=True, kw_only=True)
class RunDetail:
    """A run for people to read: `Engine.run_detail`.

    It reads O(1) rows per operation outside wide fans, per fan and per
    retry of the run, however wide the fans are: a fan of more than 20
    members stands in the timeline as its `FanStats`, and its members are
    read a page at a time with `Engine.fan_page`.

    Attributes:
      run: The run as stored.
      timeline: Its checkpoints by seq, each wide fan folded into its stats.
      fans: Every fan's stats, by first seq.
      children: Child runs of the timeline's own entries (the members of
        folded fans are on their fan pages).
      handlers: The on-error handlers it was handed to.
      parent_id: The run that started it, if any.
      forked_from: The run it was forked from and the seq it was forked
        at (see `Engine.fork`), if it is a fork.
      retried: What each retry of the run replaced, oldest first (see
        `RetriedHistory`): one row per retry.
      waiting: For a remote workflow's run whose next decision task is not
        sent: what it waits for, in words (``blocked: no live worker of
        build 'A' serves group 'g'``, the broker after a refused send),
        else None.
    """

    run: Run
    timeline: tuple[HistoryEntry | FanStats, ...]
    fans: tuple[FanStats, ...]
    children: tuple[str, ...]
    handlers: tuple[str, ...]
    parent_id: str | None
    forked_from: tuple[str, int] | None = None
    retried: tuple[RetriedHistory, ...] = ()
    waiting: str | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class FanPage:
    """A page of a fan's members: `Engine.fan_page`.

    Attributes:
      run_id: The run.
      fan: The fan's first seq.
      offset: How many matching members come before this page.
      limit: The most members a page holds.
      total: How many members match (all, or the failed ones).
      members: This page's members, by seq.
    """

    run_id: str
    fan: int
    offset: int
    limit: int
    total: int
    members: tuple[HistoryEntry, ...]


EVENTS_KEPT: Final = 7 * 24 * 3600.0
"""Seconds `Retention` keeps event records unless told otherwise."""


def _age(value: float | datetime.timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise UsageError(f"a retention age is seconds or a timedelta, not {value!r}")
    if not is_finite(seconds) or seconds < 0:
        raise UsageError(f"a retention age must be finite and >= 0, not {value!r}")
    return float(seconds)


def _positive_int(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"Retention.{attribute.name} must be an integer >= 1, not {value!r}")


def _interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"Retention.interval must be a number of seconds, not {value!r}")
    if not is_finite(value) or value <= 0:
        raise UsageError(f"Retention.interval must be positive and finite, not {value!r}")
    return float(value)


@final
@attrs.define(frozen=True, kw_only=True)
class Retention:
    """How long ended runs, and the records that outlive them, are kept:
    `open_engine(retention=...)` and `Engine.prune`.

    A run in a terminal status is pruned once its ``updated_at`` (when it
    ended) is older than the age for its status; None keeps runs of that
    status forever. Pruning deletes the run with its input, checkpoints,
    signal waiters, buffered signals, flow-control queue entries, webhooks,
    pauses, and the keyed values that go with it (published values, stream
    values, what its retries replaced, updates, fan windows, the signal
    keys it sent, the dedup and singleton claims and debounce windows it
    holds); its blobs go once no run refers to them. It never touches a run that has not ended, nor a
    run whose parent has not ended (the parent may still read or retry it).

    Event records (`Engine.send_event`) belong to no run: they are pruned
    once older than ``events``, as are the states of bulk operations
    (`Engine.retry_many`, ...) not written for that long (docs/operations.md
    has the table of every kind of record, what removes it and when).

    Attributes:
      completed: The age of ``completed`` runs to prune (seconds or a
        `datetime.timedelta`), or None.
      failed: The same for ``failed`` runs.
      cancelled: The same for ``cancelled`` runs.
      terminated: The same for ``terminated`` runs.
      dead: The same for ``dead`` runs.
      events: The age of event records to prune (from when the event was
        sent), or None to keep them; 7 days by default. Within it, sending
        an event id again is a no-op.
      batch: How many runs (or event records) one store write deletes at
        most.
      interval: Seconds between the engine's pruning passes.

    Raises:
      UsageError: An age is negative or not a number of seconds, ``batch``
        is not an integer >= 1, or ``interval`` is not positive.
    """

    completed: float | None = attrs.field(default=None, converter=_age)
    failed: float | None = attrs.field(default=None, converter=_age)
    cancelled: float | None = attrs.field(default=None, converter=_age)
    terminated: float | None = attrs.field(default=None, converter=_age)
    dead: float | None = attrs.field(default=None, converter=_age)
    events: float | None = attrs.field(default=EVENTS_KEPT, converter=_age)
    batch: int = attrs.field(default=500, validator=_positive_int)
    interval: float = attrs.field(default=60.0, converter=_interval)

    def cutoffs(self, now: float) -> dict[RunStatus, float]:
        """Per status kept for a limited time, the ``updated_at`` before
        which a run of that status is pruned at durable time ``now``."""
        ages: dict[RunStatus, float | None] = {
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "terminated": self.terminated,
            "dead": self.dead,
        }
        return {status: now - age for status, age in ages.items() if age is not None}


def plain(value: Any, *, compact_errors: bool = False) -> Any:
    """``value`` as plain JSON values: attrs records as dicts, tuples as
    lists. With ``compact_errors``, an `ErrorInfo` is its ``to_json()`` (the
    fields that are None left out; a sealed one as `shown_error` shows it),
    as the console's API answers them."""
    if compact_errors and isinstance(value, ErrorInfo):
        return shown_error(value)
    if attrs.has(type(value)):
        value = attrs.asdict(value, recurse=False)
    if isinstance(value, Mapping):
        return {key: plain(item, compact_errors=compact_errors) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item, compact_errors=compact_errors) for item in value]
    if isinstance(value, datetime.datetime):
        # A search attribute's value.
        return value.isoformat()
    return value


def span(seconds: float) -> str:
    """A duration as people read it: ``0.25s``, ``12.3s``, ``4m05s``,
    ``3h12m``, ``2d03h``."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
