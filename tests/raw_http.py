"""A raw HTTP/1.1 client over a real socket, for tests that must control
what is sent when: a body sent late, a body never finished, a body that
stops as soon as the server answers, a chosen ``Host``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

CHUNK = 64 * 1024


@attrs.frozen
class Answer:
    """A response as read off the socket."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def address(url: str) -> tuple[str, int]:
    """The host and port of ``url``."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def head(
    method: str,
    path: str,
    host: str,
    headers: Mapping[str, str] = {},
) -> bytes:
    """A request's head: its line, ``Host`` and ``headers``."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Connection:
    """One connection: send bytes, read answers (as many as come)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buffer = b""
        self.closed_by_server = False

    @classmethod
    async def open(cls, url: str) -> Connection:
        return cls(await trio.open_tcp_stream(*address(url)))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _more(self) -> bool:
        try:
            data = await self.stream.receive_some(CHUNK)
        except trio.BrokenResourceError:
            data = b""
        if not data:
            self.closed_by_server = True
            return False
        self._buffer += data
        return True

    async def answer(self, method: str = "GET") -> Answer:
        """The next response (its body framed by Content-Length; none to
        a HEAD, and none with a 204 or 304).

        Raises:
          EOFError: The server closed the connection first.
        """
        while b"\r\n\r\n" not in self._buffer:
            if not await self._more():
                raise EOFError("the server closed the connection before answering")
        raw_head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = raw_head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        bodiless = method == "HEAD" or status in (204, 304)
        length = 0 if bodiless else int(headers.get("content-length", "0"))
        while len(self._buffer) < length:
            if not await self._more():
                raise EOFError("the server closed the connection within an answer")
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return Answer(status, headers, body)

    async def closed(self) -> bool:
        """Wait until the server closes the connection; False if it sent
        more bytes first."""
        while await self._more():
            pass
        return not self._buffer

    async def aclose(self) -> None:
        await self.stream.aclose()


async def request(
    url: str,
    method: str,
    path: str,
    *,
    host: str | None = None,
    headers: Mapping[str, str] = {},
    body: bytes = b"",
) -> Answer:
    """One request on a new connection, its body sent whole."""
    hostname, port = address(url)
    framing = {"Content-Length": str(len(body))} if body or method in ("POST", "PUT") else {}
    connection = await Connection.open(url)
    try:
        await connection.send(
            head(method, path, host or f"{hostname}:{port}", {**framing, **headers}) + body
        )
        return await connection.answer(method)
    finally:
        await connection.aclose()


@attrs.define
class Upload:
    """What `stream_until_answered` did: the answer, and how many body
    bytes went out before it came."""

    answer: Answer | None = None
    sent: int = 0


async def stream_until_answered(
    url: str,
    path: str,
    size: int,
    *,
    chunked: bool = False,
    headers: Mapping[str, str] = {},
) -> Upload:
    """POST a body of ``size`` bytes, sent a chunk at a time, and stop
    sending as soon as the server answers (or closes the connection)."""
    hostname, port = address(url)
    framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(size)}
    connection = await Connection.open(url)
    upload = Upload()
    piece = b"x" * CHUNK
    if chunked:
        piece = b"%x\r\n" % CHUNK + piece + b"\r\n"
    try:
        await connection.send(head("POST", path, f"{hostname}:{port}", {**framing, **headers}))
        async with trio.open_nursery() as nursery:

            async def send_body() -> None:
                try:
                    while upload.sent < size:
                        await connection.send(piece)
                        upload.sent += CHUNK
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    # The server closed the connection after answering.
                    pass

            nursery.start_soon(send_body)
            with contextlib.suppress(EOFError):
                upload.answer = await connection.answer()
            nursery.cancel_scope.cancel()
    finally:
        await connection.aclose()
    return upload
