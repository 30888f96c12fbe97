"""A worker's results on their way back to the engines.

Each task's outcome is handed over as its step ends; the publisher sends
results in batches and settles each task's delivery (acks it, or
dead-letters it) only after its result was published, so a worker that
dies mid-step leaves its tasks to be delivered again.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from .._base._keyring import Keyring
from .._brokers._base import Broker, BrokerError, Consumer, Delivery, PayloadTooLarge
from .._wire._messages import Result
from .._wire._payload import lowered, result_message

logger = logging.getLogger("trio_durable")

RESULT_BATCH: Final = 256


@attrs.frozen
class Outcome:
    """A task's result, waiting to be published and its delivery settled."""

    consumer: Consumer
    delivery: Delivery
    result: Result
    reply_to: str
    dead_letter: bool


@final
class ResultPublisher:
    """Publishes a worker's outcomes in batches, then settles their deliveries.

    Args:
      broker: The broker results go out on.
      signing: The key ring results are signed with, or None.
      rng: The worker's seeded source, for the jitter of retries.
      worker_id: The worker's id, for the log.
      settled: Called with how many deliveries a batch settled, once their
        acks or rejections were attempted.
    """

    def __init__(
        self,
        broker: Broker,
        *,
        signing: Keyring | None,
        rng: random.Random,
        worker_id: str,
        settled: Callable[[int], None],
    ) -> None:
        self._broker = broker
        self._signing = signing
        self._rng = rng
        self._worker_id = worker_id
        self._settled = settled
        self._send, self._outcomes = trio.open_memory_channel[Outcome](math.inf)

    def send_nowait(self, outcome: Outcome) -> None:
        """Hand ``outcome`` over to be published (never blocks)."""
        self._send.send_nowait(outcome)

    async def publish_forever(self) -> None:
        """Publish results in batches; ack their tasks once published.

        A result over the broker's ``max_payload`` is not sent: a failure of
        code ``payload_too_large`` goes in its place (see `_payload`), so one
        oversized result never holds back the batch.
        """
        while True:
            batch = [await self._outcomes.receive()]
            while len(batch) < RESULT_BATCH:
                try:
                    batch.append(self._outcomes.receive_nowait())
                except trio.WouldBlock:
                    break
            limit = self._broker.max_payload
            messages = [result_message(o.result, o.reply_to, limit, self._signing) for o in batch]
            delay = 0.05
            while True:
                try:
                    await self._broker.dispatch([m for m in messages if m is not None])
                    break
                except PayloadTooLarge as exc:
                    # The broker's limit fell below what it said (it reconnected
                    # to another server): fit the batch to it and send again.
                    # Each refusal lowers the limit, so this ends.
                    limit = lowered(limit, exc)
                    messages = [
                        result_message(o.result, o.reply_to, limit, self._signing) for o in batch
                    ]
                except BrokerError as exc:
                    logger.warning("worker %s could not publish results: %s", self._worker_id, exc)
                    await trio.sleep(delay * self._rng.uniform(0.5, 1.5))
                    delay = min(delay * 2, 5.0)
            # Keyed by position of first appearance, not id(): the order of
            # acks must not depend on memory addresses.
            by_consumer: dict[tuple[int, bool], tuple[Consumer, list[Delivery]]] = {}
            consumers: list[Consumer] = []
            for outcome, message in zip(batch, messages, strict=True):
                if outcome.consumer not in consumers:
                    consumers.append(outcome.consumer)
                # A task whose result could not be sent at all (not even as a
                # payload_too_large failure) is dead-lettered, not run again.
                dead_letter = outcome.dead_letter or message is None
                key = (consumers.index(outcome.consumer), dead_letter)
                by_consumer.setdefault(key, (outcome.consumer, []))[1].append(outcome.delivery)
            for (_, dead_letter), (consumer, deliveries) in by_consumer.items():
                try:
                    if dead_letter:
                        await consumer.reject(deliveries, requeue=False)
                    else:
                        await consumer.ack(deliveries)
                except (BrokerError, trio.ClosedResourceError) as exc:
                    # The tasks come back; their results are duplicates the
                    # engine's claim write ignores.
                    logger.warning("worker %s could not ack tasks: %s", self._worker_id, exc)
            self._settled(len(batch))
