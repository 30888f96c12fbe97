"""Decisions: a worker replays a remote workflow's body against its history.

A decision task carries a run and its resolved history (`_decision_wire`).
The worker runs the body with the same `Context` as an engine does, on a
`Replay` whose checkpoints are that history and whose `CommandDecider` watches
every durable operation the body reaches:

- settled in the history: it returns (or raises) what was recorded, as on
  an engine;
- a local step not yet recorded: it runs here, now, with its retries, and
  its checkpoint goes back in the decision;
- anything else not settled (a remote step, a timer, a signal wait, a
  webhook, a child, a fan, a signal sent, an event published, search
  attributes set, an entity call): the body stops there, and the operation
  goes back as the decision's `Command`, for the engine to carry out;
- an emit: the value goes back with the decision, for the engine to write;
- `Context.continue_as_new`: the decision ends with the next generation's
  arguments.

A body that returns or raises ends the decision with its output or error;
a failure first runs the saga's undos here (they are local steps). A
history that the body does not match fails the run with code
``non_determinism``, which is never routed on error. A cancelled run's task
replays the body to deliver `Cancelled` and runs its cleanup (up to an
operation it waits on, which goes back as the command), then the undos if
asked. Nothing here touches a
store: the decision is the only thing the worker writes.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from .._base import _serde
from .._base._clock import Clock
from .._base._exceptions import Cancelled, NonDeterminismError, UnknownWorkflowError, UsageError
from .._base._failures import error_info
from .._base._records import LATEST_VERSION, Checkpoint, ErrorInfo
from .._stores._ops import Op, PutCheckpoint
from .._stores._record_ops import PutRecord
from .._wire._decision_commands import Command
from .._wire._decision_wire import Decision, read_request, request_run
from .._wire._messages import Task
from .._wire._tracing import DISABLED, Tracing
from .._wire._wire_records import DECIDED, records_on_wire
from ._cancellation import CancelDelivery, recorded_delivery
from ._decider import CommandDecider, EagerSteps
from ._definitions import Registry, Workflow, remote_body
from ._hooks import DecisionUpdates, Features
from ._learned import Learned
from ._replay import ContinueAsNew, Replay, Suspend, TurnDraft
from ._webhook_keys import WebhookKeys

if TYPE_CHECKING:
    from .._base._observe import Event

logger = logging.getLogger("trio_durable")

# -- the worker's stand-ins for an engine's parts -------------------------------------


@final
class _Writes:
    """Takes the writes a body's undos make as they end (`compensate`
    writes each at once): they go back in the decision."""

    def __init__(self) -> None:
        self.checkpoints: dict[int, Checkpoint] = {}

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        for op in ops:
            if isinstance(op, PutCheckpoint):
                self.checkpoints[op.checkpoint.seq] = op.checkpoint
            elif isinstance(op, PutRecord):
                # A record the decision carries (the seq of a cleanup's
                # delivery), as the decision carries it.
                for cp in records_on_wire([op.record], DECIDED):
                    self.checkpoints[cp.seq] = cp
        return [None] * len(ops)


@final
class _Events:
    def emit(self, event: Event) -> None:
        pass


@attrs.define
class _Options:
    traceback_limit: int


@attrs.define
class _DecisionRuntime:
    """The `ReplayHost` of a decision: what `Replay`, local steps and the
    saga use of an engine's runtime."""

    app: Registry
    clock: Clock
    rng: random.Random
    options: _Options
    tracing: Tracing
    engine_id: str
    store: _Writes = attrs.field(factory=_Writes)
    telemetry: _Events = attrs.field(factory=_Events)
    learned: Learned = attrs.field(factory=Learned)
    # Never read: a body here takes a webhook's token from the history
    # (`CommandDecider.webhook_token`), which the engine derived from its secret.
    webhook_keys: WebhookKeys = attrs.field(factory=lambda: WebhookKeys(b"decision"))
    emitted: list[tuple[int, str]] = attrs.field(factory=list)
    """What the body emitted (the decider's list): it goes back in the
    decision."""
    passed: list[Command] = attrs.field(factory=list)
    """The commands the body went past (the decider's list): they go in
    the decision, before its command or its end."""
    updates: DecisionUpdates | None = None
    """The updates the task carried, as the body applies them."""


def pick_workflow(app: Registry, name: str, version: str) -> Workflow[..., Any]:
    """The workflow a decision task asks for: its pinned version, or the
    one registered last for a run not pinned yet.

    Raises:
      UnknownWorkflowError: This worker lacks it, or holds no body for it.
    """
    wf = app.get_workflow(name, None if version == LATEST_VERSION else version)
    if wf.fn is remote_body:
        raise UnknownWorkflowError(f"workflow {name!r} is only declared by name here")
    return wf


