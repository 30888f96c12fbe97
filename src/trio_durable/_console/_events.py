"""The events: ``/events`` (the page) and the JSON API under
``/api/events``.

Events are kept by id (`SendsEvents.list_events`, `get_event_record`);
the page and ``GET /api/events`` list them a page at a time in that
order, each with the runs it reached and their statuses, and the debounce
windows open now: those of the source's app's debounced workflows, and of
the workflows of the listed events' runs that still wait. Reading needs no
token. An unknown event is a 404 ``event_not_found``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .._base._exceptions import UsageError
from .._features.events._debounce import DebounceWindow, open_windows
from .._kernel._views import plain
from . import _params
from ._app import ApiError, console_of
from ._page_params import one
from ._render import page_response

if TYPE_CHECKING:
    from .._base._records import Run
    from .._features.events._events import EventRecord
    from ._app import ConsoleSource

EVENTS_PAGE: Final = 50
"""Events per page of ``/events`` (and ``GET /api/events`` by default)."""


async def _runs_of(source: ConsoleSource, events: list[EventRecord]) -> dict[str, Run | None]:
    """The runs ``events`` reached, by id (None: pruned since)."""
    runs: dict[str, Run | None] = {}
    for event in events:
        for run_id in event.run_ids:
            if run_id not in runs:
                runs[run_id] = await source.store.get_run(run_id)
    return runs


async def _windows(source: ConsoleSource, runs: dict[str, Run | None]) -> list[DebounceWindow]:
    """The debounce windows open now, of the app's debounced workflows and
    of the workflows of ``runs`` that still wait (a window's run is
    ``suspended`` until it ends)."""
    workflows = (
        {wf.name for wf in source.app.workflows if wf.controls.debounce is not None}
        if (source.app is not None)
        else set()
    )
    workflows |= {run.workflow for run in runs.values() if run and run.status == "suspended"}
    return await open_windows(source.store, sorted(workflows), source.clock.now())


def event_json(event: EventRecord, runs: dict[str, Run | None]) -> dict[str, Any]:
    """An event as the API answers it: every field of `EventRecord`, and
    ``runs``, each run it reached with its workflow and status (null for
    both once it was pruned)."""
    data: dict[str, Any] = plain(event)
    data["runs"] = [
        {
            "id": run_id,
            "workflow": None if (run := runs.get(run_id)) is None else run.workflow,
            "status": None if run is None else run.status,
        }
        for run_id in event.run_ids
    ]
    return data


async def _page(
    source: ConsoleSource, after: str | None, limit: int
) -> tuple[list[EventRecord], str | None]:
    # One more than the page tells whether another page follows.
    found = await source.list_events(after=after, limit=limit + 1)
    page = found[:limit]
    return page, page[-1].event_id if len(found) > limit else None


async def list_events(request: Request) -> JSONResponse:
    """``GET /api/events``: ``limit`` events (default 50) by id from the
    first after ``after``, ``next_after`` for the next page (null on the
    last), and the debounce windows open now."""
    _params.only(request, ("after", "limit"))
    after = _params.one(request, "after")
    limit = _params.limit(request, EVENTS_PAGE)
    source = console_of(request).source
    try:
        page, next_after = await _page(source, after, limit)
    except UsageError as exc:
        raise ApiError(400, "bad_parameter", str(exc)) from None
    runs = await _runs_of(source, page)
    return JSONResponse(
        {
            "events": [event_json(event, runs) for event in page],
            "next_after": next_after,
            "windows": plain(await _windows(source, runs)),
        }
    )


async def get_event(request: Request) -> JSONResponse:
    """``GET /api/events/{id}``."""
    _params.only(request, ())
    source = console_of(request).source
    event_id = request.path_params["event_id"]
    try:
        event = await source.get_event_record(event_id)
    except UsageError as exc:
        raise ApiError(400, "bad_parameter", str(exc)) from None
    if event is None:
        raise ApiError(404, "event_not_found", f"no event {event_id!r}")
    return JSONResponse(event_json(event, await _runs_of(source, [event])))


async def events_page(request: Request) -> Response:
    """``/events``: a page of events by id, each with the runs it reached
    (links, with their statuses), and the debounce windows open now."""
    source = console_of(request).source
    after = one(request, "after")
    page, next_after = await _page(source, after, EVENTS_PAGE)
    runs = await _runs_of(source, page)
    return page_response(
        request,
        "events.html",
        title="Events",
        nav="events",
        events=page,
        runs=runs,
        after=after,
        next_after=next_after,
        windows=await _windows(source, runs),
    )


def event_routes() -> list[BaseRoute]:
    """The events' page and API routes."""
    return [
        Route("/events", events_page, methods=["GET"]),
        Route("/api/events", list_events, methods=["GET"]),
        Route("/api/events/{event_id}", get_event, methods=["GET"]),
    ]
