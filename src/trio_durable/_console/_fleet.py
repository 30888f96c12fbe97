"""The fleet, the queues and the deployments: ``/fleet``, ``/queues`` and
``/deployments`` (the pages), ``GET /api/fleet``, ``GET /api/queues`` and
``GET /api/deployments``, and ``POST /api/deployments/{workflow}/current``,
which sets a workflow's current build (with the token).

The fleet is what live workers announce (`fleet_report`): per worker its
heartbeat age and load, per group route its live workers, their tasks in
flight and completed per minute, and the broker's backlog. The queues are
the flow-control queues the store counts, beside the broker's backlog per
group route. Both read the broker through the console's source: a client
opened without one shows no fleet (the API answers 503 ``no_broker``) and
no backlog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .._features.deployments._deployments import current_builds
from .._front._fleet_report import GroupLoad, fleet_report, group_loads
from .._kernel._views import plain
from . import _params
from ._app import ApiError, console_of, read_object
from ._json import fleet_json
from ._render import page_response

if TYPE_CHECKING:
    from ._app import ConsoleSource


def _no_broker() -> ApiError:
    return ApiError(
        503, "no_broker", "the fleet is read from the broker: give the console a broker URL"
    )


async def flow_queues(source: ConsoleSource) -> list[dict[str, Any]]:
    """Each flow-control queue: its limit and priority (when the source
    has an app registering it), the steps admitted (holding a slot) and
    waiting, by name."""
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
    return rows


async def broker_backlogs(source: ConsoleSource) -> tuple[GroupLoad, ...] | None:
    """Each group route's load and backlog, or None without a broker."""
    if source.broker is None:
        return None
    return await group_loads(source.broker, await source.broker.worker_descriptors(), source.app)


def _backlog_json(load: GroupLoad) -> dict[str, Any]:
    return {"route": load.route, "backlog": load.backlog, "queues": list(load.queues)}


async def fleet_api(request: Request) -> JSONResponse:
    """``GET /api/fleet``: the fleet report (`fleet_json`)."""
    _params.only(request, ())
    source = console_of(request).source
    if source.broker is None:
        raise _no_broker()
    report = await fleet_report(source.broker, source.app, await current_builds(source.store))
    return JSONResponse(fleet_json(report))


async def queues_api(request: Request) -> JSONResponse:
    """``GET /api/queues``: the flow-control queues, and the broker's
    backlog per group route (``group_backlogs``; null without a broker)."""
    _params.only(request, ())
    source = console_of(request).source
    queues = [
        {key: row[key] for key in ("name", "limit", "admitted", "waiting")}
        for row in await flow_queues(source)
    ]
    backlogs = await broker_backlogs(source)
    return JSONResponse(
        {
            "queues": queues,
            "group_backlogs": None if backlogs is None else [_backlog_json(b) for b in backlogs],
        }
    )


async def fleet_page(request: Request) -> Response:
    """``/fleet``: per group route its live workers, in flight, completed
    per minute and backlog; per worker its heartbeat age, load and what it
    announces; their disagreements, and on-error routes nothing serves."""
    source = console_of(request).source
    report = (
        None
        if source.broker is None
        else await fleet_report(source.broker, source.app, await current_builds(source.store))
    )
    unserved = [] if report is None else await source.unserved_on_error_routes()
    return page_response(
        request,
        "fleet.html",
        title="Fleet",
        nav="fleet",
        report=report,
        fleet=None if report is None else report.fleet,
        unserved=unserved,
    )


async def queues_page(request: Request) -> Response:
    """``/queues``: each flow-control queue's limit, admitted and waiting,
    and the broker's backlog per group route."""
    source = console_of(request).source
    return page_response(
        request,
        "queues.html",
        title="Queues",
        nav="queues",
        queues=await flow_queues(source),
        backlogs=await broker_backlogs(source),
        has_app=source.app is not None,
    )


async def deployments_api(request: Request) -> JSONResponse:
    """``GET /api/deployments``: each workflow's deployment, and per build
    its live workers, open runs and whether it is drained."""
    _params.only(request, ())
    report = await console_of(request).source.deployments()
    return JSONResponse(report.to_json())


async def deployments_page(request: Request) -> Response:
    """``/deployments``: what ``trio-durable deployments list`` shows."""
    source = console_of(request).source
    return page_response(
        request,
        "deployments.html",
        title="Deployments",
        nav="deployments",
        report=await source.deployments(),
        has_broker=source.broker is not None,
    )


async def set_current_build(request: Request) -> JSONResponse:
    """``POST /api/deployments/{workflow}/current``: make the body's
    ``build`` the workflow's current build (with ``ramp``, a percentage,
    only that share of its new runs), as ``trio-durable deployments
    set-current`` does; answers the workflow's deployment."""
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    unknown = sorted(set(body) - {"build", "ramp"})
    if unknown:
        raise ApiError(400, "bad_parameter", f"unknown field {unknown[0]!r}: build, ramp")
    build = body.get("build")
    if not isinstance(build, str):
        raise ApiError(400, "bad_parameter", "build must be a string: the build id")
    ramp = body.get("ramp")
    if ramp is not None and (isinstance(ramp, bool) or not isinstance(ramp, int | float)):
        raise ApiError(400, "bad_parameter", "ramp must be a number (a percentage) or null")
    deployment = await console.source.set_current_build(
        request.path_params["workflow"], build, ramp=ramp
    )
    return JSONResponse(plain(deployment))


def fleet_routes() -> list[BaseRoute]:
    """The fleet's, the queues' and the deployments' page and API routes."""
    return [
        Route("/fleet", fleet_page, methods=["GET"]),
        Route("/queues", queues_page, methods=["GET"]),
        Route("/deployments", deployments_page, methods=["GET"]),
        Route("/api/fleet", fleet_api, methods=["GET"]),
        Route("/api/queues", queues_api, methods=["GET"]),
        Route("/api/deployments", deployments_api, methods=["GET"]),
        Route("/api/deployments/{workflow}/current", set_current_build, methods=["POST"]),
    ]
