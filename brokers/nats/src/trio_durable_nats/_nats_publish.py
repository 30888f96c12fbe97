"""The publishing half of the NATS broker: JetStream publishes in batches.

`BatchPublisher` (on the asyncio loop) publishes a whole batch as plain
NATS publishes, each with a reply subject of its own under one wildcard
subscription, and waits for all of their JetStream acknowledgements
together: one socket write for the batch (nats-py's flusher takes every
publish queued before it runs), and no task, timer or future per message,
which is what ``js.publish`` (a request each) and ``js.publish_async`` (a
future each, and no timeout) cost.

`Publishing` (on the Trio side) is what the broker's `Outbox` (of
`trio_durable.brokers`: what concurrent `NatsBroker.dispatch` calls queued,
a batch at a time) publishes with: one crossing of the bridge per batch.
What comes back "no responders" it publishes again after a `Backoff`, within the
publish timeout: in a cluster, that is the answer while the stream has no
leader (for several seconds after its leader died, until the survivors have
elected one), and a dispatch that failed at once would spend the engine's
few retries inside one election (see ``docs/nats.md``).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
from collections.abc import Sequence
from typing import Any, Final, final

import nats.errors
import nats.js.errors
import trio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from trio_durable.brokers import Bridge

Item = tuple[str, bytes, dict[str, str] | None]
"""What one publish sends: its subject, body and headers (or None)."""

CLIENT_ERRORS: Final = (nats.errors.Error, OSError, asyncio.TimeoutError, ValueError)
"""What nats-py raises when the server or the connection fails."""

NO_RESPONDERS: Final = (nats.js.errors.NoStreamResponseError, nats.errors.NoRespondersError)
"""What a JetStream publish or API call that reached no leader raises."""


@final
class Backoff:
    """Waits between attempts answered "no responders": from ``first``
    seconds, doubling up to ``most``."""

    __slots__ = ("_next", "first", "most")

    def __init__(self, first: float = 0.05, most: float = 1.0) -> None:
        self.first = first
        self.most = most
        self._next = first

    def next(self) -> float:
        """The wait before the next attempt."""
        wait = self._next
        self._next = min(self.most, wait * 2)
        return wait

    def reset(self) -> None:
        """An attempt got an answer: start from ``first`` again."""
        self._next = self.first


@final
class _Batch:
    """One batch waiting for its acknowledgements (on the loop)."""

    __slots__ = ("done", "outcomes", "remaining")

    def __init__(self, size: int) -> None:
        self.outcomes: list[BaseException | None] = [None] * size
        self.remaining = size
        self.done = asyncio.get_running_loop().create_future()

    def settle(self, index: int, outcome: BaseException | None) -> None:
        self.outcomes[index] = outcome
        self.remaining -= 1
        if self.remaining == 0 and not self.done.done():
            self.done.set_result(None)


@final
class BatchPublisher:
    """JetStream publishes acknowledged per batch, on the asyncio loop.

    Each message is published with the reply subject ``<inbox>.<n>``, ``n``
    counting up, so the acknowledgement JetStream sends there names the
    message it answers. The subscription on ``<inbox>.*`` is nats-py's: it
    is restored with the connection, and acknowledgements lost with a
    connection leave their batch to time out (the caller publishes again:
    at-least-once).
    """

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._prefix = nc.new_inbox()
        self._cut = len(self._prefix) + 1
        self._numbers = itertools.count()
        # Message number -> its batch and its index there.
        self._waiting: dict[int, tuple[_Batch, int]] = {}
        self._sub: Any = None
        self.batches = 0
        """Batches published (each one flush of the connection's buffer)."""
        self.published = 0
        """Messages those batches carried."""

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(f"{self._prefix}.*", cb=self._on_ack)

    async def _on_ack(self, msg: Msg) -> None:
        try:
            number = int(msg.subject[self._cut :])
        except ValueError:
            return
        waiting = self._waiting.pop(number, None)
        if waiting is None:
            return  # its batch timed out
        batch, index = waiting
        batch.settle(index, _refusal(msg))

    async def publish(self, items: Sequence[Item], limit: float) -> list[BaseException | None]:
        """Publish ``items`` and wait up to ``limit`` seconds for every
        acknowledgement; each one's failure (None where JetStream stored
        it). Never raises for one message: a message not acknowledged in
        time fails with `nats.errors.TimeoutError`."""
        self.batches += 1
        self.published += len(items)
        batch = _Batch(len(items))
        numbers: list[int] = []
        nc = self._nc
        prefix = self._prefix
        try:
            for index, (subject, body, headers) in enumerate(items):
                number = next(self._numbers)
                self._waiting[number] = (batch, index)
                numbers.append(number)
                try:
                    await nc.publish(subject, body, reply=f"{prefix}.{number}", headers=headers)
                except CLIENT_ERRORS as exc:
                    if self._waiting.pop(number, None) is not None:
                        batch.settle(index, exc)
            if batch.remaining:
                try:
                    async with asyncio.timeout(limit):
                        await batch.done
                except TimeoutError:
                    for number in numbers:
                        waiting = self._waiting.pop(number, None)
                        if waiting is not None:
                            batch.settle(waiting[1], nats.errors.TimeoutError())
        finally:
            # Cancelled midway: nothing waits for the rest any more.
            for number in numbers:
                self._waiting.pop(number, None)
        return batch.outcomes


def _refusal(msg: Msg) -> BaseException | None:
    """What JetStream's answer to a publish says went wrong, or None if it
    stored the message."""
    headers = msg.headers
    if headers and headers.get("Status") == "503":
        return nats.js.errors.NoStreamResponseError()
    data = msg.data
    if b'"error"' not in data:
        return None
    try:
        answer = json.loads(data)
    except ValueError as exc:
        return exc
    if isinstance(answer, dict) and "error" in answer:
        error: BaseException = nats.js.errors.APIError.from_error(answer["error"])
        return error
    return None


@final
class Publishing:
    """What the broker's `Outbox` publishes with: a batch through the
    publisher on the client's loop, and again for the messages refused for
    "no responders" (a stream with no leader, during an election) after a
    backoff, until the timeout."""

    def __init__(self, bridge: Bridge, publisher: BatchPublisher, timeout: float) -> None:
        self._bridge = bridge
        self._publisher = publisher
        self._timeout = timeout

    async def __call__(self, items: list[Item]) -> list[BaseException | None]:
        """Publish ``items``; publish those refused for "no responders"
        again after a backoff, until the timeout; each one's outcome."""
        deadline = trio.current_time() + self._timeout
        outcomes: list[BaseException | None] = [None] * len(items)
        todo = list(range(len(items)))
        backoff = Backoff()
        while True:
            limit = max(0.0, deadline - trio.current_time())
            batch = [items[i] for i in todo]
            try:
                results = await self._bridge.run(
                    functools.partial(self._publisher.publish, batch, limit)
                )
            except CLIENT_ERRORS as exc:
                results = [exc] * len(batch)
            refused = []
            for i, outcome in zip(todo, results, strict=True):
                outcomes[i] = outcome
                if isinstance(outcome, nats.js.errors.NoStreamResponseError):
                    refused.append(i)
            wait = backoff.next()
            if not refused or trio.current_time() + wait >= deadline:
                return outcomes
            # The stream has no leader for now (an election).
            await trio.sleep(wait)
            todo = refused
