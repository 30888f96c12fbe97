"""A broker for tests that records the size of every message body sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio_durable as td
from trio_durable.brokers import Outgoing


class SizedBroker:
    """A view of another broker (the memory broker, or a real one) that
    records, per queue, the sizes of the message bodies dispatched through
    it; everything else is the wrapped broker's."""

    def __init__(self, inner: td.Broker) -> None:
        self.inner = inner
        self.sizes: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        self.sizes.extend((m.queue, len(m.body)) for m in messages)
        await self.inner.dispatch(messages)

    def largest(self) -> int:
        return max(size for _, size in self.sizes)
