"""``GET /api/runs/{run_id}/stream``: a run's stream followed over HTTP
until the run ends, one JSON line per value (``{"offset": n, "value": v}``,
``application/x-ndjson``), from ``from_offset`` on (docs/streaming.md).

The response is written as the run emits: it waits, as `Client.stream`
does, for the store's changes, never polling it. A follower whose
connection drops goes on with ``from_offset`` one past the last offset it
saw. A missing run answers 404 before the response starts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, final

from starlette.requests import Request
from starlette.responses import StreamingResponse

from . import _params
from ._app import console_of

NDJSON = "application/x-ndjson"
"""The content type of the stream's answer: one JSON document a line."""


@final
class _Lines:
    """The lines of a stream's items (an iterator object: a dropped
    connection leaves nothing to finalize)."""

    def __init__(self, items: AsyncIterator[tuple[int, Any]]) -> None:
        self._items = items

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        offset, value = await self._items.__anext__()
        return json.dumps({"offset": offset, "value": value}) + "\n"


async def stream_route(request: Request) -> StreamingResponse:
    """The route's handler."""
    _params.only(request, {"namespace", "from_offset"})
    namespace = _params.namespace(request)
    from_offset = _params.integer(request, "from_offset", 0, 0)
    source = console_of(request).source
    run_id = request.path_params["run_id"]
    # Read first, so a missing run is a 404 and not a broken response.
    await source.get(run_id, namespace=namespace)
    items = source.stream(run_id, from_offset, namespace=namespace)
    return StreamingResponse(_Lines(items), media_type=NDJSON)
