"""The console's ASGI application: the routes of the API, the hooks and the
pages put together, and the library's errors turned into answers (JSON
under /api, /hooks and /metrics, HTML elsewhere)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, final

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from .._base._exceptions import (
    BreakpointNotFoundError,
    InvalidRunStateError,
    RunConflictError,
    RunNotFoundError,
    ScheduleNotFoundError,
    UsageError,
    WebhookNotFoundError,
    WebhookUsedError,
)
from .._kernel._options import ConsoleOptions
from ._api import api_routes
from ._app import API_PREFIXES, ApiError, Console, ConsoleSource, error_body
from ._bulk import bulk_routes
from ._events import event_routes
from ._fleet import fleet_routes
from ._guard import Guard, Limits
from ._hooks import hook_routes
from ._pages import error_page, page_routes
from ._schedules import schedule_routes


def _is_api(request: Request) -> bool:
    # Mounted under a prefix, the path starts with it.
    path, root = request.url.path, str(request.scope.get("root_path", ""))
    return path.removeprefix(root).startswith(API_PREFIXES)


def _classify(exc: Exception) -> tuple[int, str, str]:
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, RunNotFoundError):
        return 404, "run_not_found", str(exc)
    if isinstance(exc, InvalidRunStateError):
        return 409, "invalid_run_state", str(exc)
    if isinstance(exc, WebhookNotFoundError):
        return 404, "webhook_not_found", str(exc)
    if isinstance(exc, WebhookUsedError):
        return 409, "webhook_used", str(exc)
    if isinstance(exc, BreakpointNotFoundError):
        return 404, "breakpoint_not_found", str(exc)
    if isinstance(exc, ScheduleNotFoundError):
        return 404, "schedule_not_found", str(exc)
    if isinstance(exc, RunConflictError):
        return 409, "run_conflict", str(exc)
    if isinstance(exc, UsageError):
        return 400, "bad_request", str(exc)
    if isinstance(exc, HTTPException):
        return exc.status_code, "http_error", str(exc.detail)
    return 500, "internal_error", "the console failed to answer; see its log"


async def _on_error(request: Request, exc: Exception) -> Response:
    status, code, message = _classify(exc)
    if _is_api(request):
        return error_body(status, code, message)
    return error_page(request, status, message)


@final
class ConsoleApplication(Starlette):
    """The console's application: a Starlette application whose every
    request passes the `Guard` first (Host, body limits, security headers
    on every answer, errors included)."""

    def __init__(self, limits: Limits, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limits = limits

    def build_middleware_stack(self) -> ASGIApp:
        # Outside Starlette's own error middleware: its 500s carry the
        # headers too.
        return Guard(super().build_middleware_stack(), self.limits)


def console_app(
    source: ConsoleSource, options: ConsoleOptions | None = None, /, **settings: Any
) -> ConsoleApplication:
    """The console as an ASGI application, to serve or mount in your own.

    It takes the settings of `ConsoleOptions` (those about serving,
    ``host`` and ``port``, aside), as an object, as keywords
    (``console_app(client, token=token)``), or both (keywords win).
    Mounted in a server of your own, it checks the ``Host`` of requests
    only against ``allowed_hosts`` given here; `serve_console` gives it the
    console's own (see `ConsoleOptions.hosts`).

    Args:
      source: The `Engine` or `Client` it reads runs through and acts with.
      options: The console's settings.
      **settings: Settings of `ConsoleOptions`, over ``options``.

    Raises:
      UsageError: A setting is malformed or unknown, or ``source`` is no
        `Engine` or `Client`.
    """
    # Engine and Client are the RunQueries there are; importing _engine
    # here would make a cycle, since the engine serves the console too.
    from .._front._front_queries import RunQueries

    if not isinstance(source, RunQueries):
        raise UsageError(f"console_app needs a td.Engine or a td.Client, not {source!r}")
    options = console_options(options, settings)
    routes: list[BaseRoute] = [
        *api_routes(),
        *bulk_routes(),
        *hook_routes(),
        *schedule_routes(),
        *fleet_routes(),
        *event_routes(),
        *page_routes(),
    ]
    middleware = []
    if options.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(options.cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "If-None-Match"],
                expose_headers=["ETag"],
            )
        )
    hosts = options.allowed_hosts
    limits = Limits(
        hosts=None if hosts is None else frozenset(hosts),
        max_body=options.max_body,
        read_timeout=options.read_timeout,
        idle_timeout=options.idle_timeout,
    )
    app = ConsoleApplication(
        limits,
        routes=routes,
        middleware=middleware,
        lifespan=_lifespan,
        # The library's errors and the API's own answer with their status;
        # anything else is a 500 (and is raised on, for the server to log).
        exception_handlers={
            ApiError: _on_error,
            UsageError: _on_error,
            HTTPException: _on_error,
            Exception: _on_error,
        },
    )
    app.state.console = Console(
        source=source, token=options.token, webhooks=options.delivers_webhooks
    )
    return app


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    # The nursery of the console's background work (its bulk operations),
    # held while the server runs the application.
    console: Console = app.state.console
    async with console.bulk.open():
        yield


def console_options(options: ConsoleOptions | None, settings: dict[str, Any]) -> ConsoleOptions:
    """``options`` (or the defaults) with ``settings`` over them.

    Raises:
      UsageError: ``options`` is not a `ConsoleOptions`, or a setting is
        malformed or not one of its.
    """
    if options is None:
        options = ConsoleOptions()
    elif not isinstance(options, ConsoleOptions):
        raise UsageError(f"the console's options are a td.ConsoleOptions, not {options!r}")
    unknown = sorted(set(settings) - {field.name for field in attrs.fields(ConsoleOptions)})
    if unknown:
        raise UsageError(f"the console takes no setting {', '.join(unknown)}")
    return attrs.evolve(options, **settings)
