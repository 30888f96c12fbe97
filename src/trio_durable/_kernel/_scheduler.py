"""Scheduling: which runs have a turn here, waking them, and drain.

A run gets a slot while a turn of it is queued or running. Wakes of one run
coalesce: while its turn is in flight, further wakes only ask for one more
turn after it. Every turn runs in the engine's nursery; a turn that fails on
the store is repaired and run again, a few times, before the run is left to
the poller (its lease lapses).

Drain is bookkeeping with events: the slots, the result consumer's batches
in flight, the tasks sent to the embedded worker, the worker itself and the
broker's queues each say when they have nothing left, and drain returns at
the first moment all of them agree and nothing is due.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, Protocol, final

import attrs
import trio

from .._base._exceptions import EngineClosedError, StoreError

if TYPE_CHECKING:
    from .._base._records import Run
    from ._replay import TurnDraft
    from ._runtime import EngineStatistics, Runtime

logger = logging.getLogger("trio_durable")

_TURN_RETRIES: Final = 5
_TURN_RETRY_DELAY: Final = 1.0


@attrs.define(eq=False)
class Slot:
    """One run's place in the engine while a turn of it is queued or running."""

    again: bool = False
    body_scope: trio.CancelScope | None = None
    # The first turn of a run this engine just created (and leased) starts
    # from what it wrote, instead of reading it back.
    initial: TurnDraft | None = None
    # Whether a turn began reading the run: a wake before that needs no
    # turn of its own, since the turn about to begin reads what woke it.
    began: bool = False


class TurnRunner(Protocol):
    """What the scheduler drives: one turn of a run at a time."""

    async def run(self, run_id: str, slot: Slot) -> None:
        """Run one turn of ``run_id``."""

    async def repair(self, run_id: str) -> None:
        """Redo the effects of the run's last write if it raised StoreError."""


@final
class PollerSignals:
    """What the due-run poller and the rest of the engine tell each other.

    Attributes:
      poke: Set to make the poller look for due runs now.
      progress: Set when a turn took a run's lease or ended (the poller
        waits for one before it looks at a run it left queued again).
      passed: Set when the poller finished a pass.
      deadline: When the poller looks next, if nothing pokes it.
      rescan: Set to make the reconcile pass look for stalled runs now
        (the store's watch may have missed a wake-up).
    """

    def __init__(self) -> None:
        self.poke = trio.Event()
        self.rescan = trio.Event()
        self.progress = trio.Event()
        self.passed = trio.Event()
        self.deadline = math.inf

    def wake_at(self, when: float) -> None:
        """A run will be due at ``when``: poke the poller if it would look
        only later."""
        if when < self.deadline:
            self.poke.set()


