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

Every call into nats-py goes through `Bridge.run`, one crossing per batch
(publishes in `_nats_publish`, pulls and acks in `_nats_consume`);
deliveries come back through an `Inbox`. This module holds the broker
itself: connecting, dispatch, consumers, and worker descriptors. nats-py
and its errors stay inside the adapter: what leaves it is
`BrokerUnavailable`, with the cause chained.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, final
from urllib.parse import urlsplit

import attrs
import trio

from trio_durable.brokers import (
    Bridge,
    BridgeMode,
    BridgeStatistics,
    BrokerUnavailable,
    Clock,
    Outbox,
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
    from nats.js import JetStreamContext
    from nats.js.kv import KeyValue
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("the NATS broker needs nats-py: pip install trio-durable-nats") from exc

# After nats-py, whose absence the lines above name.
from ._nats_consume import NatsConsumer, Puller, open_nats_consumer
from ._nats_publish import (
    CLIENT_ERRORS,
    NO_RESPONDERS,
    Backoff,
    BatchPublisher,
    Item,
    Publishing,
)
from ._nats_setup import queue_backlog, read_descriptors, set_up

logger = logging.getLogger("trio_durable.brokers.nats")

T = TypeVar("T")

PURGE_MARKER_TTL: Final = 60
"""Seconds a withdrawn worker's purge marker stays in the bucket."""

HEADER_ROOM: Final = 1024
"""Bytes of the server's ``max_payload`` kept for the headers this adapter
adds to a body it sends again (a dead-letter copy), so that any body a
dispatch accepted can also be dead-lettered: the server counts headers and
body together."""


@final
@attrs.define(frozen=True, kw_only=True)
class NatsStatistics:
    """What a `NatsBroker` did so far, from `NatsBroker.statistics`.

    Attributes:
      bridge: Its bridge's crossings (see `trio_durable.brokers.BridgeStatistics`).
      publish_batches: Batches of JetStream publishes (each one crossing and
        one flush of the connection, its acknowledgements awaited together).
      published: Messages those batches carried.
      pull_requests: Pull requests its consumers sent (each asks for a batch).
    """

    bridge: BridgeStatistics
    publish_batches: int
    published: int
    pull_requests: int


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
        publisher: BatchPublisher,
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
        self._publisher = publisher
        self._outbox: Outbox[Item] = Outbox(
            Publishing(bridge, publisher, options.timeout), first=(nats.errors.MaxPayloadError,)
        )
        self._pullers: list[Puller] = []
        # Announcement expiries are compared across processes, so they are
        # durable times: the wall clock read once, then Trio's clock.
        self._clock = Clock()

    @property
    def durable(self) -> bool:
        """True: tasks are JetStream messages in a stream with file storage
        on the NATS server, which keeps them when an engine's or a worker's
        process ends (see `trio_durable.brokers.Broker.durable`)."""
        return True

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

    def statistics(self) -> NatsStatistics:
        """What this broker did so far: crossings, publish batches, pull
        requests (see `NatsStatistics`)."""
        return NatsStatistics(
            bridge=self._bridge.statistics(),
            publish_batches=self._publisher.batches,
            published=self._publisher.published,
            pull_requests=sum(puller.requests for puller in self._pullers),
        )

    async def _call(self, fn: Callable[[], Awaitable[T]], what: str) -> T:
        """One crossing to the asyncio loop, the client's errors translated."""
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        try:
            return await self._bridge.run(fn)
        except CLIENT_ERRORS as exc:
            reason = scrub(repr(exc), self.options.server, user_is_secret=True)
            raise BrokerUnavailable(f"NATS: could not {what}: {reason}") from exc

    async def _call_through_election(self, fn: Callable[[], Awaitable[T]], what: str) -> T:
        """`_call`, again after a backoff while the answer is "no
        responders" (a stream whose leader is not elected yet: just created,
        or its leader died), until the timeout."""
        deadline = trio.current_time() + self.options.timeout
        backoff = Backoff()
        while True:
            try:
                return await self._call(fn, what)
            except BrokerUnavailable as exc:
                wait = backoff.next()
                if (
                    not isinstance(exc.__cause__, NO_RESPONDERS)
                    or trio.current_time() + wait >= deadline
                ):
                    raise
            await trio.sleep(wait)

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
        job = await self._outbox.publish(
            [(stream_and_subject(m.queue)[1], m.body, None) for m in messages]
        )
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

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[NatsConsumer]:
        """Consume ``queue`` through its durable consumer (created if need
        be), holding at most ``prefetch`` messages unacked.

        Raises:
          BrokerUnavailable: The consumer could not be created or subscribed.
        """
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be a positive integer, not {prefetch!r}")
        async with open_nats_consumer(
            self._call,
            self._bridge,
            self._nc,
            self._js,
            self._publisher,
            self._tasks,
            self.options,
            queue,
            prefetch,
        ) as consumer:
            self._pullers.append(consumer.puller)
            try:
                yield consumer
            finally:
                self._pullers.remove(consumer.puller)

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
        await self._call_through_election(
            lambda: self._js.publish(subject, value, timeout=timeout, msg_ttl=seconds),
            "announce a worker",
        )

    async def withdraw(self, instance_id: str) -> None:
        """Purge the worker's key (a no-op for an unknown worker)."""
        key = token(instance_id)
        await self._call_through_election(
            lambda: self._kv.purge(key, msg_ttl=PURGE_MARKER_TTL), "withdraw a worker"
        )

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        """The descriptors of live workers (consuming ``group``, if given),
        ordered by instance id.

        Raises:
          BrokerUnavailable: The bucket could not be read.
        """
        values = await self._call_through_election(
            lambda: read_descriptors(self._js, self._kv), "read worker announcements"
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

    async def ping(self) -> None:
        """One round trip to the NATS server: a PING answered by its PONG
        (nats-py's ``flush``), within the URL's ``timeout``.

        Raises:
          BrokerUnavailable: The connection is down (nats-py is
            reconnecting), or the server did not answer in time.
        """
        if not self._nc.is_connected:
            # A PING now would wait in nats-py's buffer for the connection
            # to come back: the answer is that the server is away.
            raise BrokerUnavailable(f"NATS: not connected to {self.options.shown}; reconnecting")
        timeout = self.options.timeout

        async def round_trip() -> None:
            await self._nc.flush(timeout=timeout)  # type: ignore[arg-type]

        await self._call(round_trip, "reach the server")

    async def backlog(self, queue: str) -> int:
        """How many of ``queue``'s messages wait to be delivered (see
        `trio_durable.brokers.SupportsBacklog`): its durable consumer's
        pending count (``num_pending``, from consumer info), or before
        anyone consumed it, the messages its subject holds. A message given
        back with requeue counts again once the server redelivers it.

        Raises:
          BrokerUnavailable: The server did not answer.
        """
        return await self._call_through_election(
            lambda: queue_backlog(self._js, queue), f"read the backlog of {queue!r}"
        )

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
        # per reconnect_wait is noise once the outage was logged. A failed
        # first connect raises `BrokerUnavailable` saying the same (this
        # callback may run after it was reported, as the last line printed).
        quiet = nc.is_reconnecting or not nc.is_connected
        level = logging.DEBUG if quiet else logging.WARNING
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
        except CLIENT_ERRORS as exc:
            reason = scrub(repr(exc), options.server, user_is_secret=True)
            raise BrokerUnavailable(f"cannot connect to NATS at {options.shown}: {reason}") from exc
        try:
            try:
                kv = await bridge.run(lambda: set_up(js, options))
            except CLIENT_ERRORS as exc:
                reason = scrub(repr(exc), options.server, user_is_secret=True)
                raise BrokerUnavailable(
                    f"NATS at {options.shown} refused the streams or the bucket: {reason}"
                ) from exc
            publisher = BatchPublisher(nc)
            try:
                await bridge.run(publisher.start)
            except CLIENT_ERRORS as exc:
                reason = scrub(repr(exc), options.server, user_is_secret=True)
                raise BrokerUnavailable(
                    f"cannot subscribe on NATS at {options.shown}: {reason}"
                ) from exc
            broker = NatsBroker(options, bridge, nc, js, kv, tasks, publisher)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker._check_sync_interval)
                nursery.start_soon(broker._outbox.run)
                yield broker
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + options.timeout
                try:
                    await bridge.run(lambda: _shut_down(nc, tasks))
                except (*CLIENT_ERRORS, trio.ClosedResourceError) as exc:
                    logger.debug("closing the NATS connection: %r", exc)
