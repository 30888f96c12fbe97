"""The console's pages: server-rendered HTML with a little JavaScript."""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute


def page_routes() -> list[BaseRoute]:
    """The routes of the pages and their static files."""
    return []


def error_page(request: Request, status: int, message: str) -> Response:
    """The page answering an error on a page route."""
    return HTMLResponse(
        f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{html.escape(message)}</p>",
        status_code=status,
    )