@final
class Scheduler:
    """The runs with a turn here, and the tasks that run their turns.

    Args:
      nursery: The engine's nursery, where every turn runs.
      turns: Runs the turns.
      stats: Counts them.
    """

    def __init__(self, nursery: trio.Nursery, turns: TurnRunner, stats: EngineStatistics) -> None:
        self._nursery = nursery
        self._turns = turns
        self._stats = stats
        self._slots: dict[str, Slot] = {}
        self._settling = 0
        self._idle = trio.Event()
        self._idle.set()
        self.signals = PollerSignals()
        self.draining = 0
        self.closed = False
        # Set with `closed`: a drain waiting elsewhere wakes, since the
        # events it waits on may never fire once the nursery is cancelled.
        self.closing = trio.Event()
        # Runs whose turn a KeyboardInterrupt or SystemExit cut off: their
        # leases are given back on close.
        self.cut_off: list[str] = []

    def check_open(self) -> None:
        """Raise `EngineClosedError` once the engine is closed."""
        if self.closed:
            raise EngineClosedError("the engine is closed")

    def close(self) -> list[str]:
        """Take no more wakes; return the runs with a turn here now."""
        self.closed = True
        self.closing.set()
        return sorted(self._slots)

    def has_turn(self, run_id: str) -> bool:
        """Whether a turn of ``run_id`` is queued or running here."""
        return run_id in self._slots

    @property
    def active(self) -> int:
        """How many runs have a turn queued or running here."""
        return len(self._slots)

    def busy(self) -> bool:
        """Whether a turn is in flight or a batch of results is settling."""
        return bool(self._slots) or self._settling > 0

    @property
    def idle(self) -> trio.Event:
        """Set while no turn is in flight and no batch is settling (a new
        event each time the engine gets busy)."""
        return self._idle

    def _check_idle(self) -> None:
        if self.busy():
            if self._idle.is_set():
                self._idle = trio.Event()
        else:
            self._idle.set()

    @contextmanager
    def settling(self) -> Iterator[None]:
        """The block settles a batch of results: the engine is not idle."""
        self._settling += 1
        try:
            yield
        finally:
            self._settling -= 1
            self._check_idle()

    @property
    def settling_now(self) -> bool:
        """Whether a batch of results is being settled."""
        return self._settling > 0

    def wake(self, run_id: str, *, initial: TurnDraft | None = None) -> None:
        """Run a turn of ``run_id`` (once more after the one in flight)."""
        if self.closed:
            return
        slot = self._slots.get(run_id)
        if slot is not None:
            if slot.began or slot.initial is not None:
                slot.again = True
            else:
                self._stats.wakes_coalesced += 1
            return
        self._slots[run_id] = Slot(initial=initial)
        if self._idle.is_set():
            self._idle = trio.Event()
        self._nursery.start_soon(self._drive, run_id, name=f"trio_durable turn {run_id}")

    def untouched(self, run_id: str) -> Run | None:
        """The run as this engine created it, if its first turn has not
        begun yet: nothing has changed it since, and, while its lease (made
        with it, this engine's) lasts, nothing else can."""
        slot = self._slots.get(run_id)
        return None if slot is None or slot.initial is None else slot.initial.run

    def interrupt(self, run_id: str) -> None:
        """Cut short the body of a run's turn in flight (it was just told to
        cancel), so it runs no further steps; its next turn ends it."""
        slot = self._slots.get(run_id)
        if slot is not None and slot.body_scope is not None:
            slot.body_scope.cancel()

    async def _drive(self, run_id: str) -> None:
        slot = self._slots[run_id]
        failures = 0
        try:
            while True:
                slot.again = False
                slot.began = True
                try:
                    await self._turns.run(run_id, slot)
                    failures = 0
                except trio.ClosedResourceError:
                    return
                except StoreError as exc:
                    # The write may have been applied or not: repair what its
                    # effects would have done, then run the turn again. After
                    # repeated failures, give up: the lease lapses and the
                    # poller (here or on another engine) resumes the run.
                    logger.warning("turn of run %r failed on the store: %s", run_id, exc)
                    failures += 1
                    if failures > _TURN_RETRIES:
                        return
                    await trio.sleep(_TURN_RETRY_DELAY * failures)
                    try:
                        await self._turns.repair(run_id)
                    except StoreError as again:
                        logger.warning("repair of run %r failed: %s", run_id, again)
                    slot.again = True
                self._stats.turns += 1
                if not slot.again:
                    return
        except BaseException:
            # Cut off: by the engine closing, or by a KeyboardInterrupt or
            # SystemExit out of a body or step, which closes it too. The
            # lease this turn may hold is given back once everything here
            # has stopped, so another engine resumes the run at once.
            self.cut_off.append(run_id)
            raise
        finally:
            del self._slots[run_id]
            # The poller may be waiting for this turn to end before it looks
            # at the run again (it came due while the turn held it).
            self.signals.progress.set()
            self._check_idle()


async def drain(rt: Runtime) -> None:
    """`Engine.drain`: wait until the engine has nothing left to do now.

    Raises:
      EngineClosedError: The engine is closed, or closed while waiting.
    """
    scheduler = rt.scheduler
    scheduler.check_open()
    scheduler.draining += 1
    try:
        while True:
            if await _wait_for_an_effect(rt):
                scheduler.check_open()
                continue
            due = await rt.store.list_due_runs(rt.clock.now(), 1)
            scheduler.check_open()
            if _has_effects(rt):
                continue
            if not due:
                return
            # Something is due that the poller has not picked up yet.
            passed = scheduler.signals.passed = trio.Event()
            scheduler.signals.poke.set()
            await passed.wait()
    finally:
        scheduler.draining -= 1


def _consumed_broker_queues(rt: Runtime) -> tuple[str, ...]:
    return (rt.results_queue, *(rt.worker.queues if rt.worker is not None else ()))


def _has_effects(rt: Runtime) -> bool:
    """Whether something drain waits for is outstanding now."""
    if rt.scheduler.busy() or rt.sent.count:
        return True
    if rt.worker is not None and rt.worker.busy:
        return True
    quiet = rt.broker.quiet(_consumed_broker_queues(rt))
    if quiet is None or quiet.is_set():
        return False
    quiet.set()  # nobody waits on it: let the broker forget it
    return True


async def _wait_for_an_effect(rt: Runtime) -> bool:
    """Wait for one kind of outstanding effect to end (or the engine to
    close); False at once if none is outstanding. (Others may have started
    meanwhile: the caller looks again.)"""
    quiet: trio.Event | None = None
    wait: Callable[[], Awaitable[object]]
    if rt.scheduler.busy():
        wait = rt.scheduler.idle.wait
    elif rt.sent.count:
        wait = rt.sent.wait_none
    elif rt.worker is not None and rt.worker.busy:
        wait = rt.worker.wait_idle
    else:
        quiet = rt.broker.quiet(_consumed_broker_queues(rt))
        if quiet is None or quiet.is_set():
            return False
        wait = quiet.wait
    try:
        async with trio.open_nursery() as race:

            async def first(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                race.cancel_scope.cancel()

            race.start_soon(first, wait)
            race.start_soon(first, rt.scheduler.closing.wait)
    finally:
        if quiet is not None:
            quiet.set()  # spent: the broker may forget it
    return True
