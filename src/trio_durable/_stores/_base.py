"""The store protocol: what the engine needs from a database.

A store keeps runs, checkpoints, signal waiters and buffered signals. The
engine writes through `Store.apply`, which applies a list of operations
atomically (all or none) and returns one result per operation; the named
methods (`Store.save_checkpoint_if_pending`, `Store.try_lock_run`, ...) are
single-operation forms of it. Every implementation passes the conformance suite,
`trio_durable.testing.conformance.check_store`.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final, Protocol, cast, final, runtime_checkable

import attrs
import trio

from .._base._exceptions import StoreError, UsageError
from .._base._records import (
    Breakpoint,
    Checkpoint,
    CheckpointStatus,
    FanCounts,
    PausedStep,
    QueueDepth,
    Run,
    RunFilter,
    RunStamp,
    RunStatus,
    StoredValue,
    Webhook,
)
from .._base._run_records import RunRecord
from ._ops import Announce, Op


@final
class WriteConflict(StoreError):
    """An `UpdateRun` with ``expect_status`` found the run in another status
    (or missing). The whole batch it belonged to was rolled back."""


@final
@attrs.define(frozen=True, kw_only=True)
class TurnState:
    """What `Store.begin_turn` returns: the leased run, its checkpoints and
    its own records (see `RunRecord`)."""

    run: Run
    checkpoints: tuple[Checkpoint, ...]
    records: tuple[RunRecord, ...] = ()


@final
@attrs.define(kw_only=True)
class StoreStatistics:
    """Counters a store keeps, for benchmarks and tests.

    Attributes:
      checkpoint_rows_read: Checkpoint rows returned by reads.
      run_rows_read: Run rows returned by reads.
      batches: Calls of `Store.apply` (and `Store.begin_turn`).
      ops: Operations applied.
      transactions: Database transactions committed (a store that commits
        several batches together counts one).
    """

    checkpoint_rows_read: int = 0
    run_rows_read: int = 0
    batches: int = 0
    ops: int = 0
    transactions: int = 0


def run_due_at(run: Run) -> float | None:
    """When a run needs an engine's attention without being woken.

    A suspended run is due at its wake time; a run that should be executing
    is due when its lease lapses (or at once if it has none); a terminal run
    never. Stores index this value for `Store.list_due_runs`.
    """
    if run.status == "suspended":
        return run.wake_at
    if run.status in ("pending", "running", "cancelling"):
        if run.lease_owner is not None and run.lease_expiry is not None:
            return run.lease_expiry
        return run.updated_at
    return None


class Store(Protocol):
    """What the engine needs from a database.

    All methods are safe to call from several tasks at once. Times are durable
    times (seconds since the Unix epoch). Besides the members below, a store
    may have optional ones that this protocol does not require (so that a
    store written before them still type-checks as a `Store`): those of
    `ChangeFeed`, `RunWatch` and `RunDeleter`.
    """

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        """Apply ``ops`` in order, atomically, and return one result each.

        Raises:
          WriteConflict: An `UpdateRun` expectation on status failed; nothing
            was written.
          LeaseLostError: An `UpdateRun` expectation on the lease failed;
            nothing was written.
          StoreError: The database failed; nothing was written.
        """
        ...

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        """Lease a run for a turn and read it with all its checkpoints and
        its records, in one read.

        Takes the lease as `LockRun` does and, if the run is ``pending`` or
        ``suspended``, marks it ``running``. Returns None (and writes nothing)
        if the run does not exist, is terminal, or another owner holds a live
        lease.
        """
        ...

    async def get_records(self, run_id: str) -> list[RunRecord]:
        """A run's own records (see `RunRecord`), ordered by kind."""
        ...

    async def get_run(self, run_id: str) -> Run | None:
        """The run with this id, or None."""
        ...

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        """Runs matching every given filter, oldest first, at most ``limit``."""
        ...

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        """A run's checkpoints with ``from_seq <= seq <= to_seq``, by seq."""
        ...

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        """How many of a run's checkpoints with ``from_seq <= seq <= to_seq``
        have one of ``statuses``; counting stops at ``limit`` if given."""
        ...

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        """Ids of runs due at ``now`` (see `run_due_at`), earliest first."""
        ...

    async def next_due_time(self) -> float | None:
        """The earliest due time of any run, or None."""
        ...

    async def list_stalled_runs(self, limit: int) -> list[str]:
        """Ids of runs whose wake was lost, oldest first, at most ``limit``.

        A run is stalled when it is ``suspended`` with no wake time and none
        of its checkpoints is ``pending`` or ``running`` (but a ``child``
        checkpoint whose child run was detached from it, its ``parent_seq``
        no longer that checkpoint's seq: that child settles nothing, as a
        retired on-error handoff's handler): nothing it waits for is still
        to come, so only a lost wake-up (an engine that died between settling
        what the run waited for and waking it) can have left it there.
        """
        ...

    async def buffered_signals(self, token: str) -> list[str]:
        """Payloads buffered for ``token``, oldest first."""
        ...

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        """The ``(run_id, seq)`` waiting on ``token``, or None."""
        ...

    # Queries for people and tools (`Engine.list_runs`, `Engine.history`,
    # ...): each reads O(page) rows, and the SQL stores index them.

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[Run]:
        """Runs matching ``where``, newest first by ``(created_at, id)``; with
        ``before``, only those ordered strictly before it; at most ``limit``."""
        ...

    async def count_runs(self, where: RunFilter) -> dict[RunStatus, int]:
        """How many runs match ``where``, per status (none: left out)."""
        ...

    async def fan_counts(self, run_id: str) -> list[FanCounts]:
        """A run's fans summed up per fan and checkpoint status (only
        checkpoints with a ``parallel_group``), by fan then status."""
        ...

    async def queue_depths(self) -> list[QueueDepth]:
        """Every flow-control queue with a step holding a slot or waiting in
        line, by name: how many hold one, how many wait."""
        ...

    async def queue_position(self, queue: str, run_id: str, seq: int) -> int | None:
        """Where the step at ``seq`` of ``run_id`` stands in the line of the
        flow-control queue ``queue``, in the order a release lets waiters in
        (highest priority first, then first come, first served): 1 for the
        next one; None if it does not wait in that line (it holds a slot,
        was let in or never queued). A count of the waiters ahead of it
        over the line's index, not a read of the line."""
        ...

    async def run_stamp(self, run_id: str) -> RunStamp | None:
        """The run's state columns with an aggregate of its checkpoints, in
        one read that reads no payload (no input, output or error), or None
        if no run has this id. Equal stamps mean that what a run's detail
        shows is unchanged: a write to the run's row, a checkpoint recorded
        or deleted, or a change of a checkpoint's status, attempts or times
        changes the stamp."""
        ...

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
        """A run's checkpoints with ``from_seq <= seq <= to_seq`` (and one of
        ``statuses``, if given), by seq, skipping ``offset``, at most ``limit``."""
        ...

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        """Delete at most ``limit`` runs whose status is a key of
        ``older_than`` (terminal statuses only) and whose ``updated_at`` is
        before its value, unless their parent exists and has not ended; with
        each its input, checkpoints, signal waiters, buffered signals,
        flow-control queue entries, webhooks, pauses and the keyed values
        that go with it (`StoredValue.run_id`), in one transaction. Returns
        the ids deleted, sorted. (`RunDeleter.delete_runs`, an optional
        member, deletes runs given by id.)"""
        ...

    async def prune_values(self, scope: str, older_than: float, limit: int) -> int:
        """Delete at most ``limit`` keyed values of ``scope`` that go with no
        run (``run_id`` None) and were last written before ``older_than``,
        oldest first, in one transaction. Returns how many were deleted."""
        ...

    # Webhooks and breakpoints (see `._hook_ops` for their writes).

    async def get_webhook(self, token_hash: str) -> Webhook | None:
        """The webhook kept under ``token_hash``, or None."""
        ...

    async def list_breakpoints(self) -> list[Breakpoint]:
        """Every breakpoint, oldest first (by ``created_at``, then id)."""
        ...

    async def paused_steps(self, run_id: str | None = None) -> list[PausedStep]:
        """The steps runs that have not ended are paused before (of
        ``run_id`` only, if given), by run id, then seq."""
        ...

    # Keyed values (see `._ops.PutValue` for their write).

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        """The value kept at ``(scope, key)``, or None."""
        ...

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        """The values of ``scope`` whose key starts with ``prefix`` (and, with
        ``after``, is greater than it), by key (code point by code point), at
        most ``limit``."""
        ...

    def statistics(self) -> StoreStatistics:
        """The store's counters (a live object)."""
        ...

    # Single-operation forms of `apply` (`StoreHelpers` implements them).

    async def create_run(self, run: Run) -> tuple[Run, bool]: ...

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None: ...

    async def save_checkpoint_if_pending(self, checkpoint: Checkpoint) -> bool: ...

    async def save_checkpoints_if_pending(
        self, checkpoints: Sequence[Checkpoint]
    ) -> list[bool]: ...

    async def try_lock_run(self, run_id: str, owner: str, expiry: float, now: float) -> bool: ...

    async def release_run_lock(self, run_id: str, owner: str) -> None: ...

    async def add_signal_waiter(
        self, token: str, run_id: str, seq: int, at: float | None = None
    ) -> str | None: ...

    async def remove_signal_waiter(self, token: str) -> None: ...

    async def deliver_signal(
        self, token: str, payload: str, at: float | None = None
    ) -> tuple[str, int] | None: ...

    async def aclose(self) -> None:
        """Close the store. Further calls raise `trio.ClosedResourceError`."""
        ...


