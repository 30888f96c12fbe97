"""What a NATS broker URL and the engine's queue names mean on the server.

`parse_nats_url` reads a ``nats://`` or ``nats+tls://`` URL into
`NatsOptions`; `token` turns a queue name into the subject token and
consumer name that stand for it; the constants name the streams, subjects
and bucket the adapter (`trio_durable_nats._nats`) creates. See
``docs/nats.md``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from typing import Final, final
from urllib.parse import parse_qs, urlsplit

import attrs

from trio_durable.brokers import (
    AMBIGUOUS_HINT,
    RESULTS,
    BridgeMode,
    InvalidURLError,
    bridge_mode,
    mask_url,
    userinfo_is_ambiguous,
)

TASKS_STREAM: Final = "TRIO_DURABLE_TASKS"
RESULTS_STREAM: Final = "TRIO_DURABLE_RESULTS"
DEAD_STREAM: Final = "TRIO_DURABLE_DEAD"
TASK_SUBJECT: Final = "trio_durable.task"
RESULT_SUBJECT: Final = "trio_durable.result"
DEAD_SUBJECT: Final = "trio_durable.dead"
WORKERS_BUCKET: Final = "TRIO_DURABLE_WORKERS"

SCHEMES: Final = {"nats": "nats", "nats+tls": "tls"}
"""The URL schemes of this adapter, and the scheme nats-py takes for each
(``nats+tls://`` is TLS, which nats-py spells ``tls://``)."""

DEAD_MAX_AGE: Final = 7 * 24 * 3600.0
"""How long (seconds) dead-lettered copies are kept."""

INACTIVE_THRESHOLD: Final = 3600.0
"""Seconds a durable consumer that no one pulls from is kept by the server
before it deletes it, unless the URL says otherwise (``?inactive_threshold=``)."""

_OPTIONS: Final = (
    "bridge",
    "ack_wait",
    "max_deliver",
    "replicas",
    "timeout",
    "reconnect_wait",
    "monitor",
    "dead_letter",
    "seeds",
    "inactive_threshold",
)

_TOKEN_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_TOKEN_MAX: Final = 200


def token(queue: str) -> str:
    """The subject token and consumer name of a queue.

    Letters, digits, ``_`` and ``-`` stand for themselves; every other
    character (``.``, ``@``, ``~``, ``=``, ...) becomes ``=XX`` per UTF-8
    byte, so ``payments@acme`` is ``payments=40acme`` and
    ``trio_durable.results`` is ``trio_durable=2Eresults``: one subject token,
    valid as a consumer name, and distinct queues never share one. A token
    longer than 200 characters is cut and ends in ``=H`` and a hash.
    """
    parts: list[str] = []
    for char in queue:
        if char in _TOKEN_SAFE:
            parts.append(char)
        else:
            parts.extend(f"={byte:02X}" for byte in char.encode())
    encoded = "".join(parts)
    if len(encoded) > _TOKEN_MAX:
        digest = hashlib.sha256(queue.encode()).hexdigest()[:32]
        encoded = f"{encoded[:150]}=H{digest}"
    return encoded


def _is_results_queue(queue: str) -> bool:
    return queue == RESULTS or queue.startswith(RESULTS + ".")


@functools.lru_cache(maxsize=4096)
def stream_and_subject(queue: str) -> tuple[str, str]:
    """The stream and subject that carry ``queue``'s messages (remembered
    for the last 4,096 queues: a dispatch asks once per message)."""
    if _is_results_queue(queue):
        return RESULTS_STREAM, f"{RESULT_SUBJECT}.{token(queue)}"
    return TASKS_STREAM, f"{TASK_SUBJECT}.{token(queue)}"


# -- URL ----------------------------------------------------------------------------------


@final
@attrs.define(frozen=True, kw_only=True)
class NatsOptions:
    """What a ``nats://`` or ``nats+tls://`` URL configures (see ``docs/nats.md``).

    Attributes:
      server: The server URL handed to nats-py (no query string; ``tls://``
        for ``nats+tls://``).
      bridge: How nats-py's asyncio loop runs (``?bridge=``).
      ack_wait: Seconds a delivered message may stay unacked before the
        server delivers it again (``?ack_wait=``, default 30).
      max_deliver: Deliveries after which the server stops delivering a
        message (``?max_deliver=``, default 20, ``-1`` for no limit); keep it
        above the workers' ``max_deliveries`` so they fail it as poison first.
      replicas: Replicas of the streams and the bucket (``?replicas=``).
      timeout: Seconds to wait for the connection, a JetStream API call or a
        publish acknowledgement (``?timeout=``, default 10).
      reconnect_wait: Seconds between reconnection attempts
        (``?reconnect_wait=``, default 1).
      monitor: The monitoring endpoint read to check ``sync_interval``
        (``?monitor=``; default ``http://<host>:8222``; ``off`` to skip).
      dead_letter: Copy messages rejected without requeue to the dead-letter
        stream (``?dead_letter=on|off``, default on).
      seeds: More servers of the same cluster to connect to if ``server``
        does not answer (``?seeds=host:port,host:port``), as nats-py URLs
        with the same scheme and credentials. Once connected, nats-py also
        learns the cluster's other servers from the one it reached.
      inactive_threshold: Seconds the server keeps a durable consumer that
        no one pulls from and that holds no unacked message, before it
        deletes it (``?inactive_threshold=``, default 3600; ``off``: kept
        forever). A queue's messages stay on its stream meanwhile, and the
        next consumer of the queue creates it again: a server reused by
        many engines and queues never fills up with consumers.
    """

    server: str
    bridge: BridgeMode = "thread"
    ack_wait: float = 30.0
    max_deliver: int = 20
    replicas: int = 1
    timeout: float = 10.0
    reconnect_wait: float = 1.0
    monitor: str | None = None
    dead_letter: bool = True
    seeds: tuple[str, ...] = ()
    inactive_threshold: float | None = INACTIVE_THRESHOLD

    @property
    def shown(self) -> str:
        """The server URL for logs and errors, in the scheme it was given
        in: its password (or token) masked."""
        scheme, _, rest = self.server.partition("://")
        given = next((ours for ours, theirs in SCHEMES.items() if theirs == scheme), scheme)
        return mask_url(f"{given}://{rest}", user_is_secret=True)


def parse_nats_url(url: str) -> NatsOptions:
    """Read a ``nats://`` or ``nats+tls://`` broker URL.

    Raises:
      InvalidURLError: Not such a URL, or an option is unknown, repeated or
        out of range.
    """
    if not isinstance(url, str):
        raise InvalidURLError(f"not a NATS URL: {url!r}")
    # Messages show the URL with its password or token masked, and never
    # quote what urllib says about it (a secret with an unencoded '/', '?'
    # or '#' is split across the URL's parts).
    shown = mask_url(url, user_is_secret=True)
    if userinfo_is_ambiguous(url, user_is_secret=True):
        raise InvalidURLError(f"malformed NATS URL {shown!r}: {AMBIGUOUS_HINT}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidURLError(f"malformed NATS URL {shown!r}: a bad host or port") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or "://" not in url:
        raise InvalidURLError(
            f"not a NATS URL: {shown!r} (expected nats://host:4222, or nats+tls://host:4222)"
        )
    if not parts.hostname:
        raise InvalidURLError(f"the NATS URL {shown!r} names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise InvalidURLError(f"a NATS URL takes no path or fragment: {shown!r}")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURLError(f"malformed query in NATS URL {shown!r}") from None
    unknown = sorted(set(query) - set(_OPTIONS))
    if unknown:
        raise InvalidURLError(
            f"unknown option(s) {', '.join(unknown)} in NATS URL {shown!r}"
            f" (known: {', '.join(_OPTIONS)})"
        )
    values: dict[str, str] = {}
    for name, given in query.items():
        if len(given) != 1:
            raise InvalidURLError(f"option {name} given more than once in {shown!r}")
        values[name] = given[0]

    def number(name: str, default: float, *, minimum: float = 0.0) -> float:
        if name not in values:
            return default
        try:
            value = float(values[name])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= minimum:
            raise InvalidURLError(
                f"{name} must be a number above {minimum:g}, not {values[name]!r}"
            )
        return value

    def integer(name: str, default: int, *, allowed: Callable[[int], bool], what: str) -> int:
        if name not in values:
            return default
        try:
            value = int(values[name])
        except ValueError:
            raise InvalidURLError(f"{name} must be {what}, not {values[name]!r}") from None
        if not allowed(value):
            raise InvalidURLError(f"{name} must be {what}, not {values[name]!r}")
        return value

    monitor: str | None = f"http://{parts.hostname}:8222"
    if "monitor" in values:
        endpoint = values["monitor"]
        if endpoint == "off":
            monitor = None
        else:
            target = urlsplit(endpoint)
            if target.scheme != "http" or not target.hostname:
                raise InvalidURLError(
                    f"monitor must be an http:// URL or off, not {mask_url(endpoint)!r}"
                )
            monitor = endpoint.rstrip("/")
    inactive_threshold: float | None = INACTIVE_THRESHOLD
    if values.get("inactive_threshold") == "off":
        inactive_threshold = None
    else:
        inactive_threshold = number("inactive_threshold", INACTIVE_THRESHOLD)
    dead_letter = values.get("dead_letter", "on")
    if dead_letter not in ("on", "off"):
        raise InvalidURLError(f"dead_letter must be on or off, not {dead_letter!r}")
    netloc = parts.netloc
    server = (
        f"{SCHEMES[scheme]}://{netloc}"
        if port is not None
        else f"{SCHEMES[scheme]}://{netloc}:4222"
    )
    seeds: list[str] = []
    userinfo = netloc.rpartition("@")[0]
    for seed in values.get("seeds", "").split(",") if "seeds" in values else ():
        try:
            address = urlsplit(f"//{seed.strip()}")
            valid = bool(address.hostname) and address.port is not None and not address.username
        except ValueError:
            valid = False
        if not valid:
            raise InvalidURLError(
                f"seeds must be a comma-separated list of host:port, not {values['seeds']!r}"
            )
        seeds.append(f"{SCHEMES[scheme]}://{userinfo + '@' if userinfo else ''}{seed.strip()}")
    return NatsOptions(
        server=server,
        bridge=bridge_mode(url),
        ack_wait=number("ack_wait", 30.0),
        max_deliver=integer(
            "max_deliver",
            20,
            allowed=lambda v: v == -1 or v >= 2,
            what="an integer of at least 2, or -1 (no limit)",
        ),
        replicas=integer(
            "replicas", 1, allowed=lambda v: 1 <= v <= 5, what="an integer from 1 to 5"
        ),
        timeout=number("timeout", 10.0),
        reconnect_wait=number("reconnect_wait", 1.0),
        monitor=monitor,
        dead_letter=dead_letter == "on",
        seeds=tuple(seeds),
        inactive_threshold=inactive_threshold,
    )
