"""Group commit: the calls of many tasks, run together in few trips to a database.

The SQL stores' drivers block (sqlite3, psycopg), so a call runs on a
connection outside the Trio scheduler's reach, in a worker thread or, for
SQLite under a test's clock, in one synchronous call on the Trio thread. One
such *trip* per call would cost one commit (one fsync) per batch of writes.
Instead every call (a batch of writes from `Store.apply` or
`Store.begin_turn`, or a read) becomes a `Job` on a queue. While fewer than
``max_trips`` trips are in flight, the caller that finds its job still queued
leads one: it takes every queued job and hands them all to the store's
*trip*, which runs the reads and then the writes, committing the writes
together. Callers whose jobs rode in another caller's trip are woken with
their results and make no trip of their own.

What a trip does with its jobs is the store's: on which thread and
connection it runs, and how one failing batch is kept from the others (a
savepoint per batch in SQLite, a second pass without it in PostgreSQL). This
module keeps what both share: the queue, who leads, what a cancelled caller
may withdraw, closing, and the statistics of what was committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, final

import attrs
import trio

from .._base._exceptions import StoreError
from ._base import StoreStatistics

Cur = TypeVar("Cur")
"""What a job's work runs on: the driver's cursor."""

T = TypeVar("T")

Counts = tuple[int, int, int, int]
"""What a job adds to the store's statistics once it is committed:
``(batches, ops, run_rows_read, checkpoint_rows_read)``."""


@final
@attrs.define(slots=True, eq=False)
class Job(Generic[Cur, T]):
    """One caller's unit of work, and its outcome once a trip ran it."""

    # Returns the caller's result and what it adds to the statistics (None
    # when it adds nothing, as a begin_turn that found nothing to do).
    work: Callable[[Cur], tuple[T, Counts | None]]
    writes: bool
    # The runs whose rows the job's writes lock, for a store that locks them
    # in a global order before writing (PostgreSQL).
    runs: tuple[str, ...] = ()
    # Set when a trip took the job (or aclose failed it): from then on it is
    # no longer the caller's to withdraw.
    taken: bool = False
    # Set by a trip once the job's outcome is final (a read ran, a batch
    # failed on its own): a trip that breaks later leaves it be.
    done: bool = False
    # What the work returned, the last time it ran without failing.
    value: tuple[T, Counts | None] | None = None
    error: BaseException | None = None
    finished: trio.Event = attrs.Factory(trio.Event)

    @property
    def counts(self) -> Counts | None:
        """What the job adds to the statistics: None if it failed."""
        return None if self.value is None else self.value[1]

    def run(self, cur: Cur) -> bool:
        """Run the work (in a trip); return whether it succeeded."""
        try:
            self.value = self.work(cur)
        except Exception as exc:
            self.fail(exc)
            return False
        self.error = None
        return True

    def fail(self, error: BaseException) -> None:
        self.value = None
        self.error = error


Trip = Callable[[list[Job[Cur, Any]]], Awaitable[bool]]
"""Runs a trip's jobs and returns whether a transaction was committed. It
records each job's outcome on the job (`Job.run`, `Job.fail`) and raises
nothing: an exception it lets out is a bug, and fails every job left. Once
taken, the jobs must run (or fail) as a whole, so what it awaits it shields
from cancellation (`trio.to_thread.run_sync` would raise `trio.Cancelled`
before starting the thread). It shields only what it awaits: a cancel
scope costs a few microseconds, more than a query on the Trio thread."""


