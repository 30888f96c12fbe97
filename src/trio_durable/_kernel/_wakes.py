"""Wake-ups across processes: announcing a write to the processes watching
the store, and acting on what others announce.

A process that writes something a run needs a turn for, and cannot run the
turn itself (a client, or an engine whose app lacks the run's workflow),
adds an `Announce` to the batch of that write; an engine that ends a run
announces the end, for callers of ``result`` elsewhere. Every engine and
client watches the store (`RunWatch.watch`: in this process for the memory
store, ``PRAGMA data_version`` for SQLite, ``LISTEN``/``NOTIFY`` for
PostgreSQL) in a task of its own nursery, and wakes what was announced: an
engine the runs whose workflow it has, a caller of ``result`` the run it
waits for. When the watch may have missed announcements, the engine
rescans: its poller lists due runs, its reconcile pass stalled ones, and
its callers of ``result`` read their runs again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, final

import trio

from .._base._exceptions import StoreError
from .._base._records import LATEST_VERSION, Run
from .._stores._base import ChangeFeed, RunWatch, offers
from .._stores._ops import Announce, AnnounceKind, Op
from ._definitions import remote_body

if TYPE_CHECKING:
    from .._stores._base import Store
    from ._definitions import Registry
    from ._endings import Endings
    from ._hooks import Feature
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

_RESTART_DELAY: Final = 1.0
"""Seconds before a watch that failed is started again."""

Deliver = Callable[[Sequence[Announce] | None], None]


def announce(store: object, origin: str, kind: AnnounceKind, runs: Sequence[Run]) -> list[Op]:
    """The operations that announce ``runs`` to the store's watchers (none
    for a store that is not a `RunWatch`, such as what a replay outside an
    engine writes through: see `ReplayStore`)."""
    if not offers(store, RunWatch):
        return []
    return [
        Announce(
            run_id=run.id, kind=kind, workflow=run.workflow, version=run.version, origin=origin
        )
        for run in runs
    ]


def announces_ends(store: Store) -> bool:
    """Whether a run's end is announced: on a `RunWatch` store whose
    writers may live in other processes (a `ChangeFeed` store tells this
    process's callers of ``result`` itself)."""
    return offers(store, RunWatch) and not offers(store, ChangeFeed)


def read_interval(store: Store, interval: float) -> float:
    """Seconds between reads of a run that a caller waits on (its end, a
    value it publishes, an update's outcome): `math.inf` on a store that
    announces writes (a `RunWatch`: every built-in one), where the caller
    is told of each change, here or elsewhere, and reads only then;
    ``interval`` on one that announces nothing."""
    return math.inf if offers(store, RunWatch) else interval


def serves(app: Registry, workflow: str | None, version: str | None) -> bool:
    """Whether an engine of ``app`` can run a turn of a run of ``workflow``
    at ``version`` (None: not known, so it may).

    It can for a workflow its app declares by name only, at any version:
    live workers decide its turns (docs/remote-workflows.md). One its app
    does not know at all is `served_by_convention` or not."""
    if workflow is None or version is None:
        return True
    known = [wf for wf in app.workflows if wf.name == workflow]
    if any(wf.fn is remote_body for wf in known):
        return True
    if version == LATEST_VERSION:
        return bool(known)
    return app.has_workflow(workflow, version)


async def wake_if_served_by_convention(rt: Runtime, run_id: str, workflow: str) -> None:
    """Wake a run announced by another process (a client's start) whose
    workflow this engine's app does not know, if live workers announce it:
    they decide its turns (docs/remote-workflows.md)."""
    if await rt.catalogue.announces(workflow):
        rt.scheduler.wake(run_id)


def ends_delivery(endings: Endings, features: Sequence[Feature] = ()) -> Deliver:
    """What a client's watch does with announcements: wake the callers of
    ``result`` waiting for a run that ended (all of them to read again, if
    some were missed), and tell ``features`` (a client's stream readers)."""

    def deliver(announced: Sequence[Announce] | None) -> None:
        if announced is None:
            endings.recheck()
            for feature in features:
                feature.missed()
            return
        for item in announced:
            if item.kind == "end":
                endings.ended(item.run_id)
            elif item.kind == "values":
                endings.changed(item.run_id)
            for feature in features:
                feature.announced(item.kind, item.run_id)

    return deliver


def engine_delivery(rt: Runtime) -> Deliver:
    """What an engine's watch does with announcements: wake the runs it can
    run (cutting short the turn in flight of a run told to cancel), and the
    callers of ``result`` waiting for a run that ended; read the
    breakpoints again when they changed."""
    scheduler, endings = rt.scheduler, rt.endings

    def deliver(announced: Sequence[Announce] | None) -> None:
        if announced is None:
            signals = scheduler.signals
            signals.poke.set()
            signals.rescan.set()
            endings.recheck()
            rt.features.missed()
            return
        for item in announced:
            if item.kind in ("stream", "breakpoints", "schedules", "builds"):
                # What features keep changed elsewhere: no turn.
                rt.features.announced(item.kind, item.run_id)
            elif item.kind == "end":
                rt.features.announced(item.kind, item.run_id)
                endings.ended(item.run_id)
            elif item.kind == "due":
                scheduler.signals.poke.set()
            elif item.kind == "values":
                endings.changed(item.run_id)
            elif serves(rt.app, item.workflow, item.version):
                if item.kind == "cancel":
                    scheduler.interrupt(item.run_id)
                scheduler.wake(item.run_id)
            elif item.workflow is not None and not any(
                wf.name == item.workflow for wf in rt.app.workflows
            ):
                rt.nursery.start_soon(wake_if_served_by_convention, rt, item.run_id, item.workflow)

    return deliver


@final
class _Started:
    """A task status that passes on the first start, and calls ``again`` on
    each later one (a watch started again after it failed)."""

    def __init__(self, first: trio.TaskStatus[None], again: Callable[[], None]) -> None:
        self._first: trio.TaskStatus[None] | None = first
        self._again = again

    @property
    def passed(self) -> bool:
        """Whether the first start was passed on."""
        return self._first is None

    def started(self, value: None = None) -> None:
        if self._first is not None:
            first, self._first = self._first, None
            first.started()
        else:
            self._again()


async def keep_watching(
    store: RunWatch,
    origin: str,
    deliver: Deliver,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the store's watch until cancelled, starting it again if it fails
    after it started (and telling ``deliver`` that some announcements may
    have been missed, once it watches again).

    Raises:
      StoreError: The watch failed before it started.
    """
    status = _Started(task_status, lambda: deliver(None))
    while True:
        try:
            await store.watch(origin, deliver, task_status=status)
            return
        except StoreError as exc:
            if not status.passed:
                raise
            logger.warning("watching the store failed (%s); watching again", exc)
        await trio.sleep(_RESTART_DELAY)
