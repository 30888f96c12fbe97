"""The NATS broker: JetStream streams, pull consumers and a key-value bucket,
through nats-py behind the asyncio `Bridge`.

Layout on the server (created idempotently when a broker opens; the names
and the URL options are in `trio_durable_nats._nats_url`; see
``docs/nats.md``):

- stream ``TRIO_DURABLE_TASKS`` (subjects ``trio_durable.task.>``) and stream
  ``TRIO_DURABLE_RESULTS`` (``trio_durable.result.>``): file storage,
  work-queue retention, so a message is gone once acked;
- one durable pull consumer per queue, named by the queue's token (`token`),
  filtered on ``trio_durable.task.<token>`` (or ``.result.``): explicit acks,
  ``ack_wait`` and ``max_deliver`` from the URL, no server-side limit on
  unacked messages (each `NatsConsumer` keeps its own prefetch);
- stream ``TRIO_DURABLE_DEAD`` (``trio_durable.dead.<token>``, limits
  retention, kept 7 days): a copy of every message rejected without requeue;
- key-value bucket ``TRIO_DURABLE_WORKERS``: one key per worker, written with
  a per-message TTL and its expiry time in the value.

Every call into nats-py goes through `Bridge.run`, one crossing per batch;
deliveries come back through an `Inbox`. nats-py and its errors stay inside
this module: what leaves it is `BrokerUnavailable`, with the cause chained.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar, final
from urllib.parse import urlsplit

import attrs
import trio

from trio_durable.brokers import (
    Bridge,
    BridgeMode,
    BrokerUnavailable,
    Clock,
    Delivery,
    Inbox,
    Outgoing,
    OwnedTasks,
    PayloadTooLarge,
    WorkerDescriptor,
    check_payload_sizes,
    descriptor_from_json,
    descriptor_to_json,
    mask_url,
    open_bridge,
    scrub,
)

from ._nats_url import (
    DEAD_SUBJECT,
    WORKERS_BUCKET,
    NatsOptions,
    parse_nats_url,
    stream_and_subject,
    token,
)

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext
    from nats.js.kv import KeyValue
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("the NATS broker needs nats-py: pip install trio-durable-nats") from exc

# After nats-py, whose absence the lines above name.
from ._nats_setup import ensure_consumer, read_descriptors, set_up

logger = logging.getLogger("trio_durable.brokers.nats")

T = TypeVar("T")

PULL_EXPIRES: Final = 5.0
"""How long (seconds) one pull request waits on the server for messages."""

PULL_GRACE: Final = 2.0
"""A pull request that neither delivered nor expired this long after its
expiry was lost (the server restarted): ask again."""

PURGE_MARKER_TTL: Final = 60
"""Seconds a withdrawn worker's purge marker stays in the bucket."""

HEADER_ROOM: Final = 1024
"""Bytes of the server's ``max_payload`` kept for the headers this adapter
adds to a body it sends again (a dead-letter copy), so that any body a
dispatch accepted can also be dead-lettered: the server counts headers and
body together."""

# -- The asyncio side -----------------------------------------------------------------------
#
# Everything from here to the Trio classes runs on the bridge's asyncio loop.


def _status(msg: Msg) -> str | None:
    headers = msg.headers
    if not headers:
        return None
    return headers.get("Status")


