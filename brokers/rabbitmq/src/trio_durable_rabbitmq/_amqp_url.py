"""The RabbitMQ adapter's broker URL: ``amqp://user:password@host:5672/vhost?option=value``
(or ``amqps://``), parsed into `AmqpOptions`. The adapter's own options
(``bridge``, ``prefetch``, ``publish_timeout``, ``reconnect_interval``,
``connect_timeout``, ``max_payload``, ``queue_type``, ``delivery_limit``,
``seeds``) are read here; aio-pika's
(``heartbeat``, ``name`` and the TLS files) pass on in the client URL. See
``docs/rabbitmq.md``.
"""

from __future__ import annotations

import math
from typing import Final, Literal, final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from trio_durable.brokers import (
    AMBIGUOUS_HINT,
    BridgeMode,
    InvalidURLError,
    bridge_mode,
    mask_url,
    userinfo_is_ambiguous,
)

DEFAULT_MAX_PAYLOAD: Final = 128 * 1024 * 1024
"""The largest body dispatched without ``?max_payload=``: RabbitMQ's default
``max_message_size`` (3.8 and later), which the client cannot ask the server."""
LARGEST_MAX_PAYLOAD: Final = 512 * 1024 * 1024
"""The most ``max_message_size`` can be set to on the server."""
DEFAULT_DELIVERY_LIMIT: Final = 20
"""The deliveries of one message a quorum queue makes before it dead-letters
it, without ``?delivery_limit=``: above the workers' ``max_deliveries`` (5
by default), so that a worker fails a poison task first."""

QueueType = Literal["classic", "quorum"]

# Options the adapter reads, and those it passes on to aio-pika unchanged.
_OWN_OPTIONS: Final = frozenset(
    {
        "bridge",
        "prefetch",
        "publish_timeout",
        "reconnect_interval",
        "connect_timeout",
        "max_payload",
        "queue_type",
        "delivery_limit",
        "seeds",
    }
)
_CLIENT_OPTIONS: Final = frozenset(
    {"heartbeat", "name", "cafile", "capath", "keyfile", "certfile", "no_verify_ssl"}
)


@final
@attrs.define(frozen=True, kw_only=True)
class AmqpOptions:
    """What a broker URL says, parsed (see `parse_amqp_url`).

    Attributes:
      client_url: The URL handed to aio-pika (without this adapter's options).
      bridge: How aio-pika is bridged into Trio.
      prefetch: The most unacked messages any one consumer may hold (a cap
        on what `AmqpBroker.open_consumer` is asked for), or None for no cap.
      publish_timeout: Seconds a dispatch waits for a dropped connection to
        come back before it raises `BrokerUnavailable`.
      reconnect_interval: Seconds between attempts to reconnect.
      connect_timeout: Seconds the first connection may take, and each
        reconnection after it dropped.
      max_payload: The largest message body, in bytes, a dispatch sends:
        the server's ``max_message_size``, which AMQP does not tell clients
        (default `DEFAULT_MAX_PAYLOAD`, the server's default).
      queue_type: ``classic`` (one node's queues, with priorities) or
        ``quorum`` (replicated over the cluster's nodes; no priorities on
        RabbitMQ 3, deliveries counted and limited by the server).
      delivery_limit: For quorum queues, the most deliveries of one message
        before RabbitMQ dead-letters it (``x-delivery-limit`` is one less:
        it counts the returns).
      seed_urls: More client URLs (other nodes of a cluster, with the first
        one's scheme, credentials, vhost and client options): each
        connection attempt takes the next of ``client_url`` and these.
    """

    client_url: str
    bridge: BridgeMode
    prefetch: int | None = None
    publish_timeout: float = 30.0
    reconnect_interval: float = 1.0
    connect_timeout: float = 10.0
    max_payload: int = DEFAULT_MAX_PAYLOAD
    queue_type: QueueType = "classic"
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    seed_urls: tuple[str, ...] = ()

    @property
    def client_urls(self) -> tuple[str, ...]:
        """``client_url`` and the seeds', in the order they are tried."""
        return (self.client_url, *self.seed_urls)


