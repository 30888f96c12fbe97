"""Serving the console with hypercorn's Trio worker, in the caller's nursery."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import trio

from ._app import ConsoleSource
from ._make import console_app


async def serve_console(
    source: ConsoleSource,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    cors_origins: Sequence[str] = (),
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console of ``source`` on ``host:port`` until cancelled.

    Start it with ``await nursery.start(serve_console, engine)`` (with
    options, ``nursery.start(functools.partial(serve_console, engine,
    port=0, token=token))``): that returns the URL it listens on once it
    does (with ``port=0``, the port the system chose).

    Args:
      source: The `Engine` or `Client` to serve.
      host: The address to listen on (loopback by default).
      port: The port; 0 lets the system choose one.
      token: The bearer token actions need; None serves read-only.
      cors_origins: Origins allowed to call the API from a browser.

    Raises:
      UsageError: An argument is malformed.
      OSError: The address cannot be listened on.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    app = console_app(source, token=token, cors_origins=cors_origins)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        task_status.started(urls[0])