@runtime_checkable
class ChangeFeed(Protocol):
    """A store whose every writer lives in this process can say when things
    change, so engines wait for the change instead of polling for it."""

    def run_end_event(self, run_id: str) -> trio.Event:
        """Set when the run reaches a terminal status."""
        ...

    def due_event(self, before: float) -> trio.Event:
        """Set when some run becomes due earlier than ``before``."""
        ...

    def unwoken_runs(self) -> int:
        """How many runs are suspended with no wake time (the runs that
        `Store.list_stalled_runs` looks at)."""
        ...

    def unwoken_event(self) -> trio.Event:
        """Set when a run may have stalled: it became suspended with no wake
        time, or a checkpoint of such a run changed (what it waits for was
        settled). The reconcile pass looks ``reconcile_interval`` later."""
        ...


class DueFeed(Protocol):
    """What the due-run poller and the reconcile pass wait on instead of
    scanning the store now and then: the `ChangeFeed` members that say when
    a run may have come due sooner or stalled.

    A store offers it (see `offers`) when every write to it passes through
    this process and tells it: a `ChangeFeed` store, and a SQLite store under
    a clock other than Trio's own, whose file no other process shares then
    (see `._sqlite_feed`). Not runtime-checkable: a store may offer it or not
    by instance (its members None when not), so ask `offers`.
    """

    def due_event(self, before: float) -> trio.Event:
        """Set when some run becomes due earlier than ``before`` (at once if
        one already is)."""
        ...

    def unwoken_runs(self) -> int:
        """How many runs are suspended with no wake time."""
        ...

    def unwoken_event(self) -> trio.Event:
        """Set when a run may have stalled (see `ChangeFeed.unwoken_event`)."""
        ...


