"""The console's pages: server-rendered HTML with a little JavaScript.

``/`` lists runs, ``/runs/{id}`` shows one (its timeline, fans, lineage and
actions), ``/fleet`` the live workers and ``/queues`` the flow-control
queues; ``/static`` serves the script and the style sheet. Every page reads
through the console's source only, never renders more than a page of a
fan's members, and carries an ETag (`_render.page_response`) that its live
refresh polls with.

Bad input is a `UsageError` and an unknown run a `RunNotFoundError`: the
application turns them into the 400 and 404 pages (`error_page`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, get_args

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .._base._bounds import MAX_INTEGER, shown
from .._base._exceptions import UsageError
from .._base._on_error import lineage
from .._base._records import RunStatus
from .._base._search_values import parse_where
from .._features.messages._streams import STREAM_HEAD, offset_key, stream_scope
from .._features.search._search_attributes import stored_types
from .._kernel._views import FOLD_WIDTH, FanPage, FanStats, HistoryEntry
from ._render import FAN_PAGE, error_response, page_response

if TYPE_CHECKING:
    from ._app import Console, ConsoleSource

RUN_STATUSES: Final[tuple[str, ...]] = get_args(RunStatus)
RUNS_PAGE: Final = 50
"""Runs per page of the runs list."""
MAX_FAN_PAGE: Final = 100
"""The most members a page of a fan shows (``?limit=``; 50 by default)."""

_HANDLER_ID: Final = re.compile(r"^(?P<handles>.+)\.onError\.\d+$")
_STATIC: Final = Path(__file__).parent / "static"


def _source(request: Request) -> ConsoleSource:
    console: Console = request.app.state.console
    return console.source


def _one(request: Request, name: str) -> str | None:
    """A query parameter; an empty one (a blank form field) counts as absent."""
    value = request.query_params.get(name, "").strip()
    return value or None


def _natural(request: Request, name: str, default: int) -> int:
    value = _one(request, name)
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


def _flag(request: Request, name: str) -> bool | None:
    value = _one(request, name)
    if value is None:
        return None
    if value not in ("0", "1"):
        raise UsageError(f"{name} must be 0 or 1, not {value!r}")
    return value == "1"


# -- runs ---------------------------------------------------------------------------


async def runs_page(request: Request) -> Response:
    """``/``: runs matching the filters, their counts per status, and a
    link to the next (older) page."""
    filters = {
        "status": _one(request, "status"),
        "workflow": _one(request, "workflow"),
        "namespace": _one(request, "namespace"),
        "tag": _one(request, "tag"),
        "parent": _one(request, "parent"),
        "where": _one(request, "where"),
    }
    if filters["status"] is not None and filters["status"] not in RUN_STATUSES:
        raise UsageError(
            f"status must be one of {', '.join(RUN_STATUSES)}, not {filters['status']!r}"
        )
    cursor = _one(request, "cursor")
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
    )
    facets = dict(page.facets or {})
    return page_response(
        request,
        "runs.html",
        title="Runs",
        nav="runs",
        filters=filters,
        statuses=RUN_STATUSES,
        facets=[(status, facets[status]) for status in RUN_STATUSES if status in facets],
        total=sum(facets.values()),
        page=page,
        cursor=cursor,
    )


# -- a run --------------------------------------------------------------------------


async def _fan_pages(
    request: Request, run_id: str, fans: tuple[FanStats, ...]
) -> dict[int, tuple[FanPage | None, bool]]:
    """The page of members shown for each wide fan (and the one the query
    names: ``fan``, ``offset``, ``limit``, ``failed``), with whether it lists
    only failed members. A fan with failures shows them first."""
    source = _source(request)
    chosen = _natural(request, "fan", -1) if _one(request, "fan") is not None else None
    offset = _natural(request, "offset", 0)
    limit = _natural(request, "limit", FAN_PAGE)
    if not 1 <= limit <= MAX_FAN_PAGE:
        raise UsageError(f"limit must be an integer from 1 to {MAX_FAN_PAGE}, not {limit}")
    failed_only = _flag(request, "failed")
    if chosen is not None and chosen not in {fan.first_seq for fan in fans}:
        raise UsageError(f"run {run_id!r} has no fan starting at seq {chosen}")
    pages: dict[int, tuple[FanPage | None, bool]] = {}
    for fan in fans:
        if fan.size <= FOLD_WIDTH and fan.first_seq != chosen:
            # A narrow fan's members stand in the timeline themselves.
            continue
        failed = bool(fan.counts.get("failed"))
        start, size = 0, FAN_PAGE
        if fan.first_seq == chosen:
            failed = failed if failed_only is None else failed_only
            start, size = offset, limit
        try:
            members: FanPage | None = await source.fan_page(
                run_id, fan.first_seq, offset=start, limit=size, failed=failed
            )
        except UsageError:
            # Its first member is being recorded again (a retry deleted
            # it): the page shows the fan's bar until it is back.
            members = None
        pages[fan.first_seq] = (members, failed)
    return pages


async def run_page(request: Request) -> Response:
    """``/runs/{id}``: the run's header, lineage, timeline with wide fans
    folded, each fan's progress and a page of its members, and actions."""
    source = _source(request)
    run_id: str = request.path_params["run_id"]
    detail = await source.run_detail(run_id)
    handles = _HANDLER_ID.match(detail.run.id)
    chain = lineage(detail.run.id)
    return page_response(
        request,
        "run.html",
        title=f"Run {detail.run.id}",
        nav="runs",
        detail=detail,
        run=detail.run,
        ancestors=list(reversed(chain[1:])),
        handles=None if handles is None else handles.group("handles"),
        fan_pages=await _fan_pages(request, detail.run.id, detail.fans),
        paused=[
            entry for entry in detail.timeline if isinstance(entry, HistoryEntry) and entry.paused
        ],
        fold_width=FOLD_WIDTH,
        fan_page_size=FAN_PAGE,
        retried_rows=RETRIED_ROWS,
        stream=await _stream_tail(source, detail.run.id),
        # How long pending steps have been out, as of this page.
        now=source.clock.now(),
    )


