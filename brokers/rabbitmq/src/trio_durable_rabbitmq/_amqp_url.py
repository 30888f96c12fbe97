"""The RabbitMQ adapter's broker URL: ``amqp://user:password@host:5672/vhost?option=value``
(or ``amqps://``), parsed into `AmqpOptions`. The adapter's own options
(``bridge``, ``prefetch``, ``publish_timeout``, ``reconnect_interval``,
``connect_timeout``, ``max_payload``) are read here; aio-pika's
(``heartbeat``, ``name`` and the TLS files) pass on in the client URL. See
``docs/rabbitmq.md``.
"""

from __future__ import annotations

import math
from typing import Final, final
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

# Options the adapter reads, and those it passes on to aio-pika unchanged.
_OWN_OPTIONS: Final = frozenset(
    {
        "bridge",
        "prefetch",
        "publish_timeout",
        "reconnect_interval",
        "connect_timeout",
        "max_payload",
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
    """

    client_url: str
    bridge: BridgeMode
    prefetch: int | None = None
    publish_timeout: float = 30.0
    reconnect_interval: float = 1.0
    connect_timeout: float = 10.0
    max_payload: int = DEFAULT_MAX_PAYLOAD


def parse_amqp_url(url: str) -> AmqpOptions:
    """Parse an ``amqp://`` or ``amqps://`` broker URL.

    Raises:
      InvalidURLError: The scheme is not amqp(s), the host is missing, or an
        option is unknown, repeated or out of range.
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
    return AmqpOptions(
        client_url=urlunsplit(parts._replace(query=urlencode(passed))),
        bridge=bridge,
        prefetch=None
        if prefetch is None
        else int(_number(shown, "prefetch", prefetch, integer=True)),
        publish_timeout=_number(shown, "publish_timeout", own.get("publish_timeout", "30")),
        reconnect_interval=_number(shown, "reconnect_interval", own.get("reconnect_interval", "1")),
        connect_timeout=_number(shown, "connect_timeout", own.get("connect_timeout", "10")),
        max_payload=max_payload,
    )


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
