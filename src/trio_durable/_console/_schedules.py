"""The schedules: ``/schedules`` (the page) and the JSON API under
``/api/schedules``.

Reading needs no token; pausing, resuming and triggering a schedule need
it, as every action. An unknown schedule is a 404 ``schedule_not_found``
(the application maps `ScheduleNotFoundError`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .._kernel._views import plain
from . import _params
from ._app import console_of
from ._render import page_response

if TYPE_CHECKING:
    from .._features.schedules._schedule_spec import ScheduleInfo


def schedule_json(info: ScheduleInfo) -> dict[str, Any]:
    """A schedule as the API answers it: every field of `ScheduleInfo`
    (times are seconds since the epoch)."""
    data: dict[str, Any] = plain(info)
    return data


async def list_schedules(request: Request) -> JSONResponse:
    """``GET /api/schedules``: every schedule, by name."""
    _params.only(request, ())
    schedules = await console_of(request).source.list_schedules()
    return JSONResponse({"schedules": [schedule_json(info) for info in schedules]})


async def get_schedule(request: Request) -> JSONResponse:
    """``GET /api/schedules/{name}``."""
    _params.only(request, ())
    info = await console_of(request).source.get_schedule(request.path_params["name"])
    return JSONResponse(schedule_json(info))


async def pause(request: Request) -> JSONResponse:
    """``POST /api/schedules/{name}/pause``."""
    console = console_of(request)
    console.check_token(request)
    info = await console.source.pause_schedule(request.path_params["name"])
    return JSONResponse(schedule_json(info))


async def resume(request: Request) -> JSONResponse:
    """``POST /api/schedules/{name}/resume``."""
    console = console_of(request)
    console.check_token(request)
    info = await console.source.resume_schedule(request.path_params["name"])
    return JSONResponse(schedule_json(info))


async def trigger(request: Request) -> JSONResponse:
    """``POST /api/schedules/{name}/trigger``: start one run now (paused
    or not); answers the run's id."""
    console = console_of(request)
    console.check_token(request)
    name = request.path_params["name"]
    handle = await console.source.trigger_schedule(name)
    return JSONResponse({"schedule": name, "run_id": handle.id}, status_code=202)


async def schedules_page(request: Request) -> Response:
    """``/schedules``: each schedule's cron, next tick, last run, counts of
    started, skipped, missed and triggered ticks, and its actions."""
    schedules = await console_of(request).source.list_schedules()
    return page_response(
        request, "schedules.html", title="Schedules", nav="schedules", schedules=schedules
    )


def schedule_routes() -> list[BaseRoute]:
    """The schedules' page and API routes."""
    return [
        Route("/schedules", schedules_page, methods=["GET"]),
        Route("/api/schedules", list_schedules, methods=["GET"]),
        Route("/api/schedules/{name}", get_schedule, methods=["GET"]),
        Route("/api/schedules/{name}/pause", pause, methods=["POST"]),
        Route("/api/schedules/{name}/resume", resume, methods=["POST"]),
        Route("/api/schedules/{name}/trigger", trigger, methods=["POST"]),
    ]
