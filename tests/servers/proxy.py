"""A TCP proxy that drops its connections in the middle of a write, for
tests of what a broker adapter loses (nothing) when its connection drops
mid-batch.

`CuttingProxy.cut_after(n)` lets the next ``n`` bytes that clients send go
through to the server, then drops every connection at once: the server has
received part of a batch, the client has sent all of it, and whatever
answers were on their way back are lost. New connections (the client
reconnecting) are forwarded again.
"""

from __future__ import annotations

import trio


class CuttingProxy:
    """Forwards TCP connections to ``(host, port)``; serve it with
    ``trio.serve_tcp(proxy.serve, 0, host="127.0.0.1")``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cuts = 0
        self._budget: int | None = None
        self._links: list[trio.CancelScope] = []

    def cut_after(self, budget: int) -> None:
        """Drop every connection once ``budget`` more bytes went upstream."""
        self._budget = budget

    def _cut(self) -> None:
        self._budget = None
        self.cuts += 1
        for scope in self._links:
            scope.cancel()
        self._links.clear()

    async def serve(self, stream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._links.append(scope)
            async with (
                stream,
                await trio.open_tcp_stream(self.host, self.port) as upstream,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(self._pipe, stream, upstream, nursery.cancel_scope, True)
                nursery.start_soon(self._pipe, upstream, stream, nursery.cancel_scope, False)

    async def _pipe(
        self,
        source: trio.SocketStream,
        sink: trio.SocketStream,
        done: trio.CancelScope,
        upstream: bool,
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                if upstream and self._budget is not None:
                    if len(data) >= self._budget:
                        await sink.send_all(data[: self._budget])
                        self._cut()
                        return
                    self._budget -= len(data)
                await sink.send_all(data)
        except trio.BrokenResourceError:
            pass
        done.cancel()
