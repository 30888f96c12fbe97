"""The consuming half of the NATS broker: a durable pull consumer per queue.

`Puller` (on the asyncio loop) sends pull requests for as many messages as
its consumer has room for, each a batch the server fills as messages come
(``{"batch": room, "expires": ...}``), and hands what arrives to the Trio
side through an `Inbox`. `NatsConsumer` (on the Trio side) takes them in
batches and acks, naks or terminates them in one crossing per batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol, TypeVar, final

import nats.errors
import trio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from trio_durable.brokers import (
    Bridge,
    BrokerUnavailable,
    Delivery,
    Inbox,
    OwnedTasks,
)

from ._nats_publish import Backoff, BatchPublisher
from ._nats_setup import ensure_consumer
from ._nats_url import DEAD_SUBJECT, NatsOptions, stream_and_subject, token

logger = logging.getLogger("trio_durable.brokers.nats")

T = TypeVar("T")

PULL_EXPIRES: Final = 5.0
"""How long (seconds) one pull request waits on the server for messages."""

PULL_GRACE: Final = 2.0
"""A pull request that neither delivered nor expired this long after its
expiry was lost (the server restarted): ask again."""


class Call(Protocol):
    """`NatsBroker`'s crossing: runs ``fn`` on the loop, the client's errors
    translated into `BrokerUnavailable`."""

    def __call__(self, fn: Callable[[], Awaitable[T]], what: str) -> Awaitable[T]: ...


# -- The asyncio side -----------------------------------------------------------------------


_V1_TOKENS: Final = 9
"""Tokens of a JetStream ack subject without a domain (the 2.9 form):
``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``."""


def num_delivered(msg: Msg) -> int:
    """JetStream's delivery count of ``msg``, read from its ack subject
    without building all of nats-py's ``Msg.metadata`` (which parses a
    timestamp into a datetime for each message)."""
    tokens = msg.reply.split(".")
    try:
        if len(tokens) == _V1_TOKENS:
            return int(tokens[4])
        return int(tokens[Msg.Ack.NumDelivered])
    except (IndexError, ValueError):
        return msg.metadata.num_delivered


def _status(msg: Msg) -> str | None:
    headers = msg.headers
    if not headers:
        return None
    return headers.get("Status")


@final
class Puller:
    """One consumer's pull requests and deliveries, on the asyncio loop.

    It asks the server for at most as many messages as the consumer has room
    for (``prefetch`` minus those it holds unacked minus those already asked
    for), so the prefetch bounds what a consumer holds whatever the durable
    consumer's other subscribers do.
    """

    def __init__(
        self,
        nc: NatsClient,
        stream: str,
        consumer: str,
        prefetch: int,
        inbox: Inbox[Msg],
        tasks: OwnedTasks,
        ensure: Callable[[], Awaitable[None]],
    ) -> None:
        self._nc = nc
        self._tasks = tasks
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        # "No responders" to the last pull: the consumer has no leader (an
        # election), or is gone (the server deleted it after its inactive
        # threshold while this process was cut off). So the next pull waits
        # a backoff instead of going at once, which would loop as fast as
        # the round trip, and the consumer is created again if it is gone.
        self._refused = False
        self._ensure = ensure
        self._backoff = Backoff()
        self._prefetch = prefetch
        self._inbox = inbox
        self._deliver = nc.new_inbox()
        self._held = 0
        self._requested = 0
        self._closing = False
        self._wake = asyncio.Event()
        self._last_activity = 0.0
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None
        self.requests = 0
        """Pull requests sent (each asks for a batch)."""

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._deliver, cb=self._on_message)
        self._task = self._tasks.start(
            self._pull_forever(), name=f"trio_durable nats pull {self._next_subject}"
        )

    async def _on_message(self, msg: Msg) -> None:
        self._last_activity = asyncio.get_running_loop().time()
        status = _status(msg)
        if status == "503":
            self._refused = True
            self._requested = 0
            self._wake.set()
            return
        self._backoff.reset()
        if status is not None:
            if status != "100":
                # A pull request ended (408 expired, 409 and others): what it
                # still owed will not come. Without the count, assume none
                # of the requests is alive; extras are given back below.
                pending = (msg.headers or {}).get("Nats-Pending-Messages")
                if pending is not None and pending.isdigit():
                    self._requested = max(0, self._requested - int(pending))
                else:
                    self._requested = 0
                if status not in ("404", "408"):
                    logger.debug("pull request ended: %s %s", status, (msg.headers or {}))
            self._wake.set()
            return
        self._requested = max(0, self._requested - 1)
        if self._closing or self._held >= self._prefetch:
            # Closing, or more than asked for (a request thought lost came
            # back): deliverable again at once.
            await msg.nak()
            return
        self._held += 1
        self._inbox.put(msg)

    async def _pull_forever(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._closing:
                if self._refused:
                    self._refused = False
                    await asyncio.sleep(self._backoff.next())
                    try:
                        await self._ensure()
                    except nats.errors.Error as exc:
                        # No leader to ask either: pull again after a backoff.
                        logger.debug("could not recreate %s: %r", self._next_subject, exc)
                    continue
                room = self._prefetch - self._held - self._requested
                if room > 0 and (self._requested == 0 or room >= max(1, self._prefetch // 4)):
                    request = {"batch": room, "expires": int(PULL_EXPIRES * 1e9)}
                    await self._nc.publish(
                        self._next_subject, json.dumps(request).encode(), reply=self._deliver
                    )
                    self.requests += 1
                    self._requested += room
                    self._last_activity = loop.time()
                # Not asyncio.wait_for: on 3.11 it swallows a cancellation
                # that arrives as the event is set, and stop() would hang.
                try:
                    async with asyncio.timeout(PULL_EXPIRES + PULL_GRACE):
                        await self._wake.wait()
                except TimeoutError:
                    if loop.time() - self._last_activity >= PULL_EXPIRES + PULL_GRACE:
                        # Neither messages nor the expiry notice came: the
                        # request died with a connection or a server.
                        self._requested = 0
                self._wake.clear()
        except nats.errors.Error as exc:
            failure = BrokerUnavailable(f"NATS consumer stopped: {exc!r}")
            failure.__cause__ = exc
            self._inbox.fail(failure)

    def release(self, count: int) -> None:
        """``count`` held messages were acked or given back."""
        self._held = max(0, self._held - count)
        self._wake.set()

    async def stop(self) -> None:
        """Stop asking; every message that arrives afterwards is given back."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        if self._sub is not None and not self._nc.is_closed:
            # UNSUB, then a round trip: whatever the server sent before it
            # has reached _on_message (and was given back) when this returns.
            try:
                await self._sub.drain()
            except nats.errors.Error:
                await self._sub.unsubscribe()


