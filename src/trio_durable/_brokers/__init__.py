"""Brokers: the protocol, the memory broker, and how a URL picks one.

The ``memory`` scheme is built in; adapters for other brokers register an
opener under the entry-point group ``trio_durable.brokers``, named by URL
scheme: a callable taking the URL and returning an async context manager
that yields a `Broker` (see `trio_durable._base._schemes` for the rule).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Final

from .._base._exceptions import InvalidURLError
from .._base._schemes import Install, Kind, Opener, find_opener
from ._base import Broker

_RABBITMQ: Final = Install(what="the trio-durable-rabbitmq package", pip="trio-durable-rabbitmq")
_NATS: Final = Install(what="the trio-durable-nats package", pip="trio-durable-nats")

BROKERS: Final = Kind(
    noun="broker",
    group="trio_durable.brokers",
    builtins={"memory": "trio_durable._brokers._memory:open_memory_broker"},
    install={"amqp": _RABBITMQ, "amqps": _RABBITMQ, "nats": _NATS, "nats+tls": _NATS},
    # NATS over TLS said only "tls" once: a name every broker could claim.
    renamed={"tls": "nats+tls"},
    example="memory://",
)
"""The broker URL schemes: built in, and those of the adapters trio-durable
documents (the packages that serve them, for the message when one is
missing)."""


def broker_opener(url: str) -> Opener:
    """The opener of ``url``'s scheme: the memory broker's, or the one an
    installed adapter registers under the entry-point group
    ``trio_durable.brokers``.

    Raises:
      InvalidURLError: The URL has no scheme, no broker serves it, or the
        adapter that serves it is not installed (the message names it).
    """
    return find_opener(BROKERS, url)


@asynccontextmanager
async def open_broker(url: str) -> AsyncIterator[Broker]:
    """Open the broker a URL names, and close it on exit.

    Raises:
      InvalidURLError: The URL is malformed, its scheme is unknown, or the
        adapter its broker needs is not installed.
    """
    opener = broker_opener(url)
    async with opener(url) as broker:
        yield broker


async def enter_broker(stack: AsyncExitStack, broker: str | Broker) -> Broker:
    """The broker ``broker`` names, opened on ``stack`` if it is a URL (an
    open `Broker` is used as it is, and not closed).

    Raises:
      InvalidURLError: ``broker`` is neither a valid broker URL nor a
        `Broker`.
      BrokerUnavailable: The broker cannot be reached.
    """
    if isinstance(broker, str):
        return await stack.enter_async_context(open_broker(broker))
    if callable(getattr(broker, "dispatch", None)) and callable(
        getattr(broker, "open_consumer", None)
    ):
        return broker
    raise InvalidURLError(f"broker must be a URL or a Broker, not {broker!r}")
