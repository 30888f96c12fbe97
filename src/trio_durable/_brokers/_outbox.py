"""The outbox of a broker adapter: publishes the messages of concurrent
dispatches in batches.

Each `Broker.dispatch` of an adapter queues its messages and waits; one task
in the broker's nursery (`Outbox.run`) takes everything queued while its
previous batch was out and publishes it in one call, so a thousand runs
dispatching a task each cost a few crossings to the client's loop (and a
few confirm waits), not a thousand. Each dispatch then learns how its own
messages went.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, final

import attrs
import trio

Item = TypeVar("Item")


@final
@attrs.define(eq=False)
class OutboxJob(Generic[Item]):
    """One dispatch's messages, and how their publishing went.

    Attributes:
      items: The messages, as the dispatch queued them.
      error: None if every message was published; else the first failure
        (one of the outbox's ``first`` types before any other), or
        `trio.ClosedResourceError` if the outbox stopped before publishing
        them.
      failed_at: The index in ``items`` of the message ``error`` is about
        (None for a closed outbox).
    """

    items: list[Item]
    error: BaseException | None = None
    failed_at: int | None = None
    done: trio.Event = attrs.field(factory=trio.Event, repr=False)


@final
class Outbox(Generic[Item]):
    """Publishes what concurrent dispatches queued, a batch at a time.

    Args:
      publish: Publishes a batch; returns each message's outcome in order
        (None if published, else the exception). It reports the client's
        errors as outcomes; anything it raises stops the outbox (the
        batch's dispatches stay queued, and fail as closed).
      first: Failures of these types are a dispatch's error before any
        other: they are the caller's to act on (a refused size).
    """

    def __init__(
        self,
        publish: Callable[[list[Item]], Awaitable[list[BaseException | None]]],
        *,
        first: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._publish = publish
        self._first = first
        self._jobs: list[OutboxJob[Item]] = []
        self._ready = trio.Event()

    async def publish(self, items: list[Item]) -> OutboxJob[Item]:
        """Queue ``items`` and wait until a batch published them (or failed
        to): the job says how it went."""
        job = OutboxJob(items)
        self._jobs.append(job)
        self._ready.set()
        await job.done.wait()
        return job

    async def run(self) -> None:
        """Publish the queued dispatches until cancelled; then fail those
        still queued as closed."""
        try:
            while True:
                await self._ready.wait()
                self._ready = trio.Event()
                jobs, self._jobs = self._jobs, []
                try:
                    outcomes = await self._publish([item for job in jobs for item in job.items])
                except BaseException:
                    self._jobs = jobs + self._jobs
                    raise
                start = 0
                for job in jobs:
                    mine = outcomes[start : start + len(job.items)]
                    start += len(job.items)
                    failed = [(i, error) for i, error in enumerate(mine) if error is not None]
                    failed.sort(key=lambda f: not isinstance(f[1], self._first))
                    if failed:
                        job.failed_at, job.error = failed[0]
                    job.done.set()
        finally:
            for job in self._jobs:
                job.error = trio.ClosedResourceError()
                job.done.set()
            self._jobs = []