async def _settle(
    nc: NatsClient,
    publisher: BatchPublisher,
    puller: Puller,
    msgs: Sequence[Msg],
    how: str,
    dead_letter: tuple[str, str] | None = None,
    limit: float = 10.0,
) -> None:
    """Ack, nak or term ``msgs`` (on the loop): one crossing and one flush
    for the batch, since nats-py writes every publish queued before its
    flusher runs at once."""
    try:
        if how == "term" and dead_letter is not None:
            subject, queue = dead_letter
            # The copies first, acknowledged: once termed, the original is gone.
            outcomes = await publisher.publish(
                [
                    (
                        subject,
                        msg.data,
                        {
                            "Trio-Durable-Queue": queue,
                            "Trio-Durable-Deliveries": str(num_delivered(msg)),
                        },
                    )
                    for msg in msgs
                ],
                limit,
            )
            failure = next((outcome for outcome in outcomes if outcome is not None), None)
            if failure is not None:
                raise failure
        for msg in msgs:
            if how == "ack":
                await msg.ack()
            elif how == "nak":
                await msg.nak()
            else:
                await msg.term()
    finally:
        puller.release(len(msgs))
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError


# -- The Trio side -----------------------------------------------------------------------------


@final
class NatsConsumer:
    """Receives one queue's messages through a durable pull consumer; made
    by `NatsBroker.open_consumer`.

    ``Delivery.deliveries`` is JetStream's delivery count; messages held
    unacked when the consumer closes are given back (nak) at once.
    """

    def __init__(
        self,
        call: Call,
        nc: NatsClient,
        publisher: BatchPublisher,
        queue: str,
        puller: Puller,
        inbox: Inbox[Msg],
        options: NatsOptions,
    ) -> None:
        self._call = call
        self._nc = nc
        self._publisher = publisher
        self._queue = queue
        self._puller = puller
        self.puller = puller
        """Its pull requests (read for `NatsBroker.statistics`)."""
        self._inbox = inbox
        self._options = options
        # Keyed by the ack subject, unique per delivery; insertion-ordered.
        self._unacked: dict[str, Msg] = {}
        self._closed = False

    async def receive(self, max_items: int) -> list[Delivery]:
        """Wait for at least one message and return up to ``max_items``."""
        if self._closed:
            raise trio.ClosedResourceError("the consumer is closed")
        msgs = await self._inbox.get_batch(max(1, max_items))
        deliveries: list[Delivery] = []
        for msg in msgs:
            self._unacked[msg.reply] = msg
            deliveries.append(Delivery(body=msg.data, deliveries=num_delivered(msg), tag=msg))
        return deliveries

    def _take(self, deliveries: Sequence[Delivery]) -> list[Msg]:
        taken: list[Msg] = []
        for delivery in deliveries:
            msg = delivery.tag
            if isinstance(msg, Msg) and self._unacked.pop(msg.reply, None) is not None:
                taken.append(msg)
        return taken

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge messages: they are never delivered again."""
        msgs = self._take(deliveries)
        if msgs:
            await self._settle(msgs, "ack")

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give messages back: delivered again at once if ``requeue`` (nak),
        else terminated, after a copy went to the dead-letter stream (unless
        ``?dead_letter=off``)."""
        msgs = self._take(deliveries)
        if msgs:
            await self._settle(msgs, "nak" if requeue else "term")

    async def _settle(self, msgs: list[Msg], how: str) -> None:
        dead_letter = None
        if how == "term" and self._options.dead_letter:
            dead_letter = (f"{DEAD_SUBJECT}.{token(self._queue)}", self._queue)
        nc, publisher, puller = self._nc, self._publisher, self._puller
        timeout = self._options.timeout
        # Finished even if the caller is cancelled (a worker closing as it
        # acks the tasks whose results it published), within the timeout:
        # the messages left `_unacked` already, so a settle cut short would
        # leave them pending on the server until ack_wait and a pull, and
        # the server does not delete a consumer for its inactivity while it
        # holds a pending message. One that did not finish is held again,
        # given back on close.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout) as scope:
            try:
                await self._call(
                    lambda: _settle(nc, publisher, puller, msgs, how, dead_letter, timeout),
                    f"{how} {len(msgs)} message(s) of {self._queue!r}",
                )
            except BaseException:
                self._hold_again(msgs)
                raise
        if scope.cancelled_caught:
            raise BrokerUnavailable(
                f"NATS: could not {how} {len(msgs)} message(s) of {self._queue!r}"
                f" within {timeout} s"
            )

    def _hold_again(self, msgs: Sequence[Msg]) -> None:
        if not self._closed:
            for msg in msgs:
                self._unacked.setdefault(msg.reply, msg)

    async def _close(self) -> None:
        self._closed = True
        await self._call(self._puller.stop, f"close the consumer of {self._queue!r}")
        leftovers = [*self._unacked.values(), *self._inbox.drain_nowait()]
        self._unacked.clear()
        if leftovers:
            # Given back now rather than after ack_wait.
            nc, publisher, puller = self._nc, self._publisher, self._puller
            await self._call(
                lambda: _settle(nc, publisher, puller, leftovers, "nak"),
                f"give back {len(leftovers)} message(s) of {self._queue!r}",
            )


@asynccontextmanager
async def open_nats_consumer(
    call: Call,
    bridge: Bridge,
    nc: NatsClient,
    js: JetStreamContext,
    publisher: BatchPublisher,
    tasks: OwnedTasks,
    options: NatsOptions,
    queue: str,
    prefetch: int,
) -> AsyncIterator[NatsConsumer]:
    """What `NatsBroker.open_consumer` yields: ``queue``'s durable consumer
    (created if need be), pulled with at most ``prefetch`` messages held
    unacked, and given back on exit."""
    stream, subject = stream_and_subject(queue)
    name = token(queue)
    inbox: Inbox[Msg] = bridge.inbox()

    async def ensure() -> None:
        await ensure_consumer(js, stream, subject, name, options)

    puller = Puller(nc, stream, name, prefetch, inbox, tasks, ensure)

    async def start() -> None:
        await ensure()
        await puller.start()

    await call(start, f"open a consumer of {queue!r}")
    consumer = NatsConsumer(call, nc, publisher, queue, puller, inbox, options)
    try:
        yield consumer
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + options.timeout
            try:
                await consumer._close()
            except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                # Its messages come back after ack_wait instead.
                logger.warning("closing the consumer of %r: %s", queue, exc)
