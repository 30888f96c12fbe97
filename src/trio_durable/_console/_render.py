"""Rendering the console's pages: the Jinja2 environment (autoescaped), the
formatting the templates use, and answering with an ETag.

A page's ETag is a hash of its rendered body, so a page whose data did not
change answers a matching ``If-None-Match`` with 304 and no body: that is
what the pages' live refresh (``static/console.js``) polls with.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._base._frames import fold_traceback
from .._base._search_values import search_terms
from .._front._signatures import read_params, signature_shown
from .._kernel._views import FanStats, span

FAN_PAGE: Final = 50
"""Members per page of a fan on a run's page."""


def when(seconds: float | None) -> str:
    """A durable time (seconds since the epoch) as UTC text, to the second;
    one past the calendar's years (a sleep of 1e300 s) in seconds."""
    if seconds is None:
        return "—"
    try:
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return f"{seconds:.6g} s after the epoch"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def iso(seconds: float | None) -> str:
    """A durable time as ISO 8601 in UTC (what ``<time datetime>`` holds);
    an empty string for None or one past the calendar's years."""
    if seconds is None:
        return ""
    try:
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return ""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    """A duration as people read it: ``12ms`` under a second, else as
    `span` writes it (``1.25s``, ``4m05s``, ``3h12m``)."""
    if seconds < 1:
        return f"{max(seconds, 0.0) * 1000:.0f}ms"
    return span(seconds)


EMBEDDED_JSON: Final = 256 * 1024
"""The longest JSON text of a value a page embeds for its viewer; a longer
one shows its start, and the JSON API has it all."""
SHOWN_JSON: Final = 2000
"""How much of a value's JSON a page shows before its viewer runs (or of
one too long to embed)."""


def json_text(value: Any) -> str:
    """A JSON value as compact JSON text (what the viewer parses)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=repr)


def pretty(value: Any) -> str:
    """A JSON value indented for people (escaped by the template)."""
    return json.dumps(value, indent=2, sort_keys=True, default=repr)


def query(params: Mapping[str, Any]) -> str:
    """``?a=1&b=2`` of the parameters given (None and empty ones left out),
    or an empty string."""
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is not None and item != "":
                pairs.append((name, str(item)))
    return f"?{urlencode(pairs)}" if pairs else ""


def segments(fan: FanStats) -> list[tuple[str, int, float]]:
    """A fan's progress bar: ``(status, count, percent)`` per segment, in
    the order completed, failed, running, pending (members not recorded yet
    count as pending)."""
    counts = dict(fan.counts)
    recorded = sum(counts.values())
    counts["pending"] = counts.get("pending", 0) + max(fan.size - recorded, 0)
    total = max(fan.size, recorded, 1)
    return [
        (status, counts.get(status, 0), 100.0 * counts.get(status, 0) / total)
        for status in ("completed", "failed", "running", "pending")
    ]


def announced_signature(workflow: str, entry: Mapping[str, Any]) -> str:
    """A workflow's parameters as a worker announces them, for people
    (``greet(name: string)``), or "—" for a worker older than them."""
    params = read_params(dict(entry))
    return "—" if params is None else signature_shown(workflow, params)


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment (made once): autoescaped, strict about
    undefined names."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("trio_durable._console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["pretty"] = pretty
    env.filters["duration"] = duration
    env.filters["iso"] = iso
    env.filters["json_text"] = json_text
    env.filters["fold_traceback"] = fold_traceback
    env.globals["EMBEDDED_JSON"] = EMBEDDED_JSON
    env.globals["SHOWN_JSON"] = SHOWN_JSON
    env.globals["query"] = query
    env.globals["segments"] = segments
    env.globals["announced_signature"] = announced_signature
    env.filters["search_terms"] = search_terms
    return env


def base_path(request: Request) -> str:
    """Where the console is mounted (empty at a server's root): the prefix
    of every link a page carries."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def render_html(request: Request, template: str, **context: Any) -> str:
    """The page ``template`` rendered with ``context``."""
    return environment().get_template(template).render(base=base_path(request), **context)


def _etag_matches(header: str, etag: str) -> bool:
    if header.strip() == "*":
        return True
    # Weak comparison (RFC 9110 13.1.2): W/"x" matches "x".
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


def page_response(request: Request, template: str, **context: Any) -> Response:
    """The page, with an ETag of its body; 304 without a body when the
    request's ``If-None-Match`` holds that ETag."""
    body = render_html(request, template, **context).encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    # no-cache: the browser keeps the page but asks again (with the ETag).
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if _etag_matches(request.headers.get("if-none-match", ""), etag):
        return Response(status_code=304, headers=headers)
    return HTMLResponse(body, headers=headers)


def error_response(request: Request, status: int, message: str) -> Response:
    """The error page for ``status`` (never cached)."""
    body = render_html(request, "error.html", status=status, message=message)
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})
