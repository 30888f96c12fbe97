"""The JSON API: runs, a run's detail, history and fan pages, ``/metrics``,
and the actions on a run (the fleet and the queues are `_fleet`'s).

The reads go through the console's source (`Engine` or `Client`) as any
caller's would; `_json` makes their answers, `_params` reads their query
parameters and `_etags` answers a run's detail and fan pages 304 from one
payload-free read (docs/http-api.md).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .._base._bounds import MAX_INTEGER
from .._base._exceptions import UsageError
from .._base._search_values import parse_where
from .._features.search._search_attributes import stored_types
from .._front._queries import handed_to
from . import _params
from ._app import ApiError, console_of, read_object
from ._etags import etag, matches, not_modified, read_stamp
from ._json import Paths, detail_json, fan_page_json, history_json, run_page_json
from ._stream import stream_route

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of the Prometheus text exposition format."""


def namespace_of(request: Request) -> str | None:
    """The ``namespace`` query parameter, if given."""
    return request.query_params.get("namespace")


async def _signal(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "bad_request", "a signal needs a non-empty string 'name'")
    run_id = request.path_params["run_id"]
    await console.source.signal(run_id, name, body.get("payload"), namespace=namespace_of(request))
    return JSONResponse({"run_id": run_id, "signalled": name}, status_code=202)


async def _cancel(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    compensate = body.get("compensate", False)
    if not isinstance(compensate, bool):
        raise ApiError(400, "bad_request", "'compensate' must be true or false")
    run_id = request.path_params["run_id"]
    await console.source.cancel(run_id, compensate=compensate, namespace=namespace_of(request))
    return JSONResponse({"run_id": run_id, "cancelled": True, "compensate": compensate}, 202)


async def _retry(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    run_id = request.path_params["run_id"]
    from_seq = _seq_of(body)
    run = await console.source.retry(run_id, namespace=namespace_of(request), from_seq=from_seq)
    return JSONResponse({"run_id": run.id, "status": run.status}, status_code=202)


def _seq_of(body: dict[str, Any], *, required: bool = False) -> int | None:
    """The body's ``from_seq`` (a whole number; null or absent: None)."""
    from_seq = body.get("from_seq")
    if from_seq is None and not required:
        return None
    if isinstance(from_seq, bool) or not isinstance(from_seq, int):
        raise ApiError(400, "bad_request", "'from_seq' must be a whole number")
    return from_seq


async def _fork(request: Request) -> JSONResponse:
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    from_seq = _seq_of(body, required=True)
    assert from_seq is not None
    new_run_id = body.get("new_run_id")
    if new_run_id is not None and not isinstance(new_run_id, str):
        raise ApiError(400, "bad_request", "'new_run_id' must be a string or null")
    run_id = request.path_params["run_id"]
    fork = await console.source.fork(
        run_id, from_seq=from_seq, new_run_id=new_run_id or None, namespace=namespace_of(request)
    )
    answer = {"run_id": fork.id, "status": fork.status, "forked_from": run_id}
    return JSONResponse({**answer, "from_seq": from_seq}, status_code=201)


def _paths(request: Request) -> Paths:
    # Mounted under a prefix, links carry it.
    return Paths(str(request.scope.get("root_path", "")))


def _json(data: Any, tag: str | None = None) -> JSONResponse:
    headers = None if tag is None else {"ETag": tag, "Cache-Control": "no-cache"}
    return JSONResponse(data, headers=headers)


async def _runs(request: Request) -> JSONResponse:
    filters = _params.run_filters(request)
    source = console_of(request).source
    try:
        where = request.query_params.getlist("where")
        if where:
            # NAME=VALUE, typed as the store records the attribute.
            filters["search_attributes"] = parse_where(where, await stored_types(source.store))
        page = await source.list_runs(**filters)
    except UsageError as exc:
        # The filters' values that only the query checks (statuses, cursor).
        raise ApiError(400, "bad_parameter", str(exc)) from None
    return _json(run_page_json(page, await handed_to(source.store, page.runs), _paths(request)))


async def _run_detail(request: Request) -> Response:
    _params.only(request, {"namespace"})
    namespace = _params.namespace(request)
    source = console_of(request).source
    run_id = request.path_params["run_id"]
    stamp = await read_stamp(source.store, run_id, namespace)
    tag = etag(stamp, "run")
    if matches(request, tag):
        return not_modified(tag)
    detail = await source.run_detail(run_id, namespace=namespace)
    return _json(detail_json(detail, _paths(request)), tag)


async def _history(request: Request) -> JSONResponse:
    _params.only(request, {"namespace"})
    namespace = _params.namespace(request)
    run_id = request.path_params["run_id"]
    history = await console_of(request).source.history(run_id, namespace=namespace)
    return _json(history_json(history, _paths(request)))


async def _fan_page(request: Request) -> Response:
    _params.only(request, _params.FAN_PARAMETERS)
    namespace = _params.namespace(request)
    fan = _params.whole_number(
        "group (a fan's first seq)", request.path_params["group"], -MAX_INTEGER
    )
    offset = _params.integer(request, "offset", 0, 0)
    limit = _params.limit(request)
    failed = _params.boolean(request, "failed")
    source = console_of(request).source
    run_id = request.path_params["run_id"]
    stamp = await read_stamp(source.store, run_id, namespace)
    tag = etag(stamp, "fan", fan, offset, limit, failed)
    if matches(request, tag):
        return not_modified(tag)
    try:
        page = await source.fan_page(
            run_id, fan, offset=offset, limit=limit, failed=failed, namespace=namespace
        )
    except UsageError as exc:
        # Every argument was checked above: what is left is a run without
        # a fan at that seq, a resource that is not there.
        raise ApiError(404, "fan_not_found", str(exc)) from None
    return _json(fan_page_json(page, failed, _paths(request)), tag)


async def _metrics(request: Request) -> Response:
    metrics = getattr(console_of(request).source, "metrics", None)
    if metrics is None:
        raise ApiError(404, "no_metrics", "a client keeps no metrics: scrape the engines' /metrics")
    return Response(metrics(), media_type=PROMETHEUS_TEXT)


def api_routes() -> list[BaseRoute]:
    """The routes under ``/api`` and ``/metrics``."""
    return [
        Route("/api/runs", _runs, methods=["GET"]),
        Route("/api/runs/{run_id}", _run_detail, methods=["GET"]),
        Route("/api/runs/{run_id}/history", _history, methods=["GET"]),
        Route("/api/runs/{run_id}/fans/{group}", _fan_page, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        Route("/api/runs/{run_id}/signal", _signal, methods=["POST"]),
        Route("/api/runs/{run_id}/cancel", _cancel, methods=["POST"]),
        Route("/api/runs/{run_id}/retry", _retry, methods=["POST"]),
        Route("/api/runs/{run_id}/fork", _fork, methods=["POST"]),
        Route("/api/runs/{run_id}/stream", stream_route, methods=["GET"]),
    ]
