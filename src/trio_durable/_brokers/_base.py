"""The broker protocol: how tasks reach workers and results come back.

A broker moves opaque message bodies (bytes) through named queues with
at-least-once delivery: a consumer sees each message until it acks it, and a
message a consumer took but did not ack before it went away is delivered
again, maybe to another consumer, maybe more than once, maybe out of order.
Everything above the broker is written for that: a task is idempotent by its
checkpoint's claim, and a result settles a checkpoint only if it is still
pending.

Queues:

- one per worker group, ``<group>`` or ``<group>@<namespace>`` for a tenant,
  carrying tasks, with priorities (higher first);
- `RESULTS`, carrying results back; any engine may consume it and settle what
  it receives.

Workers also announce a `WorkerDescriptor` with a time to live, refreshed by
heartbeats; engines read them to know what is served where. A broker whose
announcements go with the process that made them (`Broker.needs_heartbeat`
is False: the memory broker) keeps one until it is withdrawn instead, and
its workers announce once.

A broker may limit the size of a message body (`Broker.max_payload`); it
refuses a larger one with `PayloadTooLarge` before sending anything.

A broker says whether what it accepted outlives its own process
(`Broker.durable`): a server's queues do, the memory broker's do not.

A broker may answer a `Pingable.ping`: one round trip to its server, which
fails while the server cannot be reached (an engine's ``/readyz`` asks it;
`ping` reads it), and may tell how many messages wait on a queue: its
`SupportsBacklog.backlog` (the console's fleet and queues pages show it;
`backlog` reads it).

Every implementation passes the suites of `trio_durable.testing.conformance`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Protocol, final, runtime_checkable

import attrs
import trio

from .._base._exceptions import TrioDurableError

RESULTS: Final = "trio_durable.results"
"""The name of the queue that carries results back to engines."""

_SAFE_TOKEN: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")


def is_broker_safe(token: str) -> bool:
    """Whether ``token`` is usable as a group or namespace on every broker:
    letters, digits, ``_``, ``.`` and ``-``, at most 100 characters, not
    starting with ``.`` or ``-`` (RabbitMQ queue names and NATS subject tokens
    both accept these)."""
    return isinstance(token, str) and bool(_SAFE_TOKEN.fullmatch(token))


class BrokerError(TrioDurableError):
    """Base class of broker failures."""


@final
class BrokerUnavailable(BrokerError):
    """The broker cannot be reached or refused the operation; the operation
    may be retried. The client library's error is the ``__cause__``."""


@final
class PayloadTooLarge(BrokerError):
    """A message body is larger than the broker accepts (`Broker.max_payload`).

    `Broker.dispatch` raises it before it sends any message of the batch (see
    `check_payload_sizes`), or, where the server refuses a body the adapter
    thought fit, once it knows; sending the same body again is pointless.
    Not raised for a broker that is merely away (that is `BrokerUnavailable`).

    Attributes:
      queue: The queue the body was for.
      size: The body's size, in bytes.
      limit: The largest body the broker accepts, in bytes.
    """

    def __init__(self, queue: str, size: int, limit: int) -> None:
        super().__init__(
            f"a message of {size} bytes for queue {queue!r} is over the broker's limit"
            f" of {limit} bytes (max_payload)"
        )
        self.queue = queue
        self.size = size
        self.limit = limit


def needs_heartbeat(broker: Broker) -> bool:
    """Whether ``broker``'s announcements lapse unless workers announce
    again within their time to live: its optional ``needs_heartbeat``
    member (see `Broker`), True where it has none."""
    return getattr(broker, "needs_heartbeat", True) is not False


@runtime_checkable
class Pingable(Protocol):
    """A broker that can tell whether its server answers now: the optional
    `ping` member of `Broker` (an adapter written before it still
    type-checks as a `Broker`)."""

    async def ping(self) -> None:
        """One round trip to the broker's server, the cheapest it has (a
        broker that lives in this process answers at once).

        Raises:
          BrokerUnavailable: The server cannot be reached now (the
            connection is down, being opened again, or the server did not
            answer in the adapter's own time limit).
        """
        ...


async def ping(broker: Broker) -> None:
    """Whether ``broker`` answers now: its optional `Pingable.ping`, or,
    where it has none, `Broker.worker_groups` (which an adapter may answer
    from what it holds, without asking its server).

    Raises:
      BrokerError: It does not answer (`BrokerUnavailable`).
    """
    if isinstance(broker, Pingable):
        await broker.ping()
    else:
        await broker.worker_groups()


