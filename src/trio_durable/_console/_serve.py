"""Serving the console with hypercorn's Trio worker, in the caller's nursery."""

from __future__ import annotations

from functools import partial
from typing import Any

import attrs
import trio

from .._kernel._options import ConsoleOptions
from ._app import ConsoleSource
from ._make import console_app, console_options


async def serve_console(
    source: ConsoleSource,
    options: ConsoleOptions | None = None,
    /,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    **settings: Any,
) -> None:
    """Serve the console of ``source`` as ``options`` say until cancelled.

    Start it with ``await nursery.start(serve_console, engine, options)``
    (with keywords, ``nursery.start(functools.partial(serve_console, engine,
    port=0, token=token))``): that returns the URL it listens on once it
    does (with ``port=0``, the port the system chose).

    It answers only requests whose ``Host`` is one of
    `ConsoleOptions.hosts`; hypercorn closes a connection that sends no
    complete request for ``idle_timeout`` seconds, and the console's guard
    bounds each body (see `ConsoleOptions`).

    Args:
      source: The `Engine` or `Client` to serve.
      options: The console's settings (`ConsoleOptions`; its defaults
        listen on 127.0.0.1:8080, read-only).
      **settings: Settings of `ConsoleOptions`, over ``options``
        (``host=``, ``port=``, ``token=``, ``max_body=``, ...).

    Raises:
      UsageError: A setting is malformed.
      OSError: The address cannot be listened on.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    options = console_options(options, settings)
    app = console_app(source, attrs.evolve(options, allowed_hosts=options.hosts))
    host, port = options.host, options.port
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    # Also how long a connection may take to send a request's headers.
    # hypercorn's read_timeout stays off: it would also cut a long
    # streaming answer (GET /api/runs/{id}/stream) whose client is quiet;
    # the guard times bodies instead.
    config.keep_alive_timeout = options.idle_timeout
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(partial(serve, app, config))  # type: ignore[arg-type]
        task_status.started(urls[0])
