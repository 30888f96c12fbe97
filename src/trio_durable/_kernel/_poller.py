"""The due-run poller and the reconcile pass.

The poller resumes runs whose timer is due or whose engine went away, in
shuffled batches of ``timer_batch_size``. The reconcile pass resumes runs
whose wake-up was lost: an engine that died after settling what a run waited
for (a child's end, a fan's last member, a remote result) and before waking
it leaves the run suspended with nothing left to wake it. While a drain
waits, it also looks up the tasks the engine still counts as sent, in case
an engine in another process settled them.

Neither wakes on a timer of its own where the store can tell it of changes
(a `DueFeed`: a memory store, or a SQLite store whose file is this
process's alone under a clock other than Trio's own). The poller then
sleeps until the next due time or until a write makes a run due sooner;
the reconcile pass looks ``reconcile_interval`` after a run may have
stalled, and never while nothing changes, so a 30-day timer under
`trio.testing.MockClock` costs no pass at all. Where processes that may die
without a word write the store too (SQLite under Trio's own clock,
PostgreSQL, a store of your own that is no `ChangeFeed`), both also look every
``reconcile_interval``: the safety net for what such a writer left behind
(a timer it set, a lease it held, a wake it never sent).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Final, cast

import trio

from .._base._exceptions import StoreError
from .._stores._base import DueFeed, offers

if TYPE_CHECKING:
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

_OUTAGE_BACKOFF: Final = 0.1
"""Seconds the poller first waits after the store failed to list due runs;
doubled on each failure in a row, up to the reconcile interval."""


async def poll_due(rt: Runtime) -> None:
    """Resume runs that are due: timers, and runs whose engine went away.

    Due runs are taken in batches of ``timer_batch_size`` and woken in
    shuffled order, so that several engines polling one store spread over
    the batch instead of contending for the same rows.
    """
    scheduler, signals, batch = rt.scheduler, rt.scheduler.signals, rt.options.timer_batch_size
    outage = 0
    while True:
        signals.poke = trio.Event()
        # Made before listing, so a turn that ends while this pass looks at
        # the store still wakes the wait below (no lost wake-up).
        progress = signals.progress = trio.Event()
        listed_at = rt.clock.now()
        try:
            due = await rt.store.list_due_runs(listed_at, batch)
        except StoreError as exc:
            outage += 1
            await _outage_backoff(rt, outage, exc)
            continue
        # A run this engine passed on (its app lacks the workflow) waits out
        # the backoff on this engine's clock, whatever due time another
        # engine wrote since (see `_passed_on`).
        fresh = [
            run_id
            for run_id in due
            if not scheduler.has_turn(run_id) and not rt.passed_on.held_back(run_id)
        ]
        rt.rng.shuffle(fresh)
        for run_id in fresh:
            scheduler.wake(run_id)
        signals.passed.set()
        if fresh and len(due) >= batch:
            # A full batch: let it run before listing again, so the next
            # listing does not return the same rows.
            with trio.move_on_after(rt.options.lease_ttl / 3):
                await scheduler.idle.wait()
            continue
        try:
            next_due = await rt.store.next_due_time()
        except StoreError as exc:
            outage += 1
            await _outage_backoff(rt, outage, exc)
            continue
        if outage:
            logger.warning("the poller reaches the store again")
            outage = 0
        now = rt.clock.now()
        if next_due is not None and next_due <= now:
            if not fresh and next_due <= listed_at:
                # What is due was due when listed, and already has a turn
                # queued here; wait until a turn takes its lease (which
                # moves its due time). What came due after the listing (a
                # short timer, while the listing was in flight) is listed
                # again at once.
                with trio.move_on_after(rt.options.lease_ttl / 3):
                    await progress.wait()
            continue
        await sleep_until_due(rt, next_due, now)


async def _outage_backoff(
    rt: Runtime, outage: int, exc: StoreError, who: str = "the poller"
) -> None:
    """The database is away: nothing can run meanwhile (turns fail on it
    too). Wait a growing, jittered delay before asking again; what came due
    is still there when the database is back."""
    delay = min(_OUTAGE_BACKOFF * 2 ** min(outage - 1, 10), rt.options.reconcile_interval)
    logger.warning("%s cannot read the store (%s); retrying in %.2f s", who, exc, delay)
    await trio.sleep(delay * rt.rng.uniform(0.5, 1.0))


async def reconcile_stalled(rt: Runtime) -> None:
    """Wake the runs the store finds stalled (`Store.list_stalled_runs`):
    suspended with nothing pending, so a wake-up was lost. A wake costs one
    turn at most; a run that was not stalled after all replays and suspends
    again.

    On a `DueFeed` store a pass comes ``reconcile_interval`` after a run may
    have stalled (the store says when), and none while nothing changes; on
    any other store, every ``reconcile_interval``. A rescan (the store's
    watch may have missed a wake-up) cuts the wait short.

    Engines take stalled runs in shuffled batches of ``timer_batch_size``, so
    several engines on one store spread over a batch instead of contending
    for the same rows.
    """
    store, scheduler, batch = rt.store, rt.scheduler, rt.options.timer_batch_size
    feed = cast("DueFeed", store) if offers(store, DueFeed) else None
    change: trio.Event | None = None
    if feed is not None:
        # Made before the store is asked: a run that may stall from now on
        # calls for a pass.
        change = feed.unwoken_event()
        if not feed.unwoken_runs():
            # No run is suspended without a wake time: none is stalled yet.
            await _first_set(change, scheduler.signals.rescan)
    while True:
        with trio.move_on_after(rt.options.reconcile_interval):
            await scheduler.signals.rescan.wait()
        scheduler.signals.rescan = trio.Event()
        if feed is not None:
            # What may stall during this pass calls for the next one.
            change = feed.unwoken_event()
        if scheduler.draining and rt.sent.count:
            # A drain waits on tasks whose results an engine in another
            # process may have settled: look them up (only then, so an
            # engine that nobody drains pays nothing for it).
            try:
                await rt.sent.recheck(store)
            except StoreError as exc:
                logger.warning("the reconcile pass could not look up sent tasks: %s", exc)
        failures = 0
        while True:
            try:
                stalled = await store.list_stalled_runs(batch)
            except StoreError as exc:
                # Asked again soon, not at the next interval: a rescan after
                # the database came back meets a pooled connection its
                # restart broke, and the runs it would wake must not wait
                # a whole interval for that.
                failures += 1
                await _outage_backoff(rt, failures, exc, "the reconcile pass")
                continue
            fresh = [run_id for run_id in stalled if not scheduler.has_turn(run_id)]
            rt.rng.shuffle(fresh)
            for run_id in fresh:
                logger.warning(
                    "run %s was suspended with nothing left to wake it; waking it", run_id
                )
                rt.telemetry.stats.reconciled += 1
                scheduler.wake(run_id)
            if not fresh or len(stalled) < batch:
                break
            # A full batch: let it run before listing again.
            with trio.move_on_after(rt.options.lease_ttl / 3):
                await scheduler.idle.wait()
        if change is not None:
            # Nothing may have stalled since: wait until something may.
            await _first_set(change, scheduler.signals.rescan)


async def sleep_until_due(rt: Runtime, next_due: float | None, now: float) -> None:
    """Wait until ``next_due`` (None: no run is due), or until told that a
    run may be due sooner: poked by this engine, or, on a `DueFeed` store,
    by the store; on another store, at most ``reconcile_interval``."""
    signals = rt.scheduler.signals
    if offers(rt.store, DueFeed):
        # All writers are in this process and the store says when a run
        # becomes due sooner, so no periodic scan is needed.
        deadline = math.inf if next_due is None else next_due
        signals.deadline = deadline
        watch = cast("DueFeed", rt.store).due_event(deadline)
        try:
            async with trio.open_nursery() as race:
                race.start_soon(_set_when, watch, race.cancel_scope)
                race.start_soon(_set_when, signals.poke, race.cancel_scope)
                if deadline < math.inf:
                    race.start_soon(
                        _sleep_then_cancel, rt.clock.to_trio(deadline), race.cancel_scope
                    )
        finally:
            # Spent either way: setting it lets the store drop it, instead of
            # keeping one stale watcher per pass.
            watch.set()
    else:
        # Other processes write too, and one that dies tells nobody of the
        # timers it set or the leases it held: scan at least every
        # reconcile interval.
        deadline = now + rt.options.reconcile_interval
        if next_due is not None:
            deadline = min(deadline, next_due)
        signals.deadline = deadline
        with trio.move_on_at(rt.clock.to_trio(deadline)):
            await signals.poke.wait()
    signals.deadline = math.inf


# -- events ---------------------------------------------------------------


async def _first_set(*events: trio.Event) -> None:
    """Return once one of ``events`` is set."""
    if any(event.is_set() for event in events):
        return
    async with trio.open_nursery() as race:
        for event in events:
            race.start_soon(_set_when, event, race.cancel_scope)


async def _set_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _sleep_then_cancel(deadline: float, scope: trio.CancelScope) -> None:
    await trio.sleep_until(deadline)
    scope.cancel()