async def decide(
    app: Registry,
    task: Task,
    *,
    clock: Clock,
    rng: random.Random,
    worker_id: str,
    traceback_limit: int,
    tracing: Tracing = DISABLED,
    features: Features,
    eager: EagerSteps | None = None,
) -> Decision:
    """Replay the run ``task`` carries and decide its turn (running the
    remote steps it reaches with ``eager``, where the task lets it: see
    `_decider`), with the worker's ``features``: they undo a body's work
    (`Feature.undo`) and apply the updates the task carries
    (`Feature.decision_updates`).

    Raises:
      WireError: The task's input is not a valid decision request.
      UnknownWorkflowError: This worker lacks the workflow (or version).
    """
    request = read_request(task.run_id, task.input)
    wf = pick_workflow(app, task.step, request.version)
    run = request_run(task.run_id, request, wf.name, wf.version)
    runtime = _DecisionRuntime(
        app=app,
        clock=clock,
        rng=rng,
        options=_Options(traceback_limit),
        tracing=tracing,
        engine_id=worker_id,
    )
    state = TurnDraft(run=run, checkpoints=dict(request.checkpoints), records=dict(request.records))
    cleaning = request.cleanup or request.compensate
    decider = CommandDecider(request, None if cleaning else eager, task.dispatched_at)
    runtime.emitted = decider.emitted
    runtime.passed = decider.passed
    replay = Replay(runtime, state, decider)
    if request.cleanup:
        replay.cancellation = CancelDelivery(recorded_delivery(state.records))
        waits = await _clean_up(wf, replay, decider, request.input)
        if waits is not None:
            return _decision(wf, runtime, state, next=waits, cancelled=True)
        replay = Replay(runtime, state, decider)
    if request.compensate:
        await features.undo(replay)
    if request.cleanup or request.compensate:
        return _decision(
            wf,
            runtime,
            state,
            error=ErrorInfo(message="cancelled", code="cancelled"),
            cancelled=True,
        )
    updates = features.decision_updates(
        replay, list(request.updates), request.stood_due, traceback_limit
    )
    runtime.updates = updates
    try:
        args = _serde.load_args(request.input, wf.fn, skip=1)
        value = await wf.fn(replay.runtime.app.context(replay), *args)
        if state.nondeterminism is not None:
            raise state.nondeterminism
        output = _serde.dumps(value)
    except Suspend:
        if state.nondeterminism is not None:
            return _failed(wf, runtime, state, replay, state.nondeterminism)
        if decider.next is None:
            raise UsageError("the body suspended without reaching a durable operation") from None
        updates.where_it_waits(completed=False)
        return _decision(wf, runtime, state, next=decider.next)
    except ContinueAsNew as cont:
        if state.nondeterminism is not None:
            return _failed(wf, runtime, state, replay, state.nondeterminism)
        return _decision(wf, runtime, state, continued=cont.input_json)
    except Exception as exc:
        failure = state.nondeterminism or exc
        if not isinstance(failure, NonDeterminismError):
            await features.undo(replay)
        return _failed(wf, runtime, state, replay, failure)
    updates.where_it_waits(completed=True)
    return _decision(wf, runtime, state, output=output)


async def _clean_up(
    wf: Workflow[..., Any], replay: Replay, decider: CommandDecider, input: str
) -> Command | None:
    """Replay a cancelled run's body to deliver `Cancelled` (see
    `_cancellation`) and run its cleanup; the operation the cleanup waits
    on, if it does. Whatever else the body does, the run ends cancelled."""
    try:
        args = _serde.load_args(input, wf.fn, skip=1)
        await wf.fn(replay.runtime.app.context(replay), *args)
    except Suspend:
        if replay.turn.nondeterminism is None:
            return decider.next
    except (Cancelled, ContinueAsNew):
        pass
    except Exception as exc:
        logger.warning(
            "run %r raised in its cleanup after its cancellation: %r", replay.run.id, exc
        )
    return None


def _failed(
    wf: Workflow[..., Any],
    runtime: _DecisionRuntime,
    state: TurnDraft,
    replay: Replay,
    exc: BaseException,
) -> Decision:
    error = error_info(exc, traceback_limit=runtime.options.traceback_limit)
    return _decision(wf, runtime, state, error=error)


def _decision(
    wf: Workflow[..., Any],
    runtime: _DecisionRuntime,
    state: TurnDraft,
    *,
    next: Command | None = None,
    output: str | None = None,
    error: ErrorInfo | None = None,
    cancelled: bool = False,
    continued: str | None = None,
) -> Decision:
    """The decision, with every local checkpoint the body (or its undos)
    recorded, and the remote steps it ran at once."""
    local = dict(runtime.store.checkpoints)
    for op in state.ops:
        if isinstance(op, PutCheckpoint) and op.checkpoint.kind in ("local", "remote"):
            local[op.checkpoint.seq] = op.checkpoint
        elif isinstance(op, PutRecord):
            for cp in records_on_wire([op.record], DECIDED):
                local[cp.seq] = cp
    return Decision(
        version=wf.version,
        local=tuple(local[seq] for seq in sorted(local)),
        passed=tuple(runtime.passed),
        next=next,
        output=output,
        error=error,
        cancelled=cancelled,
        continued=continued,
        stream=tuple(runtime.emitted),
        updates=() if runtime.updates is None else tuple(runtime.updates.outcomes),
        update_log=None if runtime.updates is None else runtime.updates.log,
        update_handlers=() if runtime.updates is None else runtime.updates.handlers,
        # The worker that ran remote steps at once, for their events.
        worker=runtime.engine_id if any(cp.kind == "remote" for cp in local.values()) else None,
    )
