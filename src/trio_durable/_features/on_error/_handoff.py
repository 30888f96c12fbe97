"""On-error handoffs inside the engine: routing a failure, following the
handler, and listing routes nothing serves (see `_on_error` for the rules)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, final

import attrs

from ..._base._exceptions import UnknownWorkflowError
from ..._base._on_error import (
    HANDOFF_BASE,
    NEVER_ROUTED,
    TAG_PREFIX,
    OnError,
    active_handoff,
    handler_input,
    handoffs,
    on_error_tag,
    pick_on_error_route,
    without_on_error_tags,
)
from ..._base._records import Checkpoint, ErrorInfo, Run
from ..._brokers._base import BrokerError
from ..._kernel._fleet import aggregate
from ..._kernel._hooks import Feature
from ..._stores._ops import CreateRun
from ..children._children import completion_source, record_child
from ..flow_control._admission import let_in, release_ops

if TYPE_CHECKING:
    from ..._brokers._base import Broker
    from ..._kernel._catalogue import Catalogue
    from ..._kernel._definitions import Registry, Workflow
    from ..._kernel._runtime import Runtime
    from ..._kernel._turn import Turn
    from ..._stores._base import Store

logger = logging.getLogger("trio_durable")


@final
@attrs.define(frozen=True, kw_only=True)
class UnservedRoute:
    """An on-error route whose handler nothing here or in the fleet runs.

    Attributes:
      workflow: The workflow declaring the route.
      version: Its version.
      code: The route's code (None for the catch-all).
      handler: The handler workflow's name that nothing serves.
    """

    workflow: str
    version: str
    code: str | None
    handler: str


async def on_error_routes_in_doubt(catalogue: Catalogue, workflow: str) -> str | None:
    """Why the fleet's routes for ``workflow`` cannot be trusted now (live
    workers announce different route sets: a rollout), or None. The
    announcements are read through the catalogue's cache, so a burst of
    failures costs one read."""
    fleet = aggregate(list(await catalogue.descriptors()))
    for disagreement in fleet.disagreements:
        if disagreement.kind == "on_error" and disagreement.subject == workflow:
            sets = "; ".join(
                f"{', '.join(who)}: {value}" for value, who in disagreement.values.items()
            )
            return f"live workers announce different on-error routes for {workflow!r}: {sets}"
    return None


def handler_workflow(app: Registry, name: str) -> tuple[str, str]:
    """The (name, version) a handler child runs: the version registered
    here last, else "1" for an engine of another deploy to run."""
    try:
        wf = app.get_workflow(name)
    except UnknownWorkflowError:
        return name, "1"
    return wf.name, wf.version


async def hand_off(turn: Turn, on_error: OnError, error: ErrorInfo) -> None:
    """Hand the failed run to the handler ``on_error`` routes it to, in one write: the
    handoff checkpoint, the handler's run and the run's tag."""
    rt, state = turn.runtime, turn.state
    run = state.run
    attempt = len(handoffs(state.checkpoints))
    seq = HANDOFF_BASE + attempt
    handler_id = f"{run.id}.onError.{attempt}"
    name, version = handler_workflow(rt.app, on_error.workflow)
    now = rt.clock.now()
    input_json = handler_input(run, error)
    record_child(
        state, (name, version), seq, handler_id, input_json, now, awaited=True, error=error
    )
    tags = (*without_on_error_tags(run.tags), on_error_tag(on_error))
    # Handed off, the run gives its admission back as if it ended. It waits
    # for its handler, and for its deadline: that still cancels it (and the
    # handler it awaits) at its time.
    wake_at = rt.features.wake_by(turn, None)
    final = [
        *release_ops(state, now),
        turn.fence(
            {"status": "suspended", "wake_at": wake_at, "tags": tags}, frozenset({"running"})
        ),
    ]
    results = await turn.write(*final)
    if results is None:
        return
    await turn.after_commit(results)
    let_in(rt, final, results)
    rt.telemetry.emit_run(
        "run.routed", run, code=error.code, handler=handler_id, workflow_handler=name
    )


async def follow_handoff(turn: Turn, handoff: Checkpoint) -> None:
    """A turn of a run that handed off: it only follows its handler."""
    rt, state = turn.runtime, turn.state
    run = state.run
    if handoff.status == "pending":
        # The handler's run was created with the handoff; creating it
        # again is a no-op, and starts it if that write was ever lost.
        name, version = handler_workflow(rt.app, handoff.name)
        assert handoff.child_id is not None
        now = rt.clock.now()
        handler = Run(
            id=handoff.child_id,
            workflow=name,
            version=version,
            namespace=run.namespace,
            input=handoff.input or "[]",
            parent_id=run.id,
            parent_seq=handoff.seq,
            created_at=now,
            updated_at=now,
        )
        state.ops.append(CreateRun(handler))
        state.wake_after.append(handler.id)
        wake_at = rt.features.wake_by(turn, None)
        results = await turn.write(
            turn.fence({"status": "suspended", "wake_at": wake_at}, frozenset({"running"}))
        )
        if results is not None:
            await turn.after_commit(results)
        return
    outcome = json.loads(handoff.output) if handoff.output else {}
    if handoff.status == "completed" and outcome.get("ok"):
        value = json.dumps(outcome.get("value"), separators=(",", ":"))
        # The output is the handler's: a parent that awaits this run types
        # it by the handler's return annotation, not this run's.
        source = None if run.parent_id is None else await handler_source(rt.store, rt.app, handoff)
        await turn.end("completed", output=value, returned_by=source)
        return
    error = ErrorInfo(
        message=str(outcome.get("error") or (handoff.error.message if handoff.error else "failed")),
        code=outcome.get("code"),
        details=outcome.get("details"),
        type="RunFailed",
    )
    await turn.end("failed", error=error)


async def handler_source(store: Store, app: Registry, handoff: Checkpoint) -> tuple[str, str]:
    """The ``(workflow, version)`` whose return annotation types the output
    a completed handoff carries: its handler's, or, if the handler handed
    off in turn, the one its own completion names."""
    outcome = json.loads(handoff.output) if handoff.output else None
    if isinstance(outcome, dict):
        source = completion_source(outcome)
        if source is not None:
            return source
    handler = None if handoff.child_id is None else await store.get_run(handoff.child_id)
    if handler is not None:
        return handler.workflow, handler.version
    return handler_workflow(app, handoff.name)


async def output_source(store: Store, app: Registry, run: Run) -> tuple[str, str] | None:
    """For a completed run that ended as its on-error handler did, the
    ``(workflow, version)`` whose return annotation types its output; None
    for a run whose output is its own workflow's."""
    if not any(tag.startswith(TAG_PREFIX) for tag in run.tags):
        # Only a run that handed off (and was not retried since) has the tag.
        return None
    found = await store.get_checkpoints(run.id, HANDOFF_BASE)
    handoff = active_handoff({cp.seq: cp for cp in found})
    if handoff is None or handoff.status != "completed":
        return None
    return await handler_source(store, app, handoff)


