"""Bulk actions from the console: ``POST /api/bulk/{action}`` counts (a dry
run) or starts a cancel, retry or terminate of every run a selection
matches, and ``GET /api/bulk/{operation}`` tells how far it went.

An operation runs through the source's ``cancel_many``, ``retry_many`` or
``terminate_many`` as a task of the console's `BulkOperations`, so a
request never waits for the whole operation (see `_bulk_operations`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .._base._search_values import parse_where
from .._features.search._search_attributes import stored_types
from .._front._front_bulk import BulkAction, BulkProgress, BulkReport, RunSelection
from ._app import ApiError, console_of, read_object
from ._bulk_operations import report_json

if TYPE_CHECKING:
    from ._app import ConsoleSource

_SELECTION_KEYS: Final = frozenset(
    {
        "status",
        "workflow",
        "namespace",
        "tags",
        "created_after",
        "created_before",
        "where",
        "id_prefix",
        "top_level",
        "parent_id",
        "code",
    }
)
_BODY_KEYS: Final[dict[str, frozenset[str]]] = {
    "cancel": frozenset({"selection", "dry_run", "batch_size", "compensate"}),
    "retry": frozenset({"selection", "dry_run", "batch_size"}),
    "terminate": frozenset({"selection", "dry_run", "batch_size", "reason"}),
}
# The console offers these (pruning runs is the CLI's and the client's).
_ACTIONS: Final[tuple[str, ...]] = tuple(_BODY_KEYS)


def _instant(name: str, value: object) -> float | datetime.datetime | None:
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ApiError(
                400, "bad_request", f"{name!r} must be seconds since the epoch or ISO 8601"
            ) from None
        if moment.tzinfo is None:
            raise ApiError(400, "bad_request", f"{name!r} needs its offset (Z or +hh:mm)")
        return moment
    return cast("float | None", value)


async def selection_of(source: ConsoleSource, given: object) -> RunSelection:
    """The `RunSelection` of a body's ``selection`` object: the filters of
    ``GET /api/runs`` (``where``: a list of ``NAME=VALUE`` conditions) and
    ``code``. Values of a wrong type are refused by the action itself.

    Raises:
      ApiError: 400 if it is not an object or has a key of no filter.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ApiError(400, "bad_request", "'selection' must be a JSON object of filters")
    unknown = sorted(set(given) - _SELECTION_KEYS)
    if unknown:
        raise ApiError(
            400,
            "bad_request",
            f"'selection' takes no {', '.join(map(repr, unknown))};"
            f" it takes {', '.join(sorted(_SELECTION_KEYS))}",
        )
    where = given.get("where") or []
    if isinstance(where, str):
        where = [where]
    if not _strings(where):
        raise ApiError(400, "bad_request", "'where' must be a list of NAME=VALUE conditions")
    search = parse_where(where, await stored_types(source.store)) if where else None
    status = given.get("status") or None
    if isinstance(status, str):
        status = [status]
    if status is not None and not _strings(status):
        raise ApiError(400, "bad_request", "'status' must be a run status or a list of them")
    tags = given.get("tags") or []
    if isinstance(tags, str):
        tags = [tags]
    if not _strings(tags):
        raise ApiError(400, "bad_request", "'tags' must be a list of tags")
    top_level = given.get("top_level", False)
    if not isinstance(top_level, bool):
        raise ApiError(400, "bad_request", "'top_level' must be true or false")
    return RunSelection(
        status=status,
        workflow=given.get("workflow") or None,
        namespace=given.get("namespace") or None,
        tags=tags,
        created_after=_instant("created_after", given.get("created_after")),
        created_before=_instant("created_before", given.get("created_before")),
        search_attributes=search,
        code=given.get("code") or None,
        top_level=top_level,
        id_prefix=given.get("id_prefix") or None,
        parent_id=given.get("parent_id") or None,
    )


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, "bad_request", f"{name!r} must be true or false")
    return value


async def start_bulk(request: Request) -> JSONResponse:
    """``POST /api/bulk/{action}``: a dry run (``"dry_run": true``: the
    count and the first ids, 200), or the operation started (202, with its
    name and the route of its progress). Starting needs the token."""
    action = request.path_params["action"]
    if action not in _ACTIONS:
        raise ApiError(
            404, "no_such_action", f"no bulk action {action!r}: one of {', '.join(_ACTIONS)}"
        )
    bulk_action = cast(BulkAction, action)
    console = console_of(request)
    body = await read_object(request)
    unknown = sorted(set(body) - _BODY_KEYS[bulk_action])
    if unknown:
        raise ApiError(
            400,
            "bad_request",
            f"a bulk {action} takes no {', '.join(map(repr, unknown))};"
            f" it takes {', '.join(sorted(_BODY_KEYS[bulk_action]))}",
        )
    dry_run = _flag(body, "dry_run")
    if not dry_run:
        console.check_token(request)
    source = console.source
    selection = await selection_of(source, body.get("selection"))
    options: dict[str, Any] = {}
    if "batch_size" in body:
        options["batch_size"] = body["batch_size"]
    if action == "cancel":
        options["compensate"] = _flag(body, "compensate")
    if action == "terminate":
        options["reason"] = body.get("reason")
    method = {
        "cancel": source.cancel_many,
        "retry": source.retry_many,
        "terminate": source.terminate_many,
    }[bulk_action]
    name = selection.key(bulk_action)
    # Checks the selection and counts: an error is this request's answer,
    # not the operation's.
    preview = await method(selection, operation=name, dry_run=True, **options)
    if dry_run:
        return JSONResponse(report_json(preview))

    async def act(on_progress: Callable[[BulkProgress], None]) -> BulkReport:
        return await method(selection, operation=name, on_progress=on_progress, **options)

    bulk = console.bulk
    if not bulk.is_open:
        raise ApiError(
            503,
            "no_lifespan",
            "bulk actions run in the console's own nursery, which its lifespan opens:"
            " serve it with serve_console, or run the application's lifespan",
        )
    operation = bulk.start(name, bulk_action, preview.matched, act)
    if operation is None:
        raise ApiError(409, "bulk_running", f"the bulk operation {name!r} is running already")
    root = str(request.scope.get("root_path", ""))
    return JSONResponse(
        {**operation.to_json(), "progress": f"{root}/api/bulk/{name}"}, status_code=202
    )


async def bulk_progress(request: Request) -> JSONResponse:
    """``GET /api/bulk/{operation}``: how far an operation this console
    started went."""
    name = request.path_params["operation"]
    operation = console_of(request).bulk.get(name)
    if operation is None:
        raise ApiError(
            404, "bulk_not_found", f"this console started no bulk operation {name!r} (or forgot it)"
        )
    return JSONResponse(operation.to_json())


async def bulk_list(request: Request) -> JSONResponse:
    """``GET /api/bulk``: the operations this console remembers, newest
    first."""
    return JSONResponse({"operations": [op.to_json() for op in console_of(request).bulk.recent()]})


def bulk_routes() -> list[BaseRoute]:
    """The bulk action routes."""
    return [
        Route("/api/bulk", bulk_list, methods=["GET"]),
        Route("/api/bulk/{action}", start_bulk, methods=["POST"]),
        Route("/api/bulk/{operation}", bulk_progress, methods=["GET"]),
    ]
