"""Query parameters of the API's GET routes, read and checked.

A malformed value is a 400 with code ``bad_parameter`` naming it; a
parameter the route does not know is a 400 too (``unknown_parameter``), so
that a misspelt filter never reads as "no filter".
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Collection
from typing import Any, Final

from starlette.requests import Request

from .._base._bounds import MAX_INTEGER, shown
from .._base._exceptions import UsageError
from .._kernel._options import check_id
from .._kernel._views import MAX_PAGE
from ._app import ApiError

_TRUE: Final = frozenset({"true", "1", "yes"})
_FALSE: Final = frozenset({"false", "0", "no"})

RUN_FILTERS: Final = frozenset(
    {
        "status",
        "workflow",
        "namespace",
        "tag",
        "created_after",
        "created_before",
        "parent_id",
        "limit",
        "cursor",
        "facets",
        "where",
        "id_prefix",
        "top_level",
    }
)
FAN_PARAMETERS: Final = frozenset({"offset", "limit", "failed", "namespace"})


def bad(name: str, message: str) -> ApiError:
    return ApiError(400, "bad_parameter", f"{name}: {message}")


def only(request: Request, known: Collection[str]) -> None:
    """Refuse parameters the route does not know."""
    unknown = sorted(set(request.query_params.keys()) - set(known))
    if unknown:
        raise ApiError(
            400,
            "unknown_parameter",
            f"unknown query parameter {', '.join(unknown)}; this route takes"
            f" {', '.join(sorted(known)) or 'none'}",
        )


def one(request: Request, name: str) -> str | None:
    """The parameter's value; given twice is an error."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise bad(name, "give it once")
    return values[0] if values else None


def namespace(request: Request) -> str | None:
    """The ``namespace`` parameter, checked."""
    value = one(request, "namespace")
    if value is not None:
        try:
            check_id("namespace", value)
        except UsageError as exc:
            raise bad("namespace", str(exc)) from None
    return value


def whole_number(name: str, text: str, low: int, high: int = MAX_INTEGER) -> int:
    """``text`` as an integer in ``low..high`` (at most `MAX_INTEGER`: what
    a store can compare).

    Raises:
      ApiError: 400 ``bad_parameter`` naming ``name``.
    """
    negative = text.startswith("-")
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits.isascii() or not digits.isdigit():
        raise bad(name, f"must be an integer, not {shown(text)}")
    # Read only if it can be in range: int() of a long text costs, and
    # past 4,300 digits raises.
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(MAX_INTEGER)):
        raise bad(name, f"must be from {low} to {high}, not {shown(text)}")
    value = -int(significant) if negative else int(significant)
    if not low <= value <= high:
        raise bad(name, f"must be from {low} to {high}, not {value}")
    return value


def integer(request: Request, name: str, default: int, low: int, high: int = MAX_INTEGER) -> int:
    """An integer parameter in ``low..high``."""
    text = one(request, name)
    if text is None:
        return default
    return whole_number(name, text, low, high)


def limit(request: Request, default: int = 100) -> int:
    return integer(request, "limit", default, 1, MAX_PAGE)


def boolean(request: Request, name: str) -> bool:
    text = one(request, name)
    if text is None:
        return False
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise bad(name, f"must be true or false, not {text!r}")


def instant(request: Request, name: str) -> float | None:
    """Seconds since the epoch, or an ISO 8601 time with its offset."""
    text = one(request, name)
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise bad(name, f"must be finite, not {text!r}")
        return seconds
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise bad(name, f"must be seconds since the epoch or ISO 8601, not {text!r}") from None
    if moment.tzinfo is None:
        raise bad(name, f"an ISO 8601 time needs its offset (Z or +hh:mm): {text!r}")
    return moment.timestamp()


def listed(request: Request, name: str) -> list[str]:
    """A parameter given several times or with commas, as one list."""
    values = [
        part.strip() for value in request.query_params.getlist(name) for part in value.split(",")
    ]
    if any(not value for value in values):
        raise bad(name, "an empty value")
    return values


def run_filters(request: Request) -> dict[str, Any]:
    """The keyword arguments of `list_runs` that ``GET /api/runs`` was given."""
    only(request, RUN_FILTERS)
    statuses = listed(request, "status")
    found: dict[str, Any] = {
        "status": statuses or None,
        "workflow": one(request, "workflow"),
        "namespace": namespace(request),
        "tags": listed(request, "tag"),
        "created_after": instant(request, "created_after"),
        "created_before": instant(request, "created_before"),
        "parent_id": one(request, "parent_id"),
        "limit": limit(request),
        "cursor": one(request, "cursor"),
        "facets": boolean(request, "facets"),
        "id_prefix": one(request, "id_prefix"),
        "top_level": boolean(request, "top_level"),
    }
    return found
