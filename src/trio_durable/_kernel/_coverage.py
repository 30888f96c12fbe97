"""Worker coverage: whether a live worker serves each group an engine
sends tasks to and does not serve itself.

An engine sends its app's remote steps to their groups and its remote
workflows' decision tasks to their decision groups. A group the engine
does not serve (``serve=``) needs a worker of some other process; with none
alive, its tasks wait on the broker and their runs wait with them. That is
not an error (workers may start later, or are being rolled), so the engine
stays ready and says so: once at WARNING as a look first finds a group with
no live worker, again at WARNING if a group that had workers loses them
all, and at INFO when one comes; a look that changes nothing logs nothing.
`Engine.groups_without_workers` (and so ``/readyz``'s ``warnings``) gives
the current view.

A look reads the announcements through the dispatcher's cache
(`Dispatcher.live_workers`, the one that judges ``requires=``), and counts
a worker of ``<group>@<namespace>`` as serving the group too.

When it looks: never before `GRACE` seconds of Trio's clock have passed
since the engine opened, since on a broker with heartbeats a worker that is
alive announces itself again only within its heartbeat and a look right
at the start would miss it. Then the watcher looks once; on a broker whose
announcements lapse unless renewed (`needs_heartbeat`), again every
`LOOK_EVERY` seconds, since a worker that died sends nothing and only time
tells its announcement has lapsed: no event could say so. On a broker
whose announcements go with its process (the memory broker) it looks only
once, so an engine there wakes on no timer after it (a simulation that
skips a year costs nothing), and later looks are those `/readyz` makes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, cast, final

import attrs
import trio

from .._brokers._base import BrokerError, WorkerDescriptor
from ._options import WorkerOptions

logger = logging.getLogger("trio_durable")

GRACE: Final = cast(float, attrs.fields(WorkerOptions).ttl.default)
"""Seconds of Trio's clock after the engine opened before a look may find
a group without workers: a worker's announcement time to live by default
(15 s, three of its heartbeats), within which every live worker of default
settings has announced itself again, and the announcement of one that died
before the engine opened has lapsed."""

LOOK_EVERY: Final[float] = GRACE
"""Seconds between the watcher's looks on a broker with heartbeats: an
announcement lapses at most this long after its worker died."""


@final
class Coverage:
    """Which of an engine's groups have a live worker, as last looked.

    Args:
      groups: The groups to watch (`_definitions.remote_groups`).
      live_workers: Reads the live workers' announcements (the
        dispatcher's `Dispatcher.live_workers`, through its cache).
    """

    def __init__(
        self,
        groups: Sequence[str],
        live_workers: Callable[[], Awaitable[list[WorkerDescriptor]]],
    ) -> None:
        self.groups = tuple(groups)
        self._live_workers = live_workers
        # Per group: whether the last look found a live worker of it (a
        # group not looked at yet is absent). Transitions are what is logged.
        self._served: dict[str, bool] = {}
        # Set once `GRACE` has passed: looks before it could miss live workers.
        self.armed = False

    def without_workers(self) -> list[str]:
        """The groups the last look found no live worker of, sorted."""
        return [group for group in self.groups if self._served.get(group) is False]

    async def look(self) -> list[str]:
        """Read the live workers' announcements (through the dispatcher's
        cache) and log what changed; return the groups without workers
        (none before `GRACE`, or without any group to watch).

        Raises:
          BrokerError: The announcements could not be read (the view is
            left as it was).
        """
        if not self.armed or not self.groups:
            await trio.lowlevel.checkpoint()
            return []
        descriptors = await self._live_workers()
        live = {route.partition("@")[0] for d in descriptors for route in d.groups}
        for group in self.groups:
            served, before = group in live, self._served.get(group)
            self._served[group] = served
            if served == before:
                continue
            if not served:
                logger.warning(
                    "no live worker serves the group %r%s: its tasks wait on the broker until"
                    " a worker of it starts",
                    group,
                    "" if before is None else " any more",
                )
            elif before is False:
                logger.info("a live worker serves the group %r now", group)
        return self.without_workers()


async def watch_coverage(coverage: Coverage, heartbeats: bool) -> None:
    """Look after `GRACE` seconds, then (where announcements need
    ``heartbeats``) every `LOOK_EVERY` seconds, for ever; a look that
    cannot read the announcements is left to the next one (the broker's
    outage is said where it matters: dispatch, and ``/readyz``)."""
    await trio.sleep(GRACE)
    coverage.armed = True
    while True:
        try:
            await coverage.look()
        except BrokerError as exc:
            logger.debug("could not read the live workers' announcements: %s", exc)
        if not heartbeats:
            return
        await trio.sleep(LOOK_EVERY)