@runtime_checkable
class SupportsBacklog(Protocol):
    """A broker that can tell how many messages wait on a queue: the
    optional `backlog` member of `Broker` (an adapter written before it
    still type-checks as a `Broker`)."""

    async def backlog(self, queue: str) -> int | None:
        """How many messages wait on ``queue`` to be delivered: dispatched
        and not yet delivered to a consumer (delayed ones and ones given
        back with ``requeue`` included; ones delivered and not yet acked
        not counted). 0 for a queue nothing was dispatched to. None where
        the broker cannot tell for this queue.

        A count the server keeps, read in one round trip: a moment later it
        may have changed.

        Raises:
          BrokerUnavailable: The server cannot be reached now.
        """
        ...


async def backlog(broker: Broker, queue: str) -> int | None:
    """How many messages wait on ``queue`` to be delivered: ``broker``'s
    optional `SupportsBacklog.backlog`, or None where it has none.

    Raises:
      BrokerError: The broker could not tell (`BrokerUnavailable`).
    """
    if isinstance(broker, SupportsBacklog):
        return await broker.backlog(queue)
    return None


def check_payload_sizes(messages: Sequence[Outgoing], limit: int | None) -> None:
    """What `Broker.dispatch` checks before it sends anything: every body is
    at most ``limit`` bytes (None: no limit).

    Raises:
      PayloadTooLarge: For the first message over the limit.
    """
    if limit is None:
        return
    for message in messages:
        if len(message.body) > limit:
            raise PayloadTooLarge(message.queue, len(message.body), limit)


@final
@attrs.define(frozen=True, kw_only=True)
class Outgoing:
    """A message to put on a queue.

    Attributes:
      queue: The queue's name (a worker group route, or `RESULTS`).
      body: The message body.
      priority: Higher is delivered first (0 to 9).
    """

    queue: str
    body: bytes
    priority: int = 0


@final
@attrs.define(frozen=True, kw_only=True, eq=False)
class Delivery:
    """A message as a consumer received it.

    Attributes:
      body: The message body.
      deliveries: How many times it has been delivered, this time included.
      tag: The adapter's handle for acking it.
    """

    body: bytes
    deliveries: int = 1
    tag: Any = None


class Consumer(Protocol):
    """Receives messages from one queue; made by `Broker.open_consumer`.

    Messages received and not acked when the consumer closes are delivered
    again.
    """

    async def receive(self, max_items: int) -> list[Delivery]:
        """Wait for at least one message and return up to ``max_items``."""
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge messages: they are never delivered again."""
        ...

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give messages back: delivered again if ``requeue``, else dropped
        (or dead-lettered, where the broker keeps a dead-letter queue)."""
        ...


@final
@attrs.define(frozen=True, kw_only=True)
class WorkerLoad:
    """How busy a worker was when it last announced itself
    (`WorkerDescriptor.load`), counted by the worker since it opened.

    Attributes:
      in_flight: Tasks it had received and not yet acked.
      completed: Tasks whose step (or decision) returned.
      failed: Tasks whose step raised.
      completed_per_minute: Tasks completed per minute over the last
        ``window`` seconds (0.0 while ``window`` is 0).
      window: The seconds that rate covers: from the heartbeat about a
        minute before this announcement (or from the worker's opening, in
        its first minute) to this announcement.
    """

    in_flight: int = 0
    completed: int = 0
    failed: int = 0
    completed_per_minute: float = 0.0
    window: float = 0.0


@final
@attrs.define(frozen=True, kw_only=True)
class WorkerDescriptor:
    """What a live worker announces about itself.

    Attributes:
      instance_id: Unique per worker process.
      app: The application's name.
      app_version: The application's version.
      runtime: Python, trio and platform versions, for people.
      groups: The worker group routes it consumes.
      steps: For each step it serves: its ``group``, required capabilities
        (``requires``), ``retry`` policy, ``timeout`` and flow-control
        ``queue`` (``{"name", "concurrency", "priority"}`` or None).
      workflows: For each workflow it knows: its ``versions``, the
        ``on_error`` routes of them all, each version's own ``routes``, the
        ``group`` whose decision tasks it takes for the workflow, when it
        serves that group, and ``params``, the parameters after the context
        of the version registered last (one object each: ``name``, and
        ``kind``, ``default`` and JSON ``type`` where they say something;
        absent from a worker older than the key, which a reader older than
        it ignores).
      capabilities: What it offers to steps with ``requires=``.
      registration_hash: The canonical hash of its registrations (a deploy).
      announced_at: When it last announced (durable time).
      held: Whether its announcement lasts until it is withdrawn, with no
        heartbeat (made on a broker whose `Broker.needs_heartbeat` is
        False): ``announced_at`` is then when it announced what it serves,
        and its age says nothing about whether the worker is alive (it is,
        as long as it is listed). False: it lapses unless the worker
        announces again within its time to live, and ``announced_at`` is
        its last heartbeat.
      load: How busy it was at that heartbeat (`WorkerLoad`). None for a
        held announcement, which no heartbeat refreshes, and for one made
        by a worker older than this field (its JSON has no ``load``; a
        reader older than it ignores the field).
      build_id: The build it belongs to (``--build-id``; by default its
        registration hash): besides its group routes' queues it consumes
        their queues of this build, where the tasks of runs on the build
        go (docs/deployments.md). Empty from a worker older than the field.
    """

    instance_id: str
    app: str
    app_version: str = "0"
    runtime: dict[str, str] = attrs.field(factory=dict)
    groups: tuple[str, ...] = ()
    steps: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    workflows: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    capabilities: tuple[str, ...] = ()
    registration_hash: str = ""
    announced_at: float = 0.0
    held: bool = False
    load: WorkerLoad | None = None
    build_id: str = ""


