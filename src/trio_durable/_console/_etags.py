"""ETags of a run's detail and of its fan pages, and ``If-None-Match``.

An ETag is a hash of the run's `RunStamp` (its state columns and an
aggregate of its checkpoints, read by `Store.run_stamp` without a payload)
and of what the route was asked (a fan page: the fan, offset, limit and
filter). A request whose ``If-None-Match`` names it is answered 304 after
that one read: neither the run's input or output nor any checkpoint's is
read. Tags are strong (the bytes of a body made from the same stamp are
the same) and quoted; ``If-None-Match`` compares them weakly, as RFC 9110
says, and accepts ``*`` and lists.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import Response

from .._base._exceptions import RunNotFoundError
from .._base._records import RunStamp
from .._stores._base import Store

ETAG_VERSION = "1"
"""Changes when the JSON a stamp stands for changes shape (a new release
must not answer 304 to a tag of the old shape)."""


async def read_stamp(store: Store, run_id: str, namespace: str | None) -> RunStamp:
    """The run's stamp, checked to be in ``namespace`` if one is given.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
    """
    stamp = await store.run_stamp(run_id)
    if stamp is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    if namespace is not None and stamp.namespace != namespace:
        raise RunNotFoundError(f"no run {run_id!r} in namespace {namespace!r}")
    return stamp


def etag(stamp: RunStamp, route: str, *query: Any) -> str:
    """The strong, quoted ETag of ``route`` answered from a run as
    ``stamp`` says it is, for ``query``."""
    text = json.dumps(
        [ETAG_VERSION, route, attrs.astuple(stamp), list(query)], separators=(",", ":")
    )
    return '"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def _opaque(tag: str) -> str:
    tag = tag.strip()
    return tag[2:] if tag.startswith(("W/", "w/")) else tag


def matches(request: Request, tag: str) -> bool:
    """Whether the request's ``If-None-Match`` names ``tag`` (or is ``*``)."""
    header = request.headers.get("if-none-match")
    if header is None:
        return False
    if header.strip() == "*":
        return True
    wanted = _opaque(tag)
    return any(_opaque(given) == wanted for given in header.split(","))


def not_modified(tag: str) -> Response:
    """The 304 answer, with its ETag and no body."""
    return Response(status_code=304, headers={"ETag": tag, "Cache-Control": "no-cache"})
