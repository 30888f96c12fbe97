"""What a supervisor and Prometheus ask a process over HTTP: the face of
``open_worker(http=...)`` and of ``trio-durable engine|worker --http``.

- ``GET /healthz``: 200 ``{"status": "alive"}`` while the process serves
  (a liveness probe: it answers from the process's own Trio loop).
- ``GET /readyz``: 200 ``{"status": "ready"}``, or 503 ``{"status": "not
  ready", "reason": ...}`` while the process drains (from the first
  SIGTERM or SIGINT on, before it stops taking work), or when what it
  needs does not answer within `PROBE_TIMEOUT` seconds or fails: an
  engine reads its store and makes a round trip to its broker
  (`engine_readiness`); a worker announces itself again, a round trip to
  its broker. A ready process may add ``"warnings"``, a list of what it
  should be told without being taken out of service: an engine names each
  group it sends tasks to that no live worker serves
  (`Engine.groups_without_workers`).
- ``GET /metrics``: the engine's or worker's own registry, in Prometheus's
  text format.

Served by hypercorn on Trio in the process's nursery, as the console is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import trio

from .._base._exceptions import StoreError, UsageError
from .._brokers._base import BrokerError, ping

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from .._brokers._base import Broker
    from .._stores._base import Store

PROMETHEUS_TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"
"""What `/metrics` is: `Engine.metrics` and `Worker.metrics` write
Prometheus's text format 0.0.4 (as the console's `/metrics` says too)."""

PROBE_TIMEOUT: Final = 2.0
"""Seconds `/readyz` waits for the store's and the broker's answers."""

Probe = Callable[[], Awaitable[None]]
"""Raises (`StoreError`, `BrokerError`) when what the process needs fails."""

Warnings = Callable[[], Awaitable[list[str]]]
"""What a ready process should say without being taken out of service
(may raise `StoreError` or `BrokerError`: then it says nothing)."""


@final
class Readiness:
    """Whether the process takes work: not while it drains, nor while a
    probe of what it needs fails or does not answer; and, while it does,
    what it warns of (``warnings``, asked once the probe passed)."""

    def __init__(self, probe: Probe, warnings: Warnings | None = None) -> None:
        self.draining = False
        self._probe = probe
        self._warnings = warnings

    async def reason(self) -> str | None:
        """Why the process is not ready, or None if it is."""
        if self.draining:
            return "draining: the process stops taking work"
        with trio.move_on_after(PROBE_TIMEOUT):
            try:
                await self._probe()
            except (StoreError, BrokerError) as exc:
                return str(exc)
            return None
        return f"the store or the broker did not answer within {PROBE_TIMEOUT:g} s"

    async def answer(self) -> tuple[int, dict[str, Any]]:
        """The status code and the JSON body of ``/readyz``, within
        `PROBE_TIMEOUT` seconds in all."""
        deadline = trio.current_time() + PROBE_TIMEOUT
        reason = await self.reason()
        if reason is not None:
            return 503, {"status": "not ready", "reason": reason}
        body: dict[str, Any] = {"status": "ready"}
        if self._warnings is not None:
            warnings: list[str] = []
            # A failure here, a moment after the probe passed, is the next
            # answer's to say.
            with trio.move_on_at(deadline), suppress(StoreError, BrokerError):
                warnings = await self._warnings()
            if warnings:
                body["warnings"] = warnings
        return 200, body


class ReadyEngine(Protocol):
    """What `engine_readiness` reads of an `Engine`."""

    @property
    def store(self) -> Store: ...

    @property
    def broker(self) -> Broker: ...

    async def groups_without_workers(self) -> list[str]: ...


def engine_readiness(engine: ReadyEngine) -> Readiness:
    """The readiness of a process that runs ``engine``: ready while its
    store answers a read and its broker a round trip (`ping`: the
    adapter's own, or, for one without, a read of the live workers'
    groups); warning of each group it sends tasks to that no live worker
    serves (`Engine.groups_without_workers`)."""

    async def probe() -> None:
        await engine.store.get_run("trio-durable-readyz")
        await ping(engine.broker)

    async def warnings() -> list[str]:
        return [
            f"no live worker serves the group {group!r}: its tasks wait on the broker until"
            " one starts"
            for group in await engine.groups_without_workers()
        ]

    return Readiness(probe, warnings)


def http_face(
    readiness: Readiness, metrics: Callable[[], str], console: Any | None = None
) -> Starlette:
    """The ASGI app of `/healthz`, `/readyz` and `/metrics`, and of the
    console's pages and API under the rest when ``console`` (an ASGI app,
    `console_app`'s) is given."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import BaseRoute, Mount, Route

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(request: Request) -> Response:
        status, body = await readiness.answer()
        return JSONResponse(body, status_code=status)

    async def scrape(request: Request) -> Response:
        return Response(metrics(), media_type=PROMETHEUS_TEXT)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", scrape, methods=["GET"]),
    ]
    if console is not None:
        routes.append(Mount("/", app=console))
    return Starlette(routes=routes)


async def serve_http_face(
    readiness: Readiness,
    metrics: Callable[[], str],
    address: tuple[str, int],
    console: Any | None = None,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `http_face` on ``address`` until cancelled; started, it gives
    the URL it listens on (with port 0, the port the system chose).

    Raises:
      OSError: The address cannot be listened on.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    host, port = address
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    app: Any = http_face(readiness, metrics, console)
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(partial(serve, app, config))
        task_status.started(urls[0])


def check_address(value: object, what: str = "http") -> tuple[str, int]:
    """``(host, port)``, or ``"HOST:PORT"``, as an address to listen on.

    Raises:
      UsageError: It is neither, or the port is not 0 to 65535.
    """
    if isinstance(value, str):
        host, colon, port_text = value.rpartition(":")
        host = host.strip("[]")
        try:
            port = int(port_text) if colon else -1
        except ValueError:
            port = -1
        value = (host, port)
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not value[0]
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
        or not 0 <= value[1] <= 65535
    ):
        raise UsageError(
            f"{what} takes HOST:PORT or (host, port), such as 127.0.0.1:9464 (port 0: any free"
            f" one), not {value!r}"
        )
    return value[0], value[1]
