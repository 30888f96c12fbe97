"""Watching a store for announcements, in this process: what the memory
store's `RunWatch.watch` is, and the part the SQL stores' watches share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import attrs
import trio

from ._ops import Announce

Deliver = Callable[[Sequence[Announce] | None], None]


@attrs.define(eq=False)
class _Watcher:
    origin: str
    pending: list[Announce] = attrs.field(factory=list)
    event: trio.Event = attrs.field(factory=trio.Event)


@final
class LocalWatches:
    """The watchers of a store whose writers all share this process.

    `publish` is called once a batch committed; each watcher's own task
    delivers what was published by others, so a writer never runs a
    watcher's code.
    """

    def __init__(self) -> None:
        self._watchers: list[_Watcher] = []

    def publish(self, announced: Sequence[Announce]) -> None:
        """Hand ``announced`` (just committed) to every watcher but their
        writers'."""
        for watcher in self._watchers:
            mine = [item for item in announced if item.origin != watcher.origin]
            if mine:
                watcher.pending.extend(mine)
                watcher.event.set()

    async def watch(
        self,
        origin: str,
        deliver: Deliver,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """See `RunWatch.watch`."""
        watcher = _Watcher(origin)
        self._watchers.append(watcher)
        try:
            task_status.started()
            while True:
                await watcher.event.wait()
                watcher.event = trio.Event()
                batch, watcher.pending = watcher.pending, []
                deliver(batch)
        finally:
            self._watchers.remove(watcher)