@final
class _Puller:
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
    ) -> None:
        self._nc = nc
        self._tasks = tasks
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
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

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._deliver, cb=self._on_message)
        self._task = self._tasks.start(
            self._pull_forever(), name=f"trio_durable nats pull {self._next_subject}"
        )

    async def _on_message(self, msg: Msg) -> None:
        self._last_activity = asyncio.get_running_loop().time()
        status = _status(msg)
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
                room = self._prefetch - self._held - self._requested
                if room > 0 and (self._requested == 0 or room >= max(1, self._prefetch // 4)):
                    request = {"batch": room, "expires": int(PULL_EXPIRES * 1e9)}
                    await self._nc.publish(
                        self._next_subject, json.dumps(request).encode(), reply=self._deliver
                    )
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
    js: JetStreamContext,
    puller: _Puller,
    msgs: Sequence[Msg],
    how: str,
    dead_letter: tuple[str, str] | None = None,
) -> None:
    """Ack, nak or term ``msgs``: one crossing for the batch."""
    try:
        if how == "term" and dead_letter is not None:
            subject, queue = dead_letter
            # The copy first: once termed, the original is gone.
            await asyncio.gather(
                *(
                    js.publish(
                        subject,
                        msg.data,
                        headers={
                            "Trio-Durable-Queue": queue,
                            "Trio-Durable-Deliveries": str(msg.metadata.num_delivered),
                        },
                    )
                    for msg in msgs
                )
            )
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


async def _publish_each(
    js: JetStreamContext, items: Sequence[tuple[str, bytes]], limit: float
) -> list[BaseException | None]:
    """Publish each item and wait for every acknowledgement (all of them,
    even when one fails, so none is left running); each one's failure."""
    outcomes = await asyncio.gather(
        *(js.publish(subject, body, timeout=limit) for subject, body in items),
        return_exceptions=True,
    )
    return [outcome if isinstance(outcome, BaseException) else None for outcome in outcomes]


async def _http_get_json(url: str, limit: float) -> Any:
    """GET a JSON document over plain HTTP/1.0 with asyncio streams (so it is
    cancellable with the bridge call, unlike a blocking client in a thread)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    async with asyncio.timeout(limit):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or head.split()[1] != b"200":
        raise OSError(f"GET {mask_url(url)}: {head.splitlines()[0]!r}")
    return json.loads(body)


# -- The Trio side -----------------------------------------------------------------------------


@attrs.define(eq=False)
class _Dispatch:
    """One `NatsBroker.dispatch` call waiting for the publisher."""

    items: list[tuple[str, bytes]]
    done: trio.Event = attrs.field(factory=trio.Event)
    error: BaseException | None = None
    failed_at: int | None = None


_CLIENT_ERRORS: Final = (nats.errors.Error, OSError, asyncio.TimeoutError, ValueError)


@final
class NatsConsumer:
    """Receives one queue's messages through a durable pull consumer; made
    by `NatsBroker.open_consumer`.

    ``Delivery.deliveries`` is JetStream's delivery count; messages held
    unacked when the consumer closes are given back (nak) at once.
    """

    def __init__(self, broker: NatsBroker, queue: str, puller: _Puller, inbox: Inbox[Msg]) -> None:
        self._broker = broker
        self._queue = queue
        self._puller = puller
        self._inbox = inbox
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
            deliveries.append(
                Delivery(body=msg.data, deliveries=msg.metadata.num_delivered, tag=msg)
            )
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
        broker = self._broker
        dead_letter = None
        if how == "term" and broker.options.dead_letter:
            dead_letter = (f"{DEAD_SUBJECT}.{token(self._queue)}", self._queue)
        await broker._call(
            lambda: _settle(broker._nc, broker._js, self._puller, msgs, how, dead_letter),
            f"{how} {len(msgs)} message(s) of {self._queue!r}",
        )

    async def _close(self) -> None:
        self._closed = True
        broker = self._broker
        await broker._call(self._puller.stop, f"close the consumer of {self._queue!r}")
        leftovers = [*self._unacked.values(), *self._inbox.drain_nowait()]
        self._unacked.clear()
        if leftovers:
            # Given back now rather than after ack_wait.
            await broker._call(
                lambda: _settle(broker._nc, broker._js, self._puller, leftovers, "nak"),
                f"give back {len(leftovers)} message(s) of {self._queue!r}",
            )


@final
class NatsBroker:
    """A `Broker` over NATS JetStream; made by `open_nats_broker`.

    Attributes:
      options: What its URL configured.
    """

    def __init__(
        self,
        options: NatsOptions,
        bridge: Bridge,
        nc: NatsClient,
        js: JetStreamContext,
        kv: KeyValue,
        tasks: OwnedTasks,
    ) -> None:
        self.options = options
        self._bridge = bridge
        self._nc = nc
        # Every task this broker starts on the loop (the consumers' pull
        # loops), cancelled and awaited when it closes.
        self._tasks = tasks
        self._js = js
        self._kv = kv
        self._closed = False
        self._outbox: list[_Dispatch] = []
        self._outbox_ready = trio.Event()
        # Announcement expiries are compared across processes, so they are
        # durable times: the wall clock read once, then Trio's clock.
        self._clock = Clock()

    @property
    def max_payload(self) -> int:
        """The largest message body a dispatch sends: the ``max_payload`` the
        server announced when the connection (last) opened, less
        `HEADER_ROOM`."""
        return max(1, self._nc.max_payload - HEADER_ROOM)

    @property
    def bridge_mode(self) -> BridgeMode:
        """How nats-py's loop runs: ``thread`` or ``trio-asyncio``."""
        return self._bridge.mode

    async def _call(self, fn: Callable[[], Awaitable[T]], what: str) -> T:
        """One crossing to the asyncio loop, the client's errors translated."""
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        try:
            return await self._bridge.run(fn)
        except _CLIENT_ERRORS as exc:
            reason = scrub(repr(exc), self.options.server, user_is_secret=True)
            raise BrokerUnavailable(f"NATS: could not {what}: {reason}") from exc

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Publish each message to its queue's subject and wait until
        JetStream has stored every one (file storage; see ``docs/nats.md``
        on ``sync_interval``). Priorities are ignored (not supported here).

        Raises:
          PayloadTooLarge: A body is over `max_payload`; nothing was sent
            (or, after a reconnection to a server with a lower limit, some
            may have been).
          BrokerUnavailable: Some were not acknowledged in time; some may
            have been stored.
        """
        if not messages:
            return
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        check_payload_sizes(messages, self.max_payload)
        job = _Dispatch([(stream_and_subject(m.queue)[1], m.body) for m in messages])
        self._outbox.append(job)
        self._outbox_ready.set()
        await job.done.wait()
        if isinstance(job.error, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the broker closed during the dispatch")
        if isinstance(job.error, nats.errors.MaxPayloadError):
            # The limit fell after the check (a server with a lower one).
            index = job.failed_at if job.failed_at is not None else 0
            raise PayloadTooLarge(
                messages[index].queue, len(messages[index].body), self.max_payload
            ) from job.error
        if job.error is not None:
            raise BrokerUnavailable(
                f"NATS: could not publish {len(job.items)} message(s): {job.error!r}"
            ) from job.error

    async def _publish_forever(self) -> None:
        """Publish what concurrent dispatches queued, in one crossing per
        batch: a thousand runs dispatching one task each cost a few
        crossings, not a thousand."""
        try:
            while True:
                await self._outbox_ready.wait()
                self._outbox_ready = trio.Event()
                jobs, self._outbox = self._outbox, []
                items = [item for job in jobs for item in job.items]
                timeout = self.options.timeout
                try:
                    outcomes = await self._bridge.run(
                        functools.partial(_publish_each, self._js, items, timeout)
                    )
                except _CLIENT_ERRORS as exc:
                    outcomes = [exc] * len(items)
                except BaseException:
                    self._outbox = jobs + self._outbox
                    raise
                start = 0
                for job in jobs:
                    failed = [
                        (i, e) for i, e in enumerate(outcomes[start : start + len(job.items)]) if e
                    ]
                    start += len(job.items)
                    # A refused size first: it is the caller's to act on.
                    failed.sort(key=lambda f: not isinstance(f[1], nats.errors.MaxPayloadError))
                    job.failed_at, job.error = failed[0] if failed else (None, None)
                    job.done.set()
        finally:
            for job in self._outbox:
                job.error = trio.ClosedResourceError()
                job.done.set()
            self._outbox = []

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[NatsConsumer]:
        """Consume ``queue`` through its durable consumer (created if need
        be), holding at most ``prefetch`` messages unacked.

        Raises:
          BrokerUnavailable: The consumer could not be created or subscribed.
        """
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive integer, not {prefetch!r}")
        stream, subject = stream_and_subject(queue)
        name = token(queue)
        inbox: Inbox[Msg] = self._bridge.inbox()
        puller = _Puller(self._nc, stream, name, prefetch, inbox, self._tasks)

        async def start() -> None:
            await ensure_consumer(self._js, stream, subject, name, self.options)
            await puller.start()

        await self._call(start, f"open a consumer of {queue!r}")
        consumer = NatsConsumer(self, queue, puller, inbox)
        try:
            yield consumer
        finally:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + self.options.timeout
                try:
                    await consumer._close()
                except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                    # Its messages come back after ack_wait instead.
                    logger.warning("closing the consumer of %r: %s", queue, exc)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        """Put the worker's descriptor in the bucket, with a per-message TTL
        (whole seconds, rounded up) and its expiry time in the value, which
        reads filter on: forgotten ``ttl`` seconds after this call.

        Raises:
          BrokerUnavailable: The server did not store it.
        """
        value = json.dumps(
            {"expires_at": self._clock.now() + ttl, "descriptor": descriptor_to_json(descriptor)},
            ensure_ascii=False,
        ).encode()
        subject = f"$KV.{WORKERS_BUCKET}.{token(descriptor.instance_id)}"
        seconds = max(1, math.ceil(ttl))
        timeout = self.options.timeout
        await self._call(
            lambda: self._js.publish(subject, value, timeout=timeout, msg_ttl=seconds),
            "announce a worker",
        )

    async def withdraw(self, instance_id: str) -> None:
        """Purge the worker's key (a no-op for an unknown worker)."""
        key = token(instance_id)
        await self._call(lambda: self._kv.purge(key, msg_ttl=PURGE_MARKER_TTL), "withdraw a worker")

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        """The descriptors of live workers (consuming ``group``, if given),
        ordered by instance id.

        Raises:
          BrokerUnavailable: The bucket could not be read.
        """
        timeout = self.options.timeout
        values = await self._call(
            lambda: read_descriptors(self._kv, timeout), "read worker announcements"
        )
        now = self._clock.now()
        live: dict[str, WorkerDescriptor] = {}
        for value in values:
            try:
                data = json.loads(value)
                if float(data["expires_at"]) <= now:
                    continue
                descriptor = descriptor_from_json(data["descriptor"])
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("ignoring a malformed worker announcement: %s", exc)
                continue
            if group is None or group in descriptor.groups:
                live[descriptor.instance_id] = descriptor
        return [live[key] for key in sorted(live)]

    async def worker_groups(self) -> list[str]:
        """The group routes live workers consume, sorted."""
        groups: set[str] = set()
        for descriptor in await self.worker_descriptors():
            groups.update(descriptor.groups)
        return sorted(groups)

    def quiet(self, queues: Sequence[str]) -> None:
        """None: its streams live on the server, and only a query to it
        (consumer info) would tell how many messages one holds, so
        `Engine.drain` relies on the engine's own count of what it sent."""
        return None

    async def aclose(self) -> None:
        """Stop the tasks it started and close the connection (idempotent)."""
        if self._closed:
            return
        try:
            await self._call(lambda: _shut_down(self._nc, self._tasks), "close the connection")
        except (BrokerUnavailable, trio.ClosedResourceError) as exc:
            logger.debug("closing the NATS connection: %s", exc)
        finally:
            self._closed = True

    async def _check_sync_interval(self) -> None:
        """Warn if the server acknowledges writes before fsyncing them (its
        ``sync_interval`` is not ``always``), as far as its monitoring
        endpoint tells; silent if that cannot be read."""
        if self.options.monitor is None:
            return
        url = f"{self.options.monitor}/varz"
        try:
            varz = await self._bridge.run(lambda: _http_get_json(url, self.options.timeout))
            config = varz.get("jetstream", {}).get("config", {})
        except (OSError, ValueError, AttributeError) as exc:
            logger.info(
                "could not read %s to check the server's sync_interval (%s); make sure it runs"
                " with sync_interval: always (docs/nats.md)",
                mask_url(url),
                scrub(repr(exc), url),
            )
            return
        if config.get("sync_always"):
            return
        interval = config.get("sync_interval")
        logger.warning(
            "the NATS server at %s fsyncs JetStream writes only every %s: acknowledged tasks"
            " and results can be lost in a crash. Run it with `sync_interval: always` in its"
            " jetstream block (docs/nats.md)",
            self.options.shown,
            f"{interval / 1e9:g} s" if isinstance(interval, int | float) else "interval",
        )


async def _shut_down(nc: NatsClient, tasks: OwnedTasks) -> None:
    """Stop the broker's tasks, then close the connection (on the loop)."""
    try:
        await tasks.aclose()
    finally:
        await nc.close()


async def _connect(options: NatsOptions) -> tuple[NatsClient, JetStreamContext]:
    nc = NatsClient()

    async def error_cb(exc: Exception) -> None:
        # Each failed attempt while reconnecting reports here too: one line
        # per reconnect_wait is noise once the outage was logged.
        level = logging.DEBUG if nc.is_reconnecting else logging.WARNING
        logger.log(
            level,
            "NATS connection error: %s",
            scrub(repr(exc), options.server, user_is_secret=True),
        )

    async def disconnected_cb() -> None:
        if not nc.is_closed:  # not our own close
            logger.warning("disconnected from NATS at %s; reconnecting", options.shown)

    async def reconnected_cb() -> None:
        logger.warning("reconnected to NATS at %s", options.shown)

    # nats-py retries a failed first connection forever when reconnects are
    # unlimited: bound the first one by the timeout instead.
    async with asyncio.timeout(options.timeout):
        await nc.connect(
            servers=[options.server, *options.seeds],
            name="trio-durable",
            connect_timeout=max(1, math.ceil(options.timeout / 2)),
            # Typed int, but any number of seconds works (it is slept).
            reconnect_time_wait=options.reconnect_wait,  # type: ignore[arg-type]
            max_reconnect_attempts=-1,
            error_cb=error_cb,
            disconnected_cb=disconnected_cb,
            reconnected_cb=reconnected_cb,
        )
    version = nc.connected_server_version
    if (version.major, version.minor) < (2, 11):
        logger.warning(
            "NATS server %s predates per-message TTLs (2.11): dead workers' announcements"
            " are filtered out by their expiry time but stay in the bucket",
            version,
        )
    return nc, nc.jetstream(timeout=options.timeout)


@asynccontextmanager
async def open_nats_broker(url: str) -> AsyncIterator[NatsBroker]:
    """Open a `NatsBroker` for a ``nats://`` (or ``nats+tls://``) URL and close
    it on exit: the bridge, the connection, the streams, the consumers'
    background pulls; nothing of it outlives the block.

    Raises:
      InvalidURLError: The URL is malformed or has a bad option.
      BrokerUnavailable: The server cannot be reached, or refused to create
        the streams or the bucket.
    """
    options = parse_nats_url(url)
    tasks = OwnedTasks()
    async with open_bridge(options.bridge) as bridge:
        try:
            nc, js = await bridge.run(lambda: _connect(options))
        except _CLIENT_ERRORS as exc:
            reason = scrub(repr(exc), options.server, user_is_secret=True)
            raise BrokerUnavailable(f"cannot connect to NATS at {options.shown}: {reason}") from exc
        try:
            try:
                kv = await bridge.run(lambda: set_up(js, options))
            except _CLIENT_ERRORS as exc:
                reason = scrub(repr(exc), options.server, user_is_secret=True)
                raise BrokerUnavailable(
                    f"NATS at {options.shown} refused the streams or the bucket: {reason}"
                ) from exc
            broker = NatsBroker(options, bridge, nc, js, kv, tasks)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker._check_sync_interval)
                nursery.start_soon(broker._publish_forever)
                yield broker
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + options.timeout
                try:
                    await bridge.run(lambda: _shut_down(nc, tasks))
                except (*_CLIENT_ERRORS, trio.ClosedResourceError) as exc:
                    logger.debug("closing the NATS connection: %r", exc)