@runtime_checkable
class RunWatch(Protocol):
    """A store that tells watchers, in this process and in others, of the
    `Announce` operations other writers commit: how an engine learns at
    once of a client's signal, cancel, start or retry, and a client of a
    run's end.

    A store that is not one still works; engines then learn of writes from
    other processes only through their periodic scans.
    """

    async def watch(
        self,
        origin: str,
        deliver: Callable[[Sequence[Announce] | None], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call ``deliver`` with the announcements committed by writers
        other than ``origin``, in commit order, until cancelled.

        ``task_status.started()`` is called once watching: every
        announcement committed after it is delivered, at most once. If some
        may have been missed (the connection to the database was lost and
        made again), ``deliver(None)`` says so: the caller rescans what it
        watches. ``deliver`` is called on the Trio thread and must not block.

        Raises:
          StoreError: The store cannot be watched when it starts.
        """
        ...


@runtime_checkable
class RunDeleter(Protocol):
    """A store that deletes the ended runs it is given: the optional
    `delete_runs` member of `Store`, which `Engine.prune_many` needs (a
    store written before it still type-checks as a `Store`, and still
    prunes by age through `Store.prune_runs`; read it through
    `delete_runs`, which says when a store has none)."""

    async def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        """Delete those of ``run_ids`` that have ended (their status is
        terminal) and whose parent, if they have one, has ended too or is
        gone, with everything of theirs that `Store.prune_runs` deletes
        with a run, in one transaction. The other ids (of no run, of a run
        that has not ended, of one whose parent has not) are left alone.
        Returns the ids deleted, sorted (none given: none, and nothing is
        written)."""
        ...


async def delete_runs(store: Store, run_ids: Sequence[str]) -> list[str]:
    """``store``'s optional `RunDeleter.delete_runs`.

    Raises:
      UsageError: ``store`` has no ``delete_runs``: it cannot prune
        selected runs (pruning by age, `Store.prune_runs`, still works).
    """
    if not offers(store, RunDeleter):
        raise cannot_delete_runs(store)
    return await cast(RunDeleter, store).delete_runs(run_ids)


def cannot_delete_runs(store: object) -> UsageError:
    """The error of `delete_runs` on a store that is no `RunDeleter`."""
    return UsageError(
        f"the store {store!r} cannot prune selected runs: it has no delete_runs"
        " (trio_durable.stores.RunDeleter); prune its runs by age instead"
    )


@functools.cache
def _members(protocol: type) -> tuple[str, ...]:
    return tuple(sorted(name for name in vars(protocol) if not name.startswith("_")))


_offered: Final[weakref.WeakKeyDictionary[Any, dict[type, bool]]] = weakref.WeakKeyDictionary()
"""What each store offers, as `offers` found it (a store's methods do not
come and go)."""


def offers(store: object, protocol: type) -> bool:
    """``isinstance(store, protocol)`` for the optional store protocols
    (`ChangeFeed`, `RunWatch`, `RunDeleter`), whose members are all methods: whether
    ``store`` has each of them, not None. The same answer, without the cost
    of a runtime-checkable protocol's check, which the engine's hot path
    would pay several times per run; found once per store and protocol."""
    try:
        known = _offered.get(store)
    except TypeError:  # a store that takes no weak reference, or no hash
        known = None
    if known is not None and protocol in known:
        return known[protocol]
    found = all(getattr(store, name, None) is not None for name in _members(protocol))
    with contextlib.suppress(TypeError):
        _offered.setdefault(store, {})[protocol] = found
    return found
