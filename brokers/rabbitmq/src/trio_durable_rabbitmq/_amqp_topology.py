"""Names, queue arguments and small helpers that both halves of the
RabbitMQ broker (`_amqp_publish`, `_amqp_consume`) and the broker itself
share (see ``docs/rabbitmq.md``)."""

from __future__ import annotations

import re
from typing import Any, Final

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage

from trio_durable.brokers import UsageError

MAX_PRIORITY: Final = 9
DELIVERIES_HEADER: Final = "x-td-deliveries"
"""Counts the deliveries of a message published again after a redelivery."""
DEAD_LETTER_SUFFIX: Final = ".dead"
WORKERS_EXCHANGE: Final = "trio_durable.workers"
"""The fanout exchange that carries worker announcements."""
CLOSE_TIMEOUT: Final = 5.0
"""Seconds a close may take before it is abandoned (shielded from cancellation)."""
MAX_QUEUE_NAME: Final = 255 - len(DEAD_LETTER_SUFFIX)
PERSISTENT: Final = 2
TRANSIENT: Final = 1

# What the client library raises when the server or the connection fails.
# aiormq's ChannelInvalidStateError (a channel or connection that closed)
# and aio-pika's "connection closed" / "no active transport" are plain
# RuntimeErrors.
CLIENT_ERRORS: Final = (
    aiormq.exceptions.AMQPError,
    aio_pika.exceptions.AMQPException,
    OSError,
    RuntimeError,
)


def queue_arguments(queue: str) -> dict[str, Any]:
    """The arguments every queue of this adapter is declared with."""
    return {
        "x-max-priority": MAX_PRIORITY,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue + DEAD_LETTER_SUFFIX,
    }


def check_queue_name(queue: str) -> None:
    if (
        not isinstance(queue, str)
        or not queue
        or len(queue.encode()) > MAX_QUEUE_NAME
        or queue.startswith("amq.")
    ):
        raise UsageError(
            f"{queue!r} is not a usable RabbitMQ queue name (1 to {MAX_QUEUE_NAME} bytes,"
            " not starting with 'amq.')"
        )


_REFUSED_SIZE: Final = re.compile(r"message size (\d+) is larger than configured max size (\d+)")


def refused_size(outcome: object, size: int) -> int | None:
    """The server's ``max_message_size`` if ``outcome`` (a publish's) is its
    refusal of a body of ``size`` bytes, else None."""
    if not isinstance(outcome, aiormq.exceptions.ChannelPreconditionFailed):
        return None
    match = _REFUSED_SIZE.search(str(outcome))
    if match is None or int(match[1]) != size:
        return None
    return int(match[2])


def deliveries(message: AbstractIncomingMessage) -> int:
    count = (message.headers or {}).get(DELIVERIES_HEADER, 1)
    return count if isinstance(count, int) and count >= 1 else 1


def is_stale(message: AbstractIncomingMessage) -> bool:
    """Whether the channel that delivered ``message`` has closed: the server
    gave it back to the queue then, and acking it is neither possible nor
    needed."""
    try:
        return bool(message.channel.is_closed)
    except RuntimeError:  # aiormq's ChannelInvalidStateError
        return True
