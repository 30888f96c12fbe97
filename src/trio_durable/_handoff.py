"""On-error handoffs inside the engine: routing a failure, following the
handler, and listing routes nothing serves (see `_on_error` for the rules)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, final

import attrs

from ._admission import let_in, release_ops
from ._brokers._base import BrokerError
from ._children import completion_source, record_child
from ._exceptions import UnknownWorkflowError
from ._fleet import aggregate
from ._lifecycle import wake_by_deadline
from ._on_error import (
    HANDOFF_BASE,
    TAG_PREFIX,
    OnError,
    active_handoff,
    handler_input,
    handoffs,
    on_error_tag,
    without_on_error_tags,
)
from ._records import Checkpoint, ErrorInfo, Run
from ._stores._ops import CreateRun

if TYPE_CHECKING:
    from ._app import App
    from ._brokers._base import Broker
    from ._catalogue import Catalogue
    from ._stores._base import Store
    from ._turn import Turn

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


def handler_workflow(app: App, name: str) -> tuple[str, str]:
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
    wake_at = wake_by_deadline(state.records, None)
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
        wake_at = wake_by_deadline(state.records, None)
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


async def handler_source(store: Store, app: App, handoff: Checkpoint) -> tuple[str, str]:
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


async def output_source(store: Store, app: App, run: Run) -> tuple[str, str] | None:
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


async def unserved_on_error_routes(broker: Broker, app: App) -> list[UnservedRoute]:
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
