"""Brokers: the protocol, the memory broker, and how a URL picks one.

Adapters for other brokers register an opener under the entry-point group
``trio_durable.brokers``, named by URL scheme: a callable taking the URL and
returning an async context manager that yields a `Broker`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, Final, Protocol

from .._exceptions import InvalidURLError
from .._urls import mask_url
from ._base import Broker


class _BrokerOpener(Protocol):
    def __call__(self, url: str) -> AbstractAsyncContextManager[Any]: ...


EXTRAS: Final[dict[str, str]] = {
    "amqp": "rabbitmq",
    "amqps": "rabbitmq",
    "nats": "nats",
    "tls": "nats",
}
"""The extra of trio-durable that installs the client of each built-in
broker scheme (its entry point is registered even without it)."""


def broker_opener(url: str) -> _BrokerOpener:
    """The opener registered under the entry-point group
    ``trio_durable.brokers`` for ``url``'s scheme.

    Raises:
      InvalidURLError: The URL has no scheme, no broker serves it, or the
        extra that installs its client is missing (the message names it).
    """
    if not isinstance(url, str) or "://" not in url:
        shown = mask_url(url) if isinstance(url, str) else url
        raise InvalidURLError(f"not a broker URL: {shown!r} (expected e.g. 'memory://')")
    scheme = url.partition("://")[0].lower()
    for entry in entry_points(group="trio_durable.brokers"):
        if entry.name == scheme:
            try:
                opener: _BrokerOpener = entry.load()
            except ImportError as exc:
                # An adapter may wrap the ImportError in one of its own.
                missing = exc.name or getattr(exc.__cause__, "name", None)
                extra = EXTRAS.get(scheme)
                if extra is None or (missing or "").startswith("trio_durable"):
                    raise
                raise InvalidURLError(
                    f"the broker scheme {scheme!r} needs the {extra!r} extra:"
                    f" pip install 'trio-durable[{extra}]'"
                    f" ({f'no module named {missing!r}' if missing else exc})"
                ) from exc
            return opener
    raise InvalidURLError(
        f"no broker is registered for the scheme {scheme!r} in {mask_url(url)!r}"
        " (is its extra installed? e.g. pip install 'trio-durable[rabbitmq]')"
    )


@asynccontextmanager
async def open_broker(url: str) -> AsyncIterator[Broker]:
    """Open the broker a URL names, and close it on exit.

    Raises:
      InvalidURLError: The URL is malformed, its scheme is unknown, or the
        extra its broker needs is not installed.
    """
    opener = broker_opener(url)
    async with opener(url) as broker:
        yield broker
