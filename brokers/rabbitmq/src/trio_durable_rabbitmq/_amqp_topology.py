"""Names, queue arguments and small helpers that both halves of the
RabbitMQ broker (`_amqp_publish`, `_amqp_consume`) and the broker itself
share (see ``docs/rabbitmq.md``)."""

from __future__ import annotations

import re
from typing import Any, Final

import aio_pika
import aiormq
from aio_pika.abc import AbstractIncomingMessage

from trio_durable.brokers import BrokerUnavailable, UsageError

from ._amqp_url import DEFAULT_DELIVERY_LIMIT, QueueType

MAX_PRIORITY: Final = 9
DELIVERIES_HEADER: Final = "x-td-deliveries"
"""Counts the deliveries of a message published again after a redelivery."""
DELIVERY_COUNT_HEADER: Final = "x-delivery-count"
"""Where a quorum queue counts the earlier deliveries of a message it returns."""
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


def queue_arguments(
    queue: str,
    queue_type: QueueType = "classic",
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
) -> dict[str, Any]:
    """The arguments every queue of this adapter is declared with: a classic
    queue with priorities, or a quorum queue (RabbitMQ 3 refuses
    ``x-max-priority`` on those) that dead-letters a message after
    ``delivery_limit`` deliveries; either with its dead-letter queue."""
    dead_letters = {
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue + DEAD_LETTER_SUFFIX,
    }
    if queue_type == "quorum":
        # x-delivery-limit counts returns: a message delivered that many
        # times and once more is dead-lettered.
        return {"x-queue-type": "quorum", "x-delivery-limit": delivery_limit - 1, **dead_letters}
    return {"x-max-priority": MAX_PRIORITY, **dead_letters}


def dead_letter_arguments(queue_type: QueueType = "classic") -> dict[str, Any]:
    """The arguments of a ``<queue>.dead`` queue (of the same type as its queue)."""
    return {"x-queue-type": "quorum"} if queue_type == "quorum" else {}


def type_mismatch(
    queue: str, queue_type: QueueType, refusal: BaseException
) -> BrokerUnavailable | None:
    """The error to raise if ``refusal`` (of a ``queue.declare`` with
    ``queue_type``) says the queue exists as a queue of the other type,
    else None. A queue's type is fixed when it is made: a classic queue
    cannot be declared again as a quorum queue, nor the other way round."""
    text = str(refusal)
    # Declared quorum, a mismatch on x-max-priority means the queue is a
    # classic one of this adapter (quorum declarations never carry it).
    if "x-queue-type" not in text and not (queue_type == "quorum" and "x-max-priority" in text):
        return None
    other = "classic" if queue_type == "quorum" else "quorum (or stream)"
    return BrokerUnavailable(
        f"RabbitMQ queue {queue!r} (or its dead-letter queue) exists as a {other} queue, and"
        f" queue_type={queue_type} cannot declare it again: a queue's type cannot change."
        f" Drain and delete it (rabbitmqctl delete_queue) to have it made again as a"
        f" {queue_type} queue, or use the queue_type= it was made with. (RabbitMQ said: {text})"
    )


_SENT_AS_IS: Final = re.compile(r"[a-zA-Z0-9_.:@#,/ -]*")
"""The characters of a queue name RabbitMQ's client library sends (pamqp's
``queue-name`` domain), but ``+``, which marks an escape (`amqp_queue`)."""


def amqp_queue(queue: str) -> str:
    """The name of ``queue`` on the server: ``queue`` itself when every
    character is one the client library sends in a queue name, else each
    other character (a ``~`` of a capability queue, a ``+``, a letter
    outside ASCII) written as ``+<hex code point>+``. Names sent as they are
    never hold a ``+`` and every escaped one does, so no two queues share a
    name on the server, and queues of plain names keep theirs.

    Raises:
      UsageError: ``queue`` is empty, starts with ``amq.``, or its name on
        the server is longer than RabbitMQ allows.
    """
    if not isinstance(queue, str) or not queue or queue.startswith("amq."):
        raise UsageError(
            f"{queue!r} is not a usable RabbitMQ queue name (1 to {MAX_QUEUE_NAME} bytes,"
            " not starting with 'amq.')"
        )
    if _SENT_AS_IS.fullmatch(queue):
        named = queue
    else:
        named = "".join(c if _SENT_AS_IS.fullmatch(c) else f"+{ord(c):x}+" for c in queue)
    if len(named.encode()) > MAX_QUEUE_NAME:
        raise UsageError(
            f"{queue!r} is not a usable RabbitMQ queue name: {len(named.encode())} bytes on the"
            f" server ({named!r}), more than {MAX_QUEUE_NAME}"
        )
    return named


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
    """The deliveries of ``message``, 1 on the first: counted by the adapter
    (a copy of a classic queue's redelivery) or by a quorum queue."""
    headers = message.headers or {}
    count = headers.get(DELIVERIES_HEADER)
    if isinstance(count, int) and count >= 1:
        return count
    earlier = headers.get(DELIVERY_COUNT_HEADER)
    if isinstance(earlier, int) and earlier >= 0:
        return earlier + 1
    return 1


def is_stale(message: AbstractIncomingMessage) -> bool:
    """Whether the channel that delivered ``message`` has closed: the server
    gave it back to the queue then, and acking it is neither possible nor
    needed."""
    try:
        return bool(message.channel.is_closed)
    except RuntimeError:  # aiormq's ChannelInvalidStateError
        return True
