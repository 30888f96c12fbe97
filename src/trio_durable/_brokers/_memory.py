"""The in-process broker: queues in memory, on the Trio thread.

It keeps the at-least-once contract of real brokers: a message a consumer
took and did not ack before closing is delivered again. For tests it can be
told to make delivery worse in the ways real brokers do (`BrokerFaults`):
duplicate messages, delay them, and deliver them out of order, all drawn from
a seeded random source so a failing run can be replayed.

``memory://`` names a broker shared by everything in this process that
opens the same URL while it is open (``memory://`` and ``memory://name`` are
two different brokers); it is dropped when the last user closes it. Its one
option, ``?max_payload=N``, limits message bodies to ``N`` bytes (unlimited
by default), as a networked broker does, so code that meets such a limit
can be tested in process.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, final
from urllib.parse import parse_qsl, urlsplit

import attrs
import trio

from .._base._exceptions import InvalidURLError
from .._base._urls import mask_url
from ._base import Delivery, Outgoing, WorkerDescriptor, check_payload_sizes

MAX_PRIORITY: Final = 9


@final
@attrs.define(frozen=True, kw_only=True)
class BrokerFaults:
    """Ways to make the memory broker deliver worse, for tests.

    Attributes:
      duplicate: Probability that a dispatched message is enqueued twice.
      delay: Each message becomes visible after a delay drawn uniformly from
        ``[0, delay]`` seconds (Trio time).
      reorder: Deliver a random visible message instead of the oldest of the
        highest priority.
      seed: Seeds the random source of these choices.
    """

    duplicate: float = 0.0
    delay: float = 0.0
    reorder: bool = False
    seed: int = 0


@attrs.define(eq=False)
class _Message:
    body: bytes
    priority: int
    order: int
    visible_at: float
    deliveries: int = 0


@attrs.define(eq=False)
class _Queue:
    # Visible messages, by (-priority, order); invisible (delayed) ones wait
    # in their own heap by visible time. Both keep a take O(log n), so a
    # queue of 100,000 tasks drains in linear time.
    ready: list[tuple[int, int, _Message]] = attrs.field(factory=list)
    delayed: list[tuple[float, int, _Message]] = attrs.field(factory=list)
    changed: trio.Event = attrs.field(factory=trio.Event)
    newest_delivered: int = -1
    # Delivered to a consumer and not yet acked or rejected.
    taken: int = 0

    @property
    def held(self) -> int:
        """Messages the queue holds: waiting, delayed, or taken unsettled."""
        return len(self.ready) + len(self.delayed) + self.taken

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def push(self, message: _Message, now: float) -> None:
        if message.visible_at > now:
            heapq.heappush(self.delayed, (message.visible_at, message.order, message))
        else:
            heapq.heappush(self.ready, (-message.priority, message.order, message))


@final
class MemoryBroker:
    """A `Broker` whose queues live in this process.

    Args:
      faults: Delivery faults to inject (none by default).
      max_payload: The largest message body, in bytes, that `dispatch`
        accepts (`PayloadTooLarge` beyond it), or None for no limit.

    Attributes:
      max_payload: As given.
      durable: False: its queues live in this process and go with it (or
        when the last user of a ``memory://`` URL closes it), so an engine
        that meets a step sent on another memory broker sends it again.
      needs_heartbeat: False: what workers announce on it goes with this
        process too, so an announcement made with ``ttl=math.inf`` lasts
        until it is withdrawn, and workers announce once, with no
        heartbeat (see `Broker.needs_heartbeat`).
    """

    durable: Final = False
    needs_heartbeat: Final = False

    def __init__(
        self, faults: BrokerFaults | None = None, *, max_payload: int | None = None
    ) -> None:
        if max_payload is not None and (
            isinstance(max_payload, bool) or not isinstance(max_payload, int) or max_payload < 1
        ):
            raise ValueError(f"max_payload must be a positive integer or None, not {max_payload!r}")
        self.max_payload = max_payload
        self.faults = faults or BrokerFaults()
        self._rng = random.Random(self.faults.seed)
        self._queues: dict[str, _Queue] = {}
        self._order = itertools.count()
        self._descriptors: dict[str, tuple[WorkerDescriptor, float]] = {}
        self.dispatched = 0
        self.delivered = 0
        self.acked = 0
        # What `faults` did, for reports: messages enqueued twice, messages
        # held back, and first deliveries of a message older than one
        # delivered before it on its queue (by random picks or by delays).
        self.duplicated = 0
        self.delayed = 0
        self.reordered = 0
        # Events of `quiet` callers, with the queues each waits on.
        self._quiet_watches: list[tuple[tuple[str, ...], trio.Event]] = []

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = _Queue()
        return queue

    def depth(self, queue: str) -> int:
        """Messages waiting on ``queue`` (not counting those taken unacked)."""
        if queue not in self._queues:
            return 0
        return len(self._queues[queue].ready) + len(self._queues[queue].delayed)

    def quiet(self, queues: Sequence[str]) -> trio.Event:
        """An event set once none of ``queues`` holds a message, waiting or
        taken and not yet acked or rejected (see `Broker.quiet`)."""
        event = trio.Event()
        names = tuple(queues)
        if self._holds_none(names):
            event.set()
        else:
            self._quiet_watches = [w for w in self._quiet_watches if not w[1].is_set()]
            self._quiet_watches.append((names, event))
        return event

    def _holds_none(self, names: Sequence[str]) -> bool:
        return all(name not in self._queues or not self._queues[name].held for name in names)

    def _settled(self, name: str, count: int) -> None:
        """``count`` messages taken from ``name`` were acked or rejected."""
        self._queue(name).taken -= count
        if not self._quiet_watches:
            return
        watches = []
        for names, event in self._quiet_watches:
            if event.is_set():
                continue
            if self._holds_none(names):
                event.set()
            else:
                watches.append((names, event))
        self._quiet_watches = watches

    def _enqueue(self, name: str, message: _Message) -> None:
        queue = self._queue(name)
        queue.push(message, trio.current_time())
        queue.notify()

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        check_payload_sizes(messages, self.max_payload)
        now = trio.current_time()
        for outgoing in messages:
            copies = (
                2 if self.faults.duplicate and self._rng.random() < self.faults.duplicate else 1
            )
            self.duplicated += copies - 1
            for _ in range(copies):
                delay = self._rng.uniform(0, self.faults.delay) if self.faults.delay else 0.0
                self.delayed += delay > 0
                self._enqueue(
                    outgoing.queue,
                    _Message(
                        body=outgoing.body,
                        priority=max(0, min(MAX_PRIORITY, outgoing.priority)),
                        order=next(self._order),
                        visible_at=now + delay,
                    ),
                )
            self.dispatched += 1
        await trio.lowlevel.checkpoint()

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[MemoryConsumer]:
        consumer = MemoryConsumer(self, queue, prefetch)
        try:
            yield consumer
        finally:
            consumer._close()

    def _take(self, name: str, limit: int) -> tuple[list[_Message], float]:
        """Visible messages to deliver (up to ``limit``), and when the next
        invisible one becomes visible."""
        queue = self._queue(name)
        now = trio.current_time()
        while queue.delayed and queue.delayed[0][0] <= now:
            _, _, message = heapq.heappop(queue.delayed)
            heapq.heappush(queue.ready, (-message.priority, message.order, message))
        later = queue.delayed[0][0] if queue.delayed else math.inf
        taken: list[_Message] = []
        if self.faults.reorder:
            # Any visible message may come next: swap random ones out.
            while queue.ready and len(taken) < limit:
                index = self._rng.randrange(len(queue.ready))
                queue.ready[index], queue.ready[-1] = queue.ready[-1], queue.ready[index]
                taken.append(queue.ready.pop()[2])
            heapq.heapify(queue.ready)
        else:
            while queue.ready and len(taken) < limit:
                taken.append(heapq.heappop(queue.ready)[2])
        queue.taken += len(taken)
        for message in taken:
            if message.deliveries == 0:
                if message.order < queue.newest_delivered:
                    self.reordered += 1
                queue.newest_delivered = max(queue.newest_delivered, message.order)
        return taken, later

    def _requeue(self, name: str, messages: Sequence[_Message]) -> None:
        """Put taken messages back, to be delivered again."""
        if not messages:
            return
        queue = self._queue(name)
        # Back from a consumer to waiting: the queue holds as many as before.
        queue.taken -= len(messages)
        now = trio.current_time()
        for message in messages:
            message.visible_at = now
            queue.push(message, now)
        queue.notify()

    # -- descriptors ----------------------------------------------------------

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        # ttl=math.inf: kept until withdrawn (expires at infinity).
        self._descriptors[descriptor.instance_id] = (descriptor, trio.current_time() + ttl)
        await trio.lowlevel.checkpoint()

    async def withdraw(self, instance_id: str) -> None:
        self._descriptors.pop(instance_id, None)
        await trio.lowlevel.checkpoint()

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        now = trio.current_time()
        for instance_id, (_, expires) in list(self._descriptors.items()):
            if expires <= now:
                del self._descriptors[instance_id]
        await trio.lowlevel.checkpoint()
        return [
            descriptor
            for _, (descriptor, _) in sorted(self._descriptors.items())
            if group is None or group in descriptor.groups
        ]

    async def worker_groups(self) -> list[str]:
        descriptors = await self.worker_descriptors()
        return sorted({group for d in descriptors for group in d.groups})

    async def ping(self) -> None:
        """Answers at once: the broker lives in this process, reachable as
        long as the process is (see `Pingable`)."""
        await trio.lowlevel.checkpoint()

    async def backlog(self, queue: str) -> int:
        """The messages waiting on ``queue``, visible or delayed (see
        `SupportsBacklog`): its `depth`."""
        await trio.lowlevel.checkpoint()
        return self.depth(queue)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@final
class MemoryConsumer:
    """A consumer of one `MemoryBroker` queue."""

    def __init__(self, broker: MemoryBroker, queue: str, prefetch: int) -> None:
        self._broker = broker
        self._queue_name = queue
        self._prefetch = max(1, prefetch)
        self._unacked: dict[int, _Message] = {}
        self._acked_room = trio.Event()
        self._closed = False

    @property
    def held(self) -> int:
        """Messages this consumer received and has not acked or rejected."""
        return len(self._unacked)

    async def receive(self, max_items: int) -> list[Delivery]:
        # Cancelled only before anything is taken: messages taken by a receive
        # that then raised Cancelled would sit unacked, holding prefetch room,
        # until the consumer closes.
        await trio.lowlevel.checkpoint_if_cancelled()
        broker = self._broker
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the consumer is closed")
            room = min(max_items, self._prefetch - len(self._unacked))
            if room <= 0:
                await self._acked_room.wait()
                continue
            queue = broker._queue(self._queue_name)
            changed = queue.changed
            taken, later = broker._take(self._queue_name, room)
            if taken:
                deliveries = []
                for message in taken:
                    message.deliveries += 1
                    self._unacked[message.order] = message
                    deliveries.append(
                        Delivery(
                            body=message.body, deliveries=message.deliveries, tag=message.order
                        )
                    )
                broker.delivered += len(taken)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return deliveries
            with trio.move_on_at(later):
                await changed.wait()

    def _settle(self, deliveries: Sequence[Delivery]) -> list[_Message]:
        settled = [self._unacked.pop(d.tag) for d in deliveries if d.tag in self._unacked]
        if settled:
            self._acked_room.set()
            self._acked_room = trio.Event()
        return settled

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        settled = self._settle(deliveries)
        self._broker.acked += len(settled)
        self._broker._settled(self._queue_name, len(settled))
        await trio.lowlevel.checkpoint()

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        settled = self._settle(deliveries)
        if requeue:
            self._broker._requeue(self._queue_name, settled)
        else:
            self._broker._settled(self._queue_name, len(settled))
        await trio.lowlevel.checkpoint()

    def _close(self) -> None:
        # What this consumer took and never acked goes back to the queue:
        # the at-least-once half of the contract.
        self._closed = True
        pending = sorted(self._unacked.values(), key=lambda m: m.order)
        self._unacked.clear()
        self._broker._requeue(self._queue_name, pending)
        # Wake a receive still waiting, so it raises ClosedResourceError
        # rather than waiting for the next message.
        self._broker._queue(self._queue_name).notify()
        self._acked_room.set()


_shared: dict[str, tuple[MemoryBroker, int]] = {}


@asynccontextmanager
async def open_memory_broker(url: str = "memory://") -> AsyncIterator[MemoryBroker]:
    """Open the process-wide memory broker that ``url`` names.

    Args:
      url: ``memory://`` or ``memory://name``, optionally with
        ``?max_payload=N`` (bytes; see `MemoryBroker`).

    Raises:
      InvalidURLError: The URL has a path, a fragment, a port, user info or
        an unknown or bad option, or asks for another ``max_payload`` than
        the broker of that name, already open, has.
    """
    shown = mask_url(url)
    usage = "'memory://' or 'memory://name', optionally with '?max_payload=N'"
    try:
        parts = urlsplit(url)
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURLError(f"a memory broker URL is {usage}, not {shown!r}") from None
    if (
        parts.scheme != "memory"
        or parts.path not in ("", "/")
        or parts.fragment
        # A port (even ":0", ":" or a non-number, which `.port` would raise
        # ValueError for) or user info: not a plain name.
        or any(c in parts.netloc for c in ":@")
        or [key for key, _ in options] not in ([], ["max_payload"])
    ):
        raise InvalidURLError(f"a memory broker URL is {usage}, not {shown!r}")
    max_payload: int | None = None
    if options:
        text = options[0][1]
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise InvalidURLError(
                f"max_payload= must be a positive integer (bytes), not {text!r} (in {shown!r})"
            )
        max_payload = int(text)
    name = parts.netloc
    broker, users = _shared.get(name, (None, 0))
    if broker is None:
        broker = MemoryBroker(max_payload=max_payload)
    elif broker.max_payload != max_payload:
        raise InvalidURLError(
            f"the memory broker {name!r} is open with max_payload={broker.max_payload};"
            f" {shown!r} asks for {max_payload}"
        )
    _shared[name] = (broker, users + 1)
    try:
        yield broker
    finally:
        broker, users = _shared[name]
        if users <= 1:
            del _shared[name]
        else:
            _shared[name] = (broker, users - 1)