RETRIED_ROWS: Final = 100
"""The most operations of one retry the run page lists (the run's history
in the API has every one)."""


STREAM_TAIL: Final = 50
"""The most values of a run's stream its page shows: the last ones."""


async def _stream_tail(source: ConsoleSource, run_id: str) -> dict[str, Any] | None:
    """How many values the run emitted and the last `STREAM_TAIL` of them
    (offset, value as JSON text); None if it emitted none. The page's live
    refresh follows it: each emit changes the run's stamp."""
    store = source.store
    head = [r for r in await store.get_records(run_id) if r.kind == STREAM_HEAD]
    if not head or head[0].output is None:
        return None
    count = int(head[0].output)
    first = max(0, count - STREAM_TAIL)
    after = None if first == 0 else offset_key(first - 1)
    rows = await store.list_values(stream_scope(run_id), after=after, limit=STREAM_TAIL)
    return {
        "count": count,
        "first": first,
        "values": [(first + i, row.value) for i, row in enumerate(rows)],
    }


# -- the fleet and the queues -------------------------------------------------------


async def fleet_page(request: Request) -> Response:
    """``/fleet``: worker groups, live workers and what they announce,
    their disagreements, and on-error routes nothing serves."""
    source = _source(request)
    try:
        fleet = await source.fleet()
        unserved = await source.unserved_on_error_routes()
    except UsageError:
        # A client opened without a broker cannot see workers.
        fleet, unserved = None, []
    groups: dict[str, list[str]] = {}
    for worker in fleet.workers if fleet is not None else ():
        for group in worker.groups:
            groups.setdefault(group, []).append(worker.instance_id)
    return page_response(
        request,
        "fleet.html",
        title="Fleet",
        nav="fleet",
        fleet=fleet,
        groups=sorted(groups.items()),
        unserved=unserved,
    )


async def queues_page(request: Request) -> Response:
    """``/queues``: each flow-control queue's limit (when the source has an
    app registering it), the steps admitted (holding a slot) and waiting."""
    source = _source(request)
    app = source.app
    registered = {queue.name: queue for queue in app.queues} if app is not None else {}
    depths = {depth.queue: depth for depth in await source.store.queue_depths()}
    rows: list[dict[str, Any]] = []
    for name in sorted(registered.keys() | depths.keys()):
        queue, depth = registered.get(name), depths.get(name)
        rows.append(
            {
                "name": name,
                "limit": None if queue is None else queue.concurrency,
                "priority": None if queue is None else queue.priority,
                "admitted": 0 if depth is None else depth.admitted,
                "waiting": 0 if depth is None else depth.waiting,
            }
        )
    return page_response(request, "queues.html", title="Queues", nav="queues", queues=rows)


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
        Route("/fleet", fleet_page, methods=["GET"]),
        Route("/queues", queues_page, methods=["GET"]),
        Route("/breakpoints", breakpoints_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
    ]


def error_page(request: Request, status: int, message: str) -> Response:
    """The page answering an error on a page route."""
    return error_response(request, status, message)
