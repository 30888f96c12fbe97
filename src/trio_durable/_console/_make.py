"""The console's ASGI application: the routes of the API, the hooks and the
pages put together, and the library's errors turned into answers (JSON
under /api, /hooks and /metrics, HTML elsewhere)."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from .._exceptions import (
    BreakpointNotFoundError,
    InvalidRunStateError,
    RunConflictError,
    RunNotFoundError,
    UsageError,
    WebhookNotFoundError,
    WebhookUsedError,
)
from ._api import api_routes
from ._app import API_PREFIXES, ApiError, Console, ConsoleSource, error_body
from ._hooks import hook_routes
from ._pages import error_page, page_routes


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


def console_app(
    source: ConsoleSource,
    *,
    token: str | None = None,
    cors_origins: Sequence[str] = (),
) -> Starlette:
    """The console as an ASGI application, to serve or mount in your own.

    Args:
      source: The `Engine` or `Client` it reads runs through and acts with.
      token: The bearer token that actions (signal, cancel, retry, ...)
        need; None serves a read-only API and pages.
      cors_origins: Origins allowed to call the API from a browser; none
        by default (CORS off).

    Raises:
      UsageError: ``token`` is empty or ``cors_origins`` is a bare string.
    """
    # Engine and Client are the RunQueries there are; importing _engine
    # here would make a cycle, since the engine serves the console too.
    from .._run_queries import RunQueries

    if not isinstance(source, RunQueries):
        raise UsageError(f"console_app needs a td.Engine or a td.Client, not {source!r}")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise UsageError("the console's token must be a non-empty string or None")
    if isinstance(cors_origins, str):
        raise UsageError("cors_origins is a list of origins, not a string")
    routes: list[BaseRoute] = [*api_routes(), *hook_routes(), *page_routes()]
    middleware = []
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "If-None-Match"],
                expose_headers=["ETag"],
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        # The library's errors and the API's own answer with their status;
        # anything else is a 500 (and is raised on, for the server to log).
        exception_handlers={
            ApiError: _on_error,
            UsageError: _on_error,
            HTTPException: _on_error,
            Exception: _on_error,
        },
    )
    app.state.console = Console(source=source, token=token)
    return app
