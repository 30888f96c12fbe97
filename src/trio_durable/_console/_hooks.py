"""The webhook and breakpoint routes: ``POST /hooks/{token}`` and the
breakpoint actions.

``POST /hooks/{token}`` needs no bearer token: the webhook's token is the
credential. It is looked up before a byte of the body is read, so an
unknown (404) or used (409) token is answered at once, whatever the body's
size; a console that does not deliver webhooks (a read-only one, unless
its options enable them) answers 403 first. Its JSON body (an empty body
is null), read under the console's limits, is the payload; it answers 202
``{"delivered": true}``, and 409 for a run that ended. Reading breakpoints
needs no token; setting, clearing, continuing and skipping do, as every
action.

Errors are the library's, which the application turns into JSON bodies.
"""

from __future__ import annotations

from typing import Any

import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .._base._exceptions import WebhookNotFoundError, WebhookUsedError
from .._features.hooks._webhooks import token_hash
from ._app import console_of, read_json, read_object


async def deliver(request: Request) -> JSONResponse:
    """``POST /hooks/{token}``: deliver the body through the webhook."""
    console = console_of(request)
    console.check_webhooks()
    token: str = request.path_params["token"]
    hook = await console.source.store.get_webhook(token_hash(token))
    if hook is None:
        raise WebhookNotFoundError("no webhook has this token")
    if hook.used_at is not None:
        raise WebhookUsedError("this webhook was delivered already")
    payload = await read_json(request)
    # It checks the token again: another delivery may have won meanwhile.
    await console.source.deliver_webhook(token, payload)
    return JSONResponse({"delivered": True}, status_code=202)


def _breakpoint_json(bp: Any) -> dict[str, Any]:
    return attrs.asdict(bp)


async def list_breakpoints(request: Request) -> JSONResponse:
    """``GET /api/breakpoints``: the breakpoints, and the runs paused at them."""
    source = console_of(request).source
    breakpoints = await source.breakpoints()
    paused = await source.paused_steps()
    return JSONResponse(
        {
            "breakpoints": [_breakpoint_json(bp) for bp in breakpoints],
            "paused": [attrs.asdict(p) for p in paused],
        }
    )


async def set_breakpoint(request: Request) -> JSONResponse:
    """``POST /api/breakpoints`` with ``{"workflow": ..., "step": ...}``."""
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    # Checked there: a missing or empty name is a UsageError (400).
    workflow: Any = body.get("workflow")
    step: Any = body.get("step")
    bp = await console.source.set_breakpoint(workflow=workflow, step=step)
    return JSONResponse(_breakpoint_json(bp), status_code=201)


async def clear_breakpoint(request: Request) -> JSONResponse:
    """``DELETE /api/breakpoints/{id}``."""
    console = console_of(request)
    console.check_token(request)
    await console.source.clear_breakpoint(request.path_params["breakpoint_id"])
    return JSONResponse({"cleared": True})


async def continue_run(request: Request) -> JSONResponse:
    """``POST /api/runs/{id}/continue``: the paused step runs."""
    console = console_of(request)
    console.check_token(request)
    await console.source.continue_run(request.path_params["run_id"])
    return JSONResponse({"continued": True})


async def skip_step(request: Request) -> JSONResponse:
    """``POST /api/runs/{id}/skip`` with ``{"output": ...}``: the paused
    step is recorded as returning ``output``."""
    console = console_of(request)
    console.check_token(request)
    body = await read_object(request)
    await console.source.skip_step(request.path_params["run_id"], body.get("output"))
    return JSONResponse({"skipped": True})


def hook_routes() -> list[BaseRoute]:
    """The routes of webhooks and breakpoints."""
    return [
        Route("/hooks/{token}", deliver, methods=["POST"]),
        Route("/api/breakpoints", list_breakpoints, methods=["GET"]),
        Route("/api/breakpoints", set_breakpoint, methods=["POST"]),
        Route("/api/breakpoints/{breakpoint_id}", clear_breakpoint, methods=["DELETE"]),
        Route("/api/runs/{run_id}/continue", continue_run, methods=["POST"]),
        Route("/api/runs/{run_id}/skip", skip_step, methods=["POST"]),
    ]