class Broker(Protocol):
    """What the engine and workers need from a message broker.

    Besides the members below, a broker may have optional ones that this
    protocol does not require (so that an adapter written before them
    still type-checks as a `Broker`): ``async def ping(self) -> None``,
    one round trip to its server (see `Pingable`, read through `ping`),
    ``async def backlog(self, queue: str) -> int | None``, the messages
    waiting on a queue (see `SupportsBacklog`, read through `backlog`), and
    one read through `needs_heartbeat`:

    ``needs_heartbeat: bool``
        Whether a worker's announcement lapses unless the worker announces
        again within its time to live (a heartbeat). True for a broker on
        a server, which cannot tell when a worker's process has died, and
        for a broker without the member. False for one whose announcements
        go with the process that made them, such as the memory broker,
        which lives in its workers' process: there `announce` also takes
        ``ttl=math.inf``, an announcement that lasts until it is withdrawn
        or announced again, and a worker announces once as it opens (again
        only if its app registered more since, when tasks arrive) and
        withdraws as it closes, with no heartbeat to wake it. Read once,
        when a worker opens.
    """

    @property
    def durable(self) -> bool:
        """Whether the tasks it accepted outlive its own process: True for a
        broker whose queues live on a server (the server keeps them when
        the engine's or a worker's process ends), False for one that keeps
        nothing across its own process (the in-process memory broker, whose
        queues go when the process does, or when its last user closes it).

        An engine that recovers or takes over a run whose steps went out on
        a broker that is not durable, and not this engine's own, sends them
        again at once as new attempts, since nothing else ever will. For a
        durable broker, a worker that dies leaves its tasks to be delivered
        again, and ``remote_redispatch`` is the guard against a server that
        loses them. Read once, when the engine opens.
        """
        ...

    @property
    def max_payload(self) -> int | None:
        """The largest message body, in bytes, that `dispatch` accepts, or
        None for no limit. Read before each dispatch (a broker may learn a
        new limit when it reconnects); the engine and the worker send a
        failure of code ``payload_too_large`` in place of a larger task or
        result."""
        ...

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Put messages on their queues, durably if the broker is durable.

        Raises:
          PayloadTooLarge: A body is over `max_payload`; nothing was sent
            (or, where only the server could tell, some may have been).
          BrokerUnavailable: They could not be sent; some may have been.
        """
        ...

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        """Consume ``queue``, with at most ``prefetch`` messages unacked."""
        ...

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        """Publish a worker's descriptor, forgotten ``ttl`` seconds after its
        last announcement (``ttl=math.inf``, given only to a broker whose
        `needs_heartbeat` is False: until it is withdrawn or announced
        again)."""
        ...

    async def withdraw(self, instance_id: str) -> None:
        """Forget a worker's descriptor now (a clean shutdown)."""
        ...

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        """The descriptors of live workers (consuming ``group``, if given),
        ordered by instance id."""
        ...

    async def worker_groups(self) -> list[str]:
        """The group routes live workers consume, sorted."""
        ...

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        """An event set once none of ``queues`` holds a message, or None if
        this broker cannot tell without asking a server.

        A queue holds a message from its dispatch until a consumer acks it
        or rejects it without requeue: messages waiting (delayed ones
        included) and messages delivered and not yet settled both count.
        The event is set at once if the queues hold nothing now; it is never
        cleared, so a caller asks again after it fired. A caller that stops
        waiting may set it itself, so the broker can forget it.

        `Engine.drain` asks this of the results queue and the queues its
        embedded worker consumes: with an event it also waits for results
        no task of its own accounts for (a duplicate, one another party put
        there) and for every task its worker will take. A broker whose
        queues live on a server returns None, and drain relies on the
        engine's own count of the tasks it sent. It must not block.
        """
        ...

    async def aclose(self) -> None:
        """Close the broker connection."""
        ...
