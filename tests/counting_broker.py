"""A broker for tests that counts how often the announcements are read."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

import trio

import trio_durable as td
from trio_durable.brokers import Consumer, Outgoing, WorkerDescriptor


class CountingBroker:
    """A view of a `MemoryBroker` that counts reads of the announcements; a
    read takes ``read_time`` seconds, and fails while ``down``. Workers
    announce to it as to the memory broker it wraps."""

    def __init__(self, inner: td.MemoryBroker | None = None) -> None:
        self.inner = inner or td.MemoryBroker()
        self.reads = 0
        self.read_time = 0.0
        self.down = False

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        self.reads += 1
        if self.read_time:
            await trio.sleep(self.read_time)
        if self.down:
            await trio.lowlevel.checkpoint()
            raise td.BrokerUnavailable("the broker is down")
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()