def parse_amqp_url(url: str) -> AmqpOptions:
    """Parse an ``amqp://`` or ``amqps://`` broker URL.

    Raises:
      InvalidURLError: The scheme is not amqp(s), the host is missing, or an
        option is unknown, repeated or out of range (``delivery_limit=``
        without ``queue_type=quorum`` is out of range).
    """
    # Messages show the URL with its password masked, and never quote what
    # urllib says about it (a password with an unencoded '/', '?' or '#'
    # is split across the URL's parts).
    shown = mask_url(url)
    if userinfo_is_ambiguous(url):
        raise InvalidURLError(f"malformed broker URL {shown!r}: {AMBIGUOUS_HINT}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError:
        raise InvalidURLError(f"the broker URL {shown!r} has a bad host or port") from None
    if parts.scheme.lower() not in ("amqp", "amqps"):
        raise InvalidURLError(f"not an amqp:// or amqps:// URL: {shown!r}")
    if not parts.hostname:
        raise InvalidURLError(f"the broker URL {shown!r} names no host")
    bridge = bridge_mode(url)
    own: dict[str, str] = {}
    passed: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in own or any(key == k for k, _ in passed):
            raise InvalidURLError(f"the option {key}= is given twice in {shown!r}")
        if key in _OWN_OPTIONS:
            own[key] = value
        elif key in _CLIENT_OPTIONS:
            passed.append((key, value))
        else:
            known = ", ".join(sorted(_OWN_OPTIONS | _CLIENT_OPTIONS))
            raise InvalidURLError(f"unknown option {key}= in {shown!r} (known: {known})")
    if "heartbeat" in dict(passed):
        _number(shown, "heartbeat", dict(passed)["heartbeat"], integer=True, zero=True)

    prefetch = own.get("prefetch")
    max_payload = DEFAULT_MAX_PAYLOAD
    if "max_payload" in own:
        max_payload = int(_number(shown, "max_payload", own["max_payload"], integer=True))
        if max_payload > LARGEST_MAX_PAYLOAD:
            raise InvalidURLError(
                f"max_payload= must be at most {LARGEST_MAX_PAYLOAD} (RabbitMQ's largest"
                f" max_message_size), not {max_payload} (in {shown!r})"
            )
    queue_type = own.get("queue_type", "classic")
    if queue_type not in ("classic", "quorum"):
        raise InvalidURLError(
            f"queue_type= must be classic or quorum, not {queue_type!r} (in {shown!r})"
        )
    delivery_limit = DEFAULT_DELIVERY_LIMIT
    if "delivery_limit" in own:
        if queue_type != "quorum":
            raise InvalidURLError(
                f"delivery_limit= needs queue_type=quorum (classic queues have no"
                f" delivery limit) (in {shown!r})"
            )
        delivery_limit = int(_number(shown, "delivery_limit", own["delivery_limit"], integer=True))
    client_url = urlunsplit(parts._replace(query=urlencode(passed)))
    return AmqpOptions(
        client_url=client_url,
        bridge=bridge,
        prefetch=None
        if prefetch is None
        else int(_number(shown, "prefetch", prefetch, integer=True)),
        publish_timeout=_number(shown, "publish_timeout", own.get("publish_timeout", "30")),
        reconnect_interval=_number(shown, "reconnect_interval", own.get("reconnect_interval", "1")),
        connect_timeout=_number(shown, "connect_timeout", own.get("connect_timeout", "10")),
        max_payload=max_payload,
        queue_type="quorum" if queue_type == "quorum" else "classic",
        delivery_limit=delivery_limit,
        seed_urls=_seed_urls(shown, client_url, own.get("seeds")),
    )


def _seed_urls(shown: str, client_url: str, seeds: str | None) -> tuple[str, ...]:
    """The client URLs of ``seeds=host:port,...``: ``client_url`` with each
    seed's host and port (the scheme's default port where none is given)."""
    if seeds is None:
        return ()
    parts = urlsplit(client_url)
    userinfo = parts.netloc.rpartition("@")[0]
    urls: list[str] = []
    for seed in seeds.split(","):
        try:
            seed_parts = urlsplit("//" + seed.strip())
            port = seed_parts.port
        except ValueError:
            port, seed_parts = None, None
        if (
            seed_parts is None
            or not seed_parts.hostname
            or seed_parts.username is not None
            or seed_parts.path
            or seed_parts.query
            or seed_parts.fragment
        ):
            raise InvalidURLError(
                f"seeds= must be a comma-separated list of host:port, not {seeds!r} (in {shown!r})"
            )
        netloc = seed_parts.netloc if port is not None else seed_parts.netloc.rstrip(":")
        urls.append(
            urlunsplit(parts._replace(netloc=f"{userinfo}@{netloc}" if userinfo else netloc))
        )
    return tuple(urls)


def _number(shown: str, key: str, text: str, *, integer: bool = False, zero: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        kind = "integer" if integer else "number"
        sign = "non-negative" if zero else "positive"
        raise InvalidURLError(f"{key}= must be a {sign} {kind}, not {text!r} (in {shown!r})")
    return value