async def unserved_on_error_routes(broker: Broker, app: Registry) -> list[UnservedRoute]:
    """Routes whose handler workflow is neither registered on this engine
    nor known to any live worker: likely a typo in a handler's name."""
    try:
        descriptors = await broker.worker_descriptors()
    except BrokerError as exc:
        logger.warning("cannot read worker announcements: %s", exc)
        descriptors = []
    served = {name for d in descriptors for name in d.workflows}
    local = {wf.name for wf in app.workflows}
    unserved: list[UnservedRoute] = []
    for wf in app.workflows:
        for on_error in wf.on_error:
            if on_error.workflow not in local and on_error.workflow not in served:
                entry = UnservedRoute(
                    workflow=wf.name,
                    version=wf.version,
                    code=on_error.code,
                    handler=on_error.workflow,
                )
                if entry not in unserved:
                    unserved.append(entry)
    return unserved


@final
class Handoffs(Feature):
    """On-error handoffs: a failed run handed to the handler its routes
    pick, and the turns of a run that follows its handler."""

    async def take_turn(self, turn: Turn, now: float) -> bool:
        handoff = active_handoff(turn.state.checkpoints)
        if handoff is None:
            return False
        await follow_handoff(turn, handoff)
        return True

    async def failed(self, turn: Turn, wf: Workflow[..., Any] | None, error: ErrorInfo) -> bool:
        if wf is None:
            return await _route_remote(turn, error)
        rt = turn.runtime
        on_error = pick_on_error_route(wf.on_error, error)
        if on_error is None:
            return False
        reason = await on_error_routes_in_doubt(rt.catalogue, wf.name)
        if reason is not None:
            rt.telemetry.emit_run("run.unrouted", turn.state.run, code=error.code, reason=reason)
            return False
        logger.warning(
            "run %r (workflow %r) failed%s: %s; handing it to %r",
            turn.state.run.id,
            turn.state.run.workflow,
            "" if error.step is None else f" in step {error.step!r}",
            error.message,
            on_error.workflow,
        )
        await hand_off(turn, on_error, error)
        return True


async def on_error_routes(rt: Runtime, run: Run) -> tuple[OnError, ...] | str:
    """A remote workflow's on-error routes: its own if this engine
    registers its body, else those its live workers agree on (or why they
    cannot be trusted)."""
    if rt.app.has_workflow(run.workflow, run.version):
        wf = rt.app.get_workflow(run.workflow, run.version)
        if wf.on_error:
            return wf.on_error
    routes = await rt.catalogue.on_error_routes(run.workflow, run.version)
    if routes == ():
        # No live worker announces it, yet one just decided it: what was
        # read may predate the workers (read as the engine opened), so read
        # afresh before ending the run unrouted, for good.
        rt.catalogue.invalidate()
        routes = await rt.catalogue.on_error_routes(run.workflow, run.version)
    return routes


async def _route_remote(turn: Turn, error: ErrorInfo) -> bool:
    """A remote workflow's body failed (its undos ran on the worker): hand
    the run to the handler its routes pick; False if none does."""
    rt, state = turn.runtime, turn.state
    if error.code in NEVER_ROUTED:
        return False
    routes = await on_error_routes(rt, state.run)
    if isinstance(routes, str):
        rt.telemetry.emit_run("run.unrouted", state.run, code=error.code, reason=routes)
        return False
    route = pick_on_error_route(routes, error)
    if route is None:
        return False
    logger.warning(
        "run %r (workflow %r) failed: %s; handing it to %r",
        state.run.id,
        state.run.workflow,
        error.message,
        route.workflow,
    )
    await hand_off(turn, route, error)
    return True
