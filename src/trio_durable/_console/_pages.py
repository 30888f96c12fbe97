"""The console's pages: server-rendered HTML with a little JavaScript.

``/`` lists runs, ``/runs/{id}`` shows one (its timeline, fans, lineage and
actions), ``/breakpoints`` the breakpoints (``/fleet`` and ``/queues`` are
`_fleet`'s); ``/static`` serves the script and the style sheet. Every page reads
through the console's source only, never renders more than a page of a
fan's members, and carries an ETag (`_render.page_response`) that its live
refresh polls with.

Bad input is a `UsageError` and an unknown run a `RunNotFoundError`: the
application turns them into the 400 and 404 pages (`error_page`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_args

import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .._base._exceptions import UsageError
from .._base._records import RunFilter, RunStatus
from .._base._search_values import parse_where
from .._features.search._search_attributes import stored_types
from .._front._queries import handed_to
from ._page_params import one
from ._render import error_response, page_response
from ._run_page import run_page

if TYPE_CHECKING:
    from ._app import Console, ConsoleSource

RUN_STATUSES: Final[tuple[str, ...]] = get_args(RunStatus)
RUNS_PAGE: Final = 50
SEARCH_COLUMNS: Final = 6
"""The most search attributes the runs list gives a column (those its
page's runs have, by name)."""
"""Runs per page of the runs list."""
_STATIC: Final = Path(__file__).parent / "static"


def _source(request: Request) -> ConsoleSource:
    console: Console = request.app.state.console
    return console.source


# -- runs ---------------------------------------------------------------------------


async def runs_page(request: Request) -> Response:
    """``/``: runs matching the filters, their counts per status, and a
    link to the next (older) page. Top-level runs by default, each with how
    many runs it started (children and on-error handlers); ``all=1`` lists
    every run, and so does a search by parent or by id."""
    filters = {
        "status": one(request, "status"),
        "workflow": one(request, "workflow"),
        "namespace": one(request, "namespace"),
        "tag": one(request, "tag"),
        "parent": one(request, "parent"),
        "where": one(request, "where"),
        "id": one(request, "id"),
        "all": one(request, "all"),
    }
    if filters["status"] is not None and filters["status"] not in RUN_STATUSES:
        raise UsageError(
            f"status must be one of {', '.join(RUN_STATUSES)}, not {filters['status']!r}"
        )
    if filters["all"] not in (None, "1"):
        raise UsageError(f"all must be 1, not {filters['all']!r}")
    top_level = filters["all"] is None and filters["parent"] is None and filters["id"] is None
    cursor = one(request, "cursor")
    source = _source(request)
    search = None
    if filters["where"] is not None:
        # NAME=VALUE (or NAME>=VALUE, ...), typed as the store records it.
        search = parse_where([filters["where"]], await stored_types(source.store))
    page = await source.list_runs(
        status=filters["status"],  # type: ignore[arg-type]
        workflow=filters["workflow"],
        namespace=filters["namespace"],
        tags=() if filters["tag"] is None else (filters["tag"],),
        parent_id=filters["parent"],
        limit=RUNS_PAGE,
        cursor=cursor,
        facets=True,
        search_attributes=search,
        id_prefix=filters["id"],
        top_level=top_level,
    )
    facets = dict(page.facets or {})
    started: dict[str, int] = {}

    async def count_started(run_id: str) -> None:
        counts = await source.store.count_runs(RunFilter(parent_id=run_id))
        started[run_id] = sum(counts.values())

    if top_level:
        # All at once: a store that groups its calls reads them in one trip.
        async with trio.open_nursery() as nursery:
            for run in page.runs:
                nursery.start_soon(count_started, run.id)
    attributes = sorted({name for run in page.runs for name in run.search_attributes})
    console: Console = request.app.state.console
    return page_response(
        request,
        "runs.html",
        title="Runs",
        nav="runs",
        filters=filters,
        top_level=top_level,
        statuses=RUN_STATUSES,
        facets=[(status, facets[status]) for status in RUN_STATUSES if status in facets],
        total=sum(facets.values()),
        page=page,
        started=started,
        # A run handed to its on-error handler shows so, as its page does.
        handled=await handed_to(source.store, page.runs),
        attributes=attributes[:SEARCH_COLUMNS],
        cursor=cursor,
        bulk_selection=_bulk_selection(filters, top_level),
        bulk_operations=console.bulk.recent(),
    )


def _bulk_selection(filters: dict[str, str | None], top_level: bool) -> dict[str, Any]:
    """The `RunSelection` of the list's filters, as ``POST /api/bulk/{action}``
    takes it: a bulk action from the list acts on the runs it lists."""
    given = {
        "status": filters["status"],
        "workflow": filters["workflow"],
        "namespace": filters["namespace"],
        "tags": None if filters["tag"] is None else [filters["tag"]],
        "parent_id": filters["parent"],
        "where": None if filters["where"] is None else [filters["where"]],
        "id_prefix": filters["id"],
    }
    return {key: value for key, value in given.items() if value} | {"top_level": top_level}


async def breakpoints_page(request: Request) -> Response:
    """``/breakpoints``: the breakpoints set, a form to set one, and the runs
    paused at them with their continue and skip actions."""
    source = _source(request)
    return page_response(
        request,
        "breakpoints.html",
        title="Breakpoints",
        nav="breakpoints",
        breakpoints=await source.breakpoints(),
        paused=await source.paused_steps(),
    )


def page_routes() -> list[BaseRoute]:
    """The routes of the pages and their static files."""
    return [
        Route("/", runs_page, methods=["GET"]),
        Route("/runs/{run_id}", run_page, methods=["GET"]),
        Route("/breakpoints", breakpoints_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
    ]


def error_page(request: Request, status: int, message: str) -> Response:
    """The page answering an error on a page route."""
    return error_response(request, status, message)