@final
class GroupCommit(Generic[Cur]):
    """The job queue of one store, and the trips that empty it.

    Args:
      trip: Runs the jobs of one trip (see `Trip`).
      close: Closes the store's connections once no trip is in flight
        (called shielded, once).
      store_error: The `StoreError` a job's exception is raised as, or None
        to raise it unchanged (a `WriteConflict`, an unknown operation).
      max_trips: Trips in flight at most (each needs a connection).
      gather_first: Whether a leader yields once before taking the queue, so
        that the jobs of tasks already runnable ride its trip. A trip that
        waits for a thread gathers them meanwhile; one that runs on the Trio
        thread, in one synchronous call, needs this.
    """

    def __init__(
        self,
        trip: Trip[Cur],
        close: Callable[[], Awaitable[None]],
        store_error: Callable[[BaseException], StoreError | None],
        *,
        max_trips: int,
        gather_first: bool = False,
    ) -> None:
        self._trip = trip
        self._close = close
        self._store_error = store_error
        self._max_trips = max_trips
        self._gather_first = gather_first
        self._queue: list[Job[Cur, Any]] = []
        self._trips = 0
        # Set (and replaced) whenever a trip ends.
        self._trip_ended = trio.Event()
        self._stats = StoreStatistics()
        self._closed = False

    def statistics(self) -> StoreStatistics:
        """What the trips committed and read (a live object)."""
        return self._stats

    async def aclose(self) -> None:
        """Fail the queued jobs with `trio.ClosedResourceError`, as later
        calls will, let the trips in flight finish, and close."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        for job in self._queue:
            job.taken = True
            job.fail(trio.ClosedResourceError("the store was closed"))
            job.finished.set()
        self._queue.clear()
        # Closing must finish even if we are cancelled, or connections (and
        # a file's lock) would outlive the store.
        with trio.CancelScope(shield=True):
            while self._trips:
                await self._trip_ended.wait()
            await self._close()

    async def submit(
        self,
        work: Callable[[Cur], tuple[T, Counts | None]],
        *,
        writes: bool,
        runs: tuple[str, ...] = (),
    ) -> T:
        """Run ``work`` in a trip (with the writes of other callers, in one
        transaction, if ``writes``) and return its result.

        Raises:
          trio.ClosedResourceError: The store is closed, or was closed while
            the job waited in the queue.
          StoreError: The database failed (see ``store_error``).
        """
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        await trio.lowlevel.checkpoint_if_cancelled()
        job: Job[Cur, T] = Job(work, writes, runs)
        self._queue.append(job)
        try:
            while not job.taken:
                if self._trips < self._max_trips:
                    await self._lead_trip()
                else:
                    await self._trip_ended.wait()
            if not job.finished.is_set():
                await job.finished.wait()
        except BaseException as exc:
            if not job.taken:
                self._queue.remove(job)
                raise
            if not isinstance(exc, trio.Cancelled):
                raise
            # A taken job runs to its end whatever we do here; wait for it, so
            # the caller learns whether its write committed, as
            # trio.to_thread.run_sync does for its own caller. The
            # cancellation is delivered at the caller's next checkpoint.
            with trio.CancelScope(shield=True):
                await job.finished.wait()
        error, job.error = job.error, None
        if error is not None:
            store_error = self._store_error(error)
            if store_error is None:
                raise error
            raise store_error from error
        assert job.value is not None
        return job.value[0]

    async def _lead_trip(self) -> None:
        self._trips += 1
        jobs: list[Job[Cur, Any]] = []
        committed = False
        try:
            if self._gather_first:
                # Callers that run before this one resumes queue their jobs
                # and wait for this trip, which takes them along. Shielded,
                # so the leader's own job stays queued.
                await trio.lowlevel.cancel_shielded_checkpoint()
            jobs, self._queue = self._queue, []
            for job in jobs:
                job.taken = True
            committed = await self._trip(jobs)
        except BaseException as exc:  # pragma: no cover - a bug in the trip
            for job in jobs:
                if job.error is None:
                    job.fail(exc)
            raise
        finally:
            stats = self._stats
            for job in jobs:
                counts = job.counts
                if counts is not None and job.error is None:
                    stats.batches += counts[0]
                    stats.ops += counts[1]
                    stats.run_rows_read += counts[2]
                    stats.checkpoint_rows_read += counts[3]
                job.finished.set()
            if committed:
                stats.transactions += 1
            self._trips -= 1
            ended, self._trip_ended = self._trip_ended, trio.Event()
            ended.set()
