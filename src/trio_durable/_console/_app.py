"""The console's ASGI application: its routes, its errors and its token.

Every route reads through a `ConsoleSource` (an `Engine` or a `Client`).
The JSON API (`_api`), the webhook and breakpoint routes (`_hooks`) and the
pages (`_pages`) each give their routes; this module puts them together,
turns the library's errors into JSON bodies with a proper status, and checks
the bearer token that actions need.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from .._exceptions import InvalidRunStateError, RunNotFoundError, UsageError

if TYPE_CHECKING:
    from .._client import Client
    from .._engine import Engine

ConsoleSource: TypeAlias = "Engine | Client"
"""What the console reads and acts through: an engine, or a client (which
runs nothing)."""

API_PREFIXES: Final = ("/api/", "/hooks/", "/metrics")
"""Paths whose errors are JSON bodies (the pages answer errors in HTML)."""


@final
class ApiError(Exception):
    """An error the API answers with ``status`` and a JSON body
    ``{"error": {"code": code, "message": message}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@final
@attrs.frozen(kw_only=True)
class Console:
    """The state every route reads: ``request.app.state.console``.

    Attributes:
      source: The engine or client the console reads and acts through.
      token: The bearer token actions need; None makes the API read-only.
    """

    source: ConsoleSource
    token: str | None = attrs.field(default=None, repr=False)

    def check_token(self, request: Request) -> None:
        """Let an action through only with ``Authorization: Bearer <token>``.

        Raises:
          ApiError: 403 when no token is configured (read-only), 401 when
            the request's token is missing or wrong.
        """
        if self.token is None:
            raise ApiError(
                403, "read_only", "this console is read-only: it was started without a token"
            )
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            raise ApiError(401, "unauthorized", "this action needs the console's bearer token")


def console_of(request: Request) -> Console:
    """The `Console` of the application serving ``request``."""
    console: Console = request.app.state.console
    return console


def error_body(status: int, code: str, message: str) -> JSONResponse:
    """The JSON error every API route answers with."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


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
    if isinstance(exc, UsageError):
        return 400, "bad_request", str(exc)
    if isinstance(exc, HTTPException):
        return exc.status_code, "http_error", str(exc.detail)
    return 500, "internal_error", "the console failed to answer; see its log"


async def _on_error(request: Request, exc: Exception) -> Response:
    status, code, message = _classify(exc)
    if _is_api(request):
        return error_body(status, code, message)
    from ._pages import error_page

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
    from ._api import api_routes
    from ._hooks import hook_routes
    from ._pages import page_routes

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
