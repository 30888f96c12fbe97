"""Query parameters of the pages, read and checked.

A malformed value is a `UsageError`, which the application answers with
the 400 page; an empty value (a blank form field) counts as absent.
"""

from __future__ import annotations

from starlette.requests import Request

from .._base._bounds import MAX_INTEGER, shown
from .._base._exceptions import UsageError


def one(request: Request, name: str) -> str | None:
    """A query parameter; an empty one (a blank form field) counts as absent."""
    value = request.query_params.get(name, "").strip()
    return value or None


def natural(request: Request, name: str, default: int) -> int:
    """A parameter that is an integer >= 0 (at most `MAX_INTEGER`)."""
    value = one(request, name)
    if value is None:
        return default
    if not value.isascii() or not value.isdigit():
        raise UsageError(f"{name} must be an integer >= 0, not {shown(value)}")
    # Compared as text first: int() of a long text costs, and past 4,300
    # digits raises.
    significant = value.lstrip("0") or "0"
    if len(significant) > len(str(MAX_INTEGER)) or int(significant) > MAX_INTEGER:
        raise UsageError(f"{name} must be an integer >= 0 and at most {MAX_INTEGER}")
    return int(significant)


def flag(request: Request, name: str) -> bool | None:
    """A parameter that is ``0`` or ``1``; None when absent."""
    value = one(request, name)
    if value is None:
        return None
    if value not in ("0", "1"):
        raise UsageError(f"{name} must be 0 or 1, not {value!r}")
    return value == "1"
