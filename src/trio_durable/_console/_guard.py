"""The console's guard: what every request passes before routing, and what
every answer carries.

- **Host.** A request whose ``Host`` (or HTTP/2 ``:authority``) is not one
  the console answers to gets 421 before any route reads anything: a page
  whose DNS name was rebound to the console's address reads nothing.
- **Headers.** Every answer (pages, the API, static files, errors) carries
  a Content-Security-Policy of ``default-src 'self'``, ``X-Frame-Options:
  DENY``, ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
  no-referrer``.
- **Bodies.** A body is read only when a route asks for it, and then
  through the guard: longer than ``max_body`` (by its ``Content-Length``,
  before a byte is read, or as it streams in) it is refused 413; a body
  that takes longer than ``read_timeout`` from the request's start, or
  pauses longer than ``idle_timeout``, is refused 408. One clock: Trio's.
- **Answering early.** A route may answer before it read the body (a
  wrong bearer token, an unknown webhook). Then the rest of a body whose
  ``Content-Length`` is within the limit is read and dropped (under the same
  timeouts) before the answer ends, so the connection serves the client's
  next request; any other body is left unread and the answer says
  ``Connection: close``, so the server closes the connection and the
  client stops sending.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final, final

import attrs
import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._kernel._options import normal_host
from ._app import ApiError

SECURITY_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-security-policy", b"default-src 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
"""The headers every answer of the console carries."""

_CLOSING_VERSIONS: Final = frozenset({"1.0", "1.1"})
"""HTTP versions whose answers may say ``Connection: close`` (HTTP/2
forbids the header: a stream ends by itself)."""


@final
@attrs.frozen(kw_only=True)
class Limits:
    """What the guard enforces (from `ConsoleOptions`).

    Attributes:
      hosts: The ``Host`` names answered (normalized by `normal_host`);
        None, or a ``"*"`` among them, answers any.
      max_body: The most bytes of a request body.
      read_timeout: Seconds a body may take, from the request's start.
      idle_timeout: Seconds a body may pause.
    """

    hosts: frozenset[str] | None
    max_body: int
    read_timeout: float
    idle_timeout: float

    def answers(self, hosts: Iterable[str]) -> bool:
        """Whether a request naming ``hosts`` (its ``Host`` values, port
        and all) is answered: it names one host, and one of ours."""
        if self.hosts is None or "*" in self.hosts:
            return True
        names = {host_name(host) for host in hosts}
        return len(names) == 1 and names <= self.hosts


def host_name(value: str) -> str:
    """The name or address of a ``Host`` header's value, without its port,
    as `normal_host` writes it."""
    value = value.strip()
    if value.startswith("["):
        # An IPv6 literal: [::1]:8080.
        return normal_host(value.partition("]")[0] + "]")
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        value = name
    return normal_host(value)


@final
class Guard:
    """ASGI middleware around the whole console: `Limits` on every HTTP
    request, the security headers on every answer."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(scope, receive, send, self.limits)
        headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
        named = [
            value.decode("latin-1")
            for name, value in headers
            if name.lower() in (b"host", b":authority")
        ]
        if not self.limits.answers(named):
            await exchange.answer_json(
                421,
                "misdirected_request",
                "this console does not answer to that Host; see ConsoleOptions.allowed_hosts",
            )
            return
        await self.app(scope, exchange.receive, exchange.send)


@final
class _Exchange:
    """One request's body, read under the limits, and its answer."""

    def __init__(self, scope: Scope, receive: Receive, send: Send, limits: Limits) -> None:
        self._receive = receive
        self._send = send
        self._limits = limits
        self._closable = scope.get("http_version") in _CLOSING_VERSIONS
        self._length: int | None = None
        chunked = False
        for name, value in scope.get("headers", []):
            name = name.lower()
            if name == b"content-length" and value.strip().isdigit():
                self._length = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        # Whether body bytes may still come (the server checked the framing).
        self._pending = chunked or (self._length or 0) > 0
        self._received = 0
        self._refused = False
        self._drain = False
        self._deadline = trio.current_time() + limits.read_timeout

    async def receive(self) -> Message:
        """The next message of the request, its body checked.

        Raises:
          ApiError: 413 past ``max_body``; 408 when the body is late.
        """
        if not self._pending:
            # The body is in (a streaming answer listens for the client
            # leaving): nothing is late any more.
            return await self._receive()
        limit = self._limits.max_body
        if self._length is not None and self._length > limit:
            self._refused = True
            raise ApiError(
                413,
                "body_too_large",
                f"the body is {self._length} bytes long; this console takes at most {limit}",
            )
        message = await self._next()
        if message is None:
            self._refused = True
            raise ApiError(408, "body_timeout", "the request's body did not arrive in time")
        self._count(message)
        if self._received > limit:
            self._refused = True
            raise ApiError(
                413, "body_too_large", f"the body is longer than this console takes ({limit} bytes)"
            )
        return message

    async def _next(self) -> Message | None:
        """The next message, or None if it did not come in time."""
        wait = min(self._limits.idle_timeout, self._deadline - trio.current_time())
        with trio.move_on_after(max(wait, 0.0)):
            return await self._receive()
        return None

    def _count(self, message: Message) -> None:
        if message["type"] != "http.request":
            # The client left: no more body.
            self._pending = False
            return
        self._received += len(message.get("body", b""))
        if not message.get("more_body", False):
            self._pending = False

    async def send(self, message: Message) -> None:
        """Pass on a message of the answer, with the security headers, and
        end an answer given before the body was read as the module says."""
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            given = {name.lower() for name, _ in headers}
            headers.extend(h for h in SECURITY_HEADERS if h[0] not in given)
            if self._pending:
                length = self._length
                if not self._refused and length is not None and length <= self._limits.max_body:
                    self._drain = True
                elif self._closable:
                    headers.append((b"connection", b"close"))
            message = {**message, "headers": headers}
        elif (
            message["type"] == "http.response.body"
            and self._drain
            and not message.get("more_body", False)
        ):
            self._drain = False
            # The answer's bytes go out first: the client has its answer
            # while the rest of its body is dropped.
            await self._send({**message, "more_body": True})
            await self._discard()
            message = {"type": "http.response.body", "body": b"", "more_body": False}
        await self._send(message)

    async def _discard(self) -> None:
        while self._pending:
            message = await self._next()
            if message is None:
                # Late: the server closes the connection after the answer.
                return
            self._count(message)

    async def answer_json(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` with the API's JSON error body."""
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": body})
