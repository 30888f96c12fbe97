"""What every route of the console shares: its state, its errors and its
token.

Every route reads through a `ConsoleSource` (an `Engine` or a `Client`).
The JSON API (`_api`), the webhook and breakpoint routes (`_hooks`) and the
pages (`_pages`) each give their routes; `_make` puts them together into
the application and turns the library's errors into answers. This module
checks the bearer token that actions need.
"""

from __future__ import annotations

import hmac
import json
import re
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final, TypeAlias, final

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse

from ._bulk_operations import BulkOperations

if TYPE_CHECKING:
    from .._front._client import Client
    from .._front._engine import Engine

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
      webhooks: Whether ``POST /hooks/{token}`` delivers webhooks.
      bulk: The bulk operations it started, run in the nursery its
        lifespan opens.
    """

    source: ConsoleSource
    token: str | None = attrs.field(default=None, repr=False)
    webhooks: bool = False
    bulk: BulkOperations = attrs.field(factory=BulkOperations, repr=False)

    def check_webhooks(self) -> None:
        """Let a webhook's delivery through only if this console delivers
        them.

        Raises:
          ApiError: 403 when it does not (a read-only console, unless its
            options enable webhooks).
        """
        if not self.webhooks:
            raise ApiError(
                403,
                "webhooks_off",
                "this console does not deliver webhooks: it is read-only"
                " (start it with a token, or with webhooks enabled)",
            )

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


MAX_JSON_DEPTH: Final = 100
"""How deep arrays and objects of a request's JSON body may nest."""

_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
_STEP: Final = [1 if b in b"[{" else -1 for b in range(256)]


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest,
    counted without decoding it (brackets inside strings aside), so that a
    body nested too deep is refused before a parser recurses into it."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


async def read_json(request: Request) -> Any:
    """The request's JSON body; an empty body is None.

    The body is read through the console's guard: past its size limit it
    is refused 413, late 408 (see `_guard`).

    Raises:
      ApiError: 400 ``bad_json`` if the body is not JSON, or nests deeper
        than `MAX_JSON_DEPTH`.
    """
    raw = await request.body()
    if not raw.strip():
        return None
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise ApiError(
            400, "bad_json", f"the body's JSON nests deeper than {MAX_JSON_DEPTH} levels"
        )
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "bad_json", f"the body is not JSON: {exc}") from None
    except ValueError:
        # int's limit on digits (sys.get_int_max_str_digits).
        raise ApiError(400, "bad_json", "the body holds a number of too many digits") from None


async def read_object(request: Request) -> dict[str, Any]:
    """The request's JSON object body; an empty body is ``{}``.

    Raises:
      ApiError: 400 ``bad_json`` if the body is not a JSON object.
    """
    body = await read_json(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "the body must be a JSON object")
    return body
