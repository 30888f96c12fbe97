"""The JSON API: runs, a run's detail, history and fan pages, the fleet,
the flow-control queues, and the actions on a run."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from ._app import ApiError, console_of


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body; an empty body is ``{}``.

    Raises:
      ApiError: 400 if the body is not a JSON object.
    """
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, "bad_json", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad_json", "the body must be a JSON object")
    return body


def namespace_of(request: Request) -> str | None:
    """The ``namespace`` query parameter, if given."""
    return request.query_params.get("namespace")


async def _signal(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await json_body(request)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "bad_request", "a signal needs a non-empty string 'name'")
    run_id = request.path_params["run_id"]
    await console.source.signal(run_id, name, body.get("payload"), namespace=namespace_of(request))
    return JSONResponse({"run_id": run_id, "signalled": name}, status_code=202)


async def _cancel(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await json_body(request)
    compensate = body.get("compensate", False)
    if not isinstance(compensate, bool):
        raise ApiError(400, "bad_request", "'compensate' must be true or false")
    run_id = request.path_params["run_id"]
    await console.source.cancel(run_id, compensate=compensate, namespace=namespace_of(request))
    return JSONResponse({"run_id": run_id, "cancelled": True, "compensate": compensate}, 202)


async def _retry(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    await json_body(request)
    run_id = request.path_params["run_id"]
    run = await console.source.retry(run_id, namespace=namespace_of(request))
    return JSONResponse({"run_id": run.id, "status": run.status}, status_code=202)


def api_routes() -> list[BaseRoute]:
    """The routes under ``/api`` and ``/metrics``."""
    return [
        Route("/api/runs/{run_id}/signal", _signal, methods=["POST"]),
        Route("/api/runs/{run_id}/cancel", _cancel, methods=["POST"]),
        Route("/api/runs/{run_id}/retry", _retry, methods=["POST"]),
    ]
