"""What the broker suites are run with: `BrokerFactory`, and the helpers
the checks share (unique names, receiving exactly, waiting out what must not
arrive, waiting for what must)."""

from __future__ import annotations

import itertools
import re
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, TypeVar, final

import attrs
import trio
import trio.testing

from ..._brokers._base import Broker, Consumer, Delivery, Outgoing, WorkerDescriptor

EVENTUALLY: Final = 10.0
"""How long (seconds) a check waits for something that must happen."""

QUIET_PERIOD: Final = 0.5
"""The default `BrokerFactory.quiet_period` (seconds): how long a check
watches for a message that must not arrive. Long enough for a server on
this machine or the next to deliver what it wrongly kept (a redelivery of
an acked message takes one round trip), short enough that the broker suite
spends a few seconds on it in all."""

LARGEST_CHECKED_BODY: Final = 8 * 1024 * 1024
"""Bodies up to this size are sent to check ``max_payload``; over it (the
RabbitMQ default of 128 MiB), only the refusal is checked."""

_SESSION: Final = secrets.token_hex(3)
"""Distinguishes this process's queues from earlier ones on a real server."""

_serial = itertools.count()

T = TypeVar("T")

BrokerMaker = Callable[[], AbstractAsyncContextManager[Broker]]
"""Opens a broker: a zero-argument callable returning an async context
manager that yields a connected broker and closes it on exit."""


@final
@attrs.frozen(kw_only=True)
class BrokerFactory:
    """How the suites open one kind of broker, and what that kind can do.

    Calling it returns an async context manager that opens a connected
    broker. Separate calls may share a server (checks isolate themselves by
    queue name and instance id); brokers of one call may also be fresh each
    time, as the memory broker's are.

    Attributes:
      open: Returns the async context manager that opens one broker.
      priorities: Delivers higher-priority messages first. Without it
        `check_higher_priorities_are_delivered_first` is skipped (reported
        SKIPPED, never passed; run it once more with a factory that claims
        priorities, as an expected failure, to show the gap).
      trio_clock: Its time is `trio.current_time()`: it lives on the Trio
        thread, its delays and times to live are Trio time. The caller then
        runs the checks under ``trio.testing.MockClock(autojump_threshold=0)``
        (so waiting out a time to live costs no real time), and the engine
        suite asserts exact times.
      quiet_period: How long (seconds, on the run's clock) to watch for a
        message that must not arrive, once every task is blocked: what lets a
        "nothing arrives" check see a message a server delivers wrongly but
        late. Defaults to `QUIET_PERIOD`; raise it for a server further
        away. 0 is right only for a broker that lives on the Trio thread
        (`trio_clock`: nothing can arrive once every task is blocked), and
        there the default costs no real time under the autojump clock.
      poll_interval: How long to sleep between two reads of something that
        becomes true eventually (descriptors that propagate).
      short_ttl: A descriptor time to live that
        `check_a_descriptor_is_forgotten_after_its_ttl` waits out (some
        servers round it: NATS keeps per-message TTLs in whole seconds).
    """

    open: BrokerMaker
    priorities: bool = True
    trio_clock: bool = False
    quiet_period: float = attrs.field(default=QUIET_PERIOD, validator=attrs.validators.ge(0))
    poll_interval: float = attrs.field(default=0.05, validator=attrs.validators.gt(0))
    short_ttl: float = attrs.field(default=1.0, validator=attrs.validators.gt(0))

    def __call__(self) -> AbstractAsyncContextManager[Broker]:
        """Open one broker (``self.open()``)."""
        return self.open()


def as_factory(factory: BrokerFactory | BrokerMaker) -> BrokerFactory:
    """``factory`` itself, or a plain opener wrapped with the default
    capabilities (priorities, a broker on another clock watched for
    `QUIET_PERIOD` seconds)."""
    if isinstance(factory, BrokerFactory):
        return factory
    if not callable(factory):
        raise TypeError(f"a broker factory must be callable, not {factory!r}")
    return BrokerFactory(open=factory)


def unique_name(check: str) -> str:
    """A queue name (or instance id prefix) nothing else uses, in this
    process or an earlier one; checks that need more append ``.a``, ..."""
    tail = re.sub(r"[^A-Za-z0-9_.-]", "-", check)[:60]
    return f"conformance.{_SESSION}.{next(_serial)}.{tail}"


# -- Helpers ------------------------------------------------------------------------


def outgoing(queue: str, *bodies: bytes, priority: int = 0) -> list[Outgoing]:
    return [Outgoing(queue=queue, body=body, priority=priority) for body in bodies]


def bodies_of(deliveries: Sequence[Delivery]) -> Counter[bytes]:
    return Counter(d.body for d in deliveries)


_SHOWN_BODIES: Final = 3
"""Bodies a failed `assert_same_bodies` names; the rest are counted."""


def _short(body: bytes) -> str:
    return repr(body) if len(body) <= 40 else f"{body[:40]!r}... ({len(body)} bytes)"


def assert_same_bodies(received: Iterable[bytes], expected: Iterable[bytes]) -> None:
    """Raise AssertionError unless ``received`` holds the bodies of
    ``expected``, each as many times.

    The message names a few bodies missing and a few unexpected, shortened:
    an ``assert`` of two counters would have pytest diff their full
    representations, which for large bodies takes minutes.
    """
    got, want = Counter(received), Counter(expected)
    if got == want:
        return
    missing, extra = want - got, got - want
    parts = []
    for what, found in (("missing", missing), ("unexpected", extra)):
        if found:
            shown = ", ".join(_short(body) for body in list(found)[:_SHOWN_BODIES])
            more = sum(found.values()) - min(len(found), _SHOWN_BODIES)
            parts.append(
                f"{sum(found.values())} {what}: {shown}" + (f" and {more} more" if more > 0 else "")
            )
    raise AssertionError("the bodies delivered differ from those sent: " + "; ".join(parts))


async def receive_exactly(
    consumer: Consumer, count: int, *, max_items: int | None = None
) -> list[Delivery]:
    """Receive until ``count`` messages have arrived (never asking for more),
    checking that every batch holds at least one and at most what was asked."""
    received: list[Delivery] = []
    with trio.fail_after(EVENTUALLY):
        while len(received) < count:
            asked = min(max_items or count, count - len(received))
            batch = await consumer.receive(asked)
            assert 1 <= len(batch) <= asked
            received.extend(batch)
    return received


async def settle(factory: BrokerFactory) -> None:
    """Give anything that could still arrive the chance to."""
    await trio.testing.wait_all_tasks_blocked()
    if factory.quiet_period:
        await trio.sleep(factory.quiet_period)
        await trio.testing.wait_all_tasks_blocked()


async def assert_nothing_arrives(consumer: Consumer, factory: BrokerFactory) -> None:
    arrived: list[Delivery] = []

    async def watch() -> None:
        arrived.extend(await consumer.receive(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await settle(factory)
        nursery.cancel_scope.cancel()
    assert [d.body for d in arrived] == []


async def eventually(
    probe: Callable[[], Awaitable[T]],
    expected: T,
    factory: BrokerFactory,
    *,
    patience: float = EVENTUALLY,
) -> None:
    """Wait (at most ``patience`` seconds) until ``probe()`` returns ``expected``."""
    last = await probe()
    with trio.move_on_after(patience):
        while last != expected:
            await trio.sleep(factory.poll_interval)
            last = await probe()
    assert last == expected


def descriptor(instance_id: str, *groups: str) -> WorkerDescriptor:
    return WorkerDescriptor(instance_id=instance_id, app="shop", groups=groups)
