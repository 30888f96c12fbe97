"""Tasks and results over a broker's size limit, and what goes in their place.

A broker may refuse message bodies over a size (`Broker.max_payload`: 1 MB
on a default NATS server). Such a task or result can never be sent, and
sending it again changes nothing, so neither the engine nor the worker
tries: each sends, in its place, a failed result of code
``payload_too_large`` that names the size and the limit, and sends the rest
of its batch as usual. The step fails like any other failed step, for good
(a retry would meet the same limit), and nothing waits on a message that
cannot go:

- a task whose input is too large: the engine sends the failure to its own
  results queue instead of the task, at dispatch;
- a result whose output (or error) is too large: the worker sends the
  failure instead of the result, and acks the task as usual.

Only a limit too small for even that failure (a few hundred bytes) leaves
nothing to send: the message is dropped with an error in the log.
"""

from __future__ import annotations

import logging
from typing import Final

import attrs

from .._base._keyring import Keyring
from .._brokers._base import Outgoing, PayloadTooLarge
from ._messages import Result, Task
from ._signing import sign

logger = logging.getLogger("trio_durable")

PAYLOAD_TOO_LARGE: Final = "payload_too_large"
"""The error code of a step whose input or output is over the broker's limit."""

_QUOTED: Final = 200
"""Characters of a too large failure's own message kept in its stand-in."""


def lowered(limit: int | None, refused: PayloadTooLarge) -> int:
    """The limit to fit messages to after the broker refused one that fitted
    ``limit``: its own word, and below the size it refused. Strictly lower
    than ``limit`` each time, so fitting again and again ends."""
    bound = min(refused.limit, refused.size - 1)
    return max(0, bound if limit is None else min(limit, bound))


def task_message(
    task: Task, queue: str, limit: int | None, now: float, signing: Keyring | None = None
) -> Outgoing | None:
    """The message that sends ``task`` to ``queue``, or if it is over
    ``limit`` bytes, the failure that goes to its ``reply_to`` in its place;
    None if not even that fits.

    Args:
      task: The task, its ``reply_to`` set.
      queue: The broker queue it travels on.
      limit: The broker's `max_payload`.
      now: The time (durable) to stamp on a failure.
      signing: Signs the message (see `_signing`); its signature counts
        toward ``limit``.
    """
    body = sign(signing, "task", task.encode())
    if limit is None or len(body) <= limit:
        return Outgoing(queue=queue, body=body, priority=task.priority)
    failure = Result(
        run_id=task.run_id,
        seq=task.seq,
        attempt=task.attempt,
        step=task.step,
        workflow=task.workflow,
        status="failed",
        error=(
            f"the task of step {task.step!r} is {len(body)} bytes, over the broker's"
            f" max_payload of {limit} bytes: its input is too large to send"
        ),
        code=PAYLOAD_TOO_LARGE,
        details={"size": len(body), "limit": limit, "of": "input"},
        retryable=False,
        started_at=now,
        finished_at=now,
        queue=task.queue,
        kind=task.kind,
        execution=task.execution,
    )
    logger.warning(
        "step %r of run %s (seq %d): %s; it fails with code %s",
        task.step,
        task.run_id,
        task.seq,
        failure.error,
        PAYLOAD_TOO_LARGE,
    )
    return _stand_in(failure, task.reply_to, limit, signing)


def result_message(
    result: Result, reply_to: str, limit: int | None, signing: Keyring | None = None
) -> Outgoing | None:
    """The message that sends ``result`` to ``reply_to``, signed with
    ``signing`` if given, or if it is over ``limit`` bytes, the failure that
    goes in its place; None if not even that fits."""
    body = sign(signing, "result", result.encode())
    if limit is None or len(body) <= limit:
        return Outgoing(queue=reply_to, body=body)
    if result.status == "completed":
        what = "its output is too large to send back"
    else:
        quoted = (result.error or "")[:_QUOTED]
        what = f"its error is too large to send back (it began: {quoted!r})"
    failure = attrs.evolve(
        result,
        status="failed",
        output=None,
        error=(
            f"the result of step {result.step!r} is {len(body)} bytes, over the broker's"
            f" max_payload of {limit} bytes: {what}"
        ),
        code=PAYLOAD_TOO_LARGE,
        details={"size": len(body), "limit": limit, "of": "result"},
        retryable=False,
    )
    logger.warning(
        "step %r of run %s (seq %d): %s; it fails with code %s",
        result.step,
        result.run_id,
        result.seq,
        failure.error,
        PAYLOAD_TOO_LARGE,
    )
    return _stand_in(failure, reply_to, limit, signing)


def _stand_in(failure: Result, queue: str, limit: int, signing: Keyring | None) -> Outgoing | None:
    body = sign(signing, "result", failure.encode())
    if len(body) <= limit:
        return Outgoing(queue=queue, body=body)
    logger.error(
        "step %r of run %s (seq %d): not even its payload_too_large failure (%d bytes) fits"
        " the broker's max_payload of %d bytes; nothing is sent for it",
        failure.step,
        failure.run_id,
        failure.seq,
        len(body),
        limit,
    )
    return None
