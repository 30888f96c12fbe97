"""`CommandDecider`: what stops a remote workflow's body in a decision (the
worker's `_replay.Decider`).

On a worker deciding a turn (see `_decide`), every durable operation the
body reaches asks the decider first (`CommandDecider.reach`): settled in the
history, it replays as on an engine; not settled, the body stops there and
the operation becomes the decision's `Command`, built by the functions
here from what the body passed.

Eager steps: a remote step that the worker deciding the turn runs at
once, in the decision, instead of stopping the body there. A remote
workflow's body stops at every remote step it reaches, and its
engine sends the step's task; the result wakes the run, whose next turn
sends another decision task. When the worker deciding the turn serves the
step's group itself, that round trip carries nothing the worker lacks: it
runs the step then and there (its first attempt, under an execution id of
its own, with the step's timeout), records the step's checkpoint in the
decision as a local step's is recorded, and replays on. The engine applies
the checkpoint with the decision, and emits the step's events as if a
result had settled it. A body of three remote steps is decided in one
decision task, not four.

The engine says whether a decision task's worker may do so (`Eager`, in
the task): only an engine that reads such decisions does, never for a
cancelled run's cleanup, and never for a step a breakpoint stops its
workflow before. With ``remote_redispatch``, only a step whose timeout
ends it within half the lost deadline of the decision task runs so (the
task would otherwise count as lost while the step runs). The worker runs
a step so only if it serves the step's group route, offers every
capability the step requires, and the call goes through no flow-control
queue (whose slots and rate limit the engine keeps) and has no
``dedup_key``. Anything else goes to the engine as the decision's command,
as before.

A failed attempt is recorded as the engine records one: a retryable
failure with attempts left leaves the checkpoint pending with its next
attempt due after the step's backoff (the decision then stops there, and
the engine sends that attempt when it is due); otherwise the step failed
for good, and the body sees it at once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, final

import attrs

from .._base import _serde
from .._base._exceptions import Cancelled, NonDeterminismError
from .._base._observe import EventKind
from .._base._records import LATEST_VERSION, Checkpoint, CheckpointKind
from .._base._search_values import SearchValue, dump_attributes
from .._wire._decision_commands import Command, passes
from .._wire._decision_wire import DecisionRequest, Eager
from .._wire._messages import Result, Task, result_error
from ._definitions import Registry, Step, Workflow, shadow_workflow
from ._dispatch import group_route
from ._executions import new_execution
from ._replay import Decider, Replay, Suspend

_SETTLED: Final = frozenset({"completed", "failed"})


@final
class CommandDecider(Decider):
    """A worker's `_replay.Decider`: what a decision's body reached (the
    command it stopped at, if any; the values it emitted)."""

    def __init__(
        self,
        request: DecisionRequest,
        eager: EagerSteps | None = None,
        dispatched_at: float = 0.0,
    ) -> None:
        self.request = request
        self.next: Command | None = None
        # The commands the body went past (`passes`), in order: with a
        # request that allows several, and never in a cancelled run's
        # cleanup (whatever it does, the run ends cancelled).
        self.passed: list[Command] = []
        self._several = request.several and not (request.cleanup or request.compensate)
        # The values the body emitted past the stream's stored head:
        # (offset, value as JSON text), for the engine to write.
        self.emitted: list[tuple[int, str]] = []
        # How this worker runs remote steps at once, if the task lets it
        # (see the module); when the task was dispatched.
        self._eager = eager if request.eager is not None else None
        self._dispatched_at = dispatched_at

    async def before_step(
        self,
        replay: Replay,
        step: Step[..., Any],
        args: Sequence[Any],
        compensation: str | None,
        flow_queue: str | None,
        dedup_key: str | None,
    ) -> None:
        """Before a remote step's `reach`: run it here and now if this
        worker may (see the module), so that it is settled when reached."""
        eager, allowed = self._eager, self.request.eager
        if eager is None or allowed is None:
            return
        if may_run(eager, allowed, replay, step, flow_queue, dedup_key, self._dispatched_at):
            await run_at_once(eager, replay, step, args, compensation)

    def reach(
        self,
        replay: Replay,
        name: str,
        kind: CheckpointKind,
        count: int,
        command: Callable[[], dict[str, Any]],
    ) -> None:
        """Before a durable operation over the next ``count`` seqs: return if
        the history settled all of them (the operation then replays as on an
        engine), else stop the body with the operation as the command.

        Raises:
          NonDeterminismError: The history holds another operation there.
          Suspend: The operation is not settled; the decision ends.
        """
        first = replay.peek()
        if replay.cancellation is not None:
            # A cancelled run's body gets `Cancelled` here rather than wait,
            # unless this is its cleanup (see `_cancellation`); the
            # operation's seqs are taken all the same, as on an engine.
            try:
                replay.cancellation.reach(replay, first, count)
            except Cancelled:
                replay.take_seqs(count)
                raise
        settled = True
        for seq in range(first, first + count):
            cp = replay.recorded(seq, name, kind)
            if cp is None or cp.status not in _SETTLED:
                settled = False
        if settled:
            return
        args = command()
        op = args.pop("op")
        if self._several and count == 1 and passes(op, args):
            # What it returns is known here: the body goes on as if it
            # was recorded (see `_passed`), and the engine carries the
            # command out before the next one.
            self.passed.append(Command(op=op, seq=first, args=args))
            replay.turn.checkpoints[first] = _passed(replay, first, name, kind, op)
            return
        self.next = Command(op=op, seq=first, args=args)
        # The body waits here, as an engine's turn's body waits at the seq
        # its operation took: the updates the run applied up to here are
        # applied again, and those waiting are applied here.
        replay.handlers.reached(first)
        raise Suspend("decision")

    def carry_value(self, offset: int, value_json: str) -> bool:
        """The decision carries the value to the engine, which writes it
        (`write_emitted`)."""
        self.emitted.append((offset, value_json))
        return True

    def pauses(self, step: str) -> bool:
        """A breakpoint is on ``step``'s name in the run's workflow, as the
        engine read its breakpoints when it sent the task."""
        eager = self.request.eager
        return eager is not None and step in eager.paused

    def by_name(self, name: str) -> Workflow[..., Any] | None:
        return shadow_workflow(name, LATEST_VERSION)

    def webhook_token(self, replay: Replay, name: str) -> str:
        """`Context.webhook`: the token the engine derived, once the
        webhook is recorded; else the body stops to have it created."""
        self.reach(replay, name, "webhook", 1, lambda: {"op": "webhook", "name": name})
        seq = replay.next_seq()
        token = self.request.tokens.get(seq)
        if token is None:
            _corrupt(f"the history holds no token for the webhook at seq {seq}")
        return token


def _passed(replay: Replay, seq: int, name: str, kind: CheckpointKind, op: str) -> Checkpoint:
    """What the body replays at ``seq`` for a command it goes past, as the
    engine records it once it carries it out: completed; a child started
    holds its id, ``<run>.child.<seq>``. It stays in this replay alone (the
    engine records the real one)."""
    child_id = f"{replay.run.id}.child.{seq}" if op == "child" else None
    now = replay.runtime.clock.now()
    return Checkpoint(
        run_id=replay.run.id,
        seq=seq,
        name=name,
        kind=kind,
        status="completed",
        output=None if child_id is None else json.dumps(child_id),
        child_id=child_id,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
    )


def _corrupt(message: str) -> NoReturn:
    raise NonDeterminismError(message)


def step_command(
    replay: Replay,
    step: Step[..., Any],
    args: Any,
    compensation: str | None,
    flow_queue: str | None,
    priority: int | None,
    dedup_key: str | None = None,
) -> dict[str, Any]:
    """The command that has an engine call the remote ``step`` (through
    ``flow_queue``, else the step's own queue, whose registration it
    carries)."""
    app = replay.runtime.app
    undo = None if compensation is None else app.get_step(compensation)
    used = flow_queue if flow_queue is not None else step.queue
    command = {
        "op": "step",
        **step_spec(app, step, used),
        "input": _serde.check_step_args(step, args, undo),
        "flow_queue": used,
        "priority": priority,
        "compensation": compensation,
    }
    if dedup_key is not None:
        command["dedup_key"] = dedup_key
    return command


def step_spec(app: Registry, step: Step[..., Any], queue: str | None = None) -> dict[str, Any]:
    """A remote step's registration (and of the flow-control ``queue`` its
    call goes through), as a command carries it."""
    flow = None if queue is None else app.get_queue(queue)
    return {
        "name": step.name,
        "group": step.group,
        "requires": list(step.requires),
        "timeout": step.timeout,
        "retry": attrs.asdict(step.retry),
        "queue": None if flow is None else attrs.asdict(flow),
    }


def fan_command(
    replay: Replay,
    target: Workflow[..., Any] | Step[..., Any],
    inputs: Any,
    concurrency: int | None,
    mode: str,
) -> dict[str, Any]:
    """The command that has an engine run a fan."""
    data: dict[str, Any] = {
        "op": "fan",
        "inputs": _serde.dumps(list(inputs)),
        "concurrency": concurrency,
        "mode": mode,
    }
    if isinstance(target, Step):
        data.update(target="step", **step_spec(replay.runtime.app, target))
    else:
        data.update(target="workflow", name=target.name, version=_known_version(target))
    return data


def child_command(
    wf: Workflow[..., Any],
    args: Any,
    *,
    awaited: bool,
    cancel_with_parent: bool = False,
    search_attributes: Mapping[str, SearchValue] | None = None,
) -> Callable[[], dict[str, Any]]:
    """The command that has an engine start a child of ``wf`` (its search
    attributes with their types, as this app declares them)."""

    def command() -> dict[str, Any]:
        built = {
            "op": "child",
            "workflow": wf.name,
            "version": _known_version(wf),
            "input": _serde.check_workflow_args(wf, args),
            "awaited": awaited,
        }
        if cancel_with_parent:
            built["cancel_with_parent"] = True
        if search_attributes:
            built["search_attributes"] = dump_attributes(search_attributes)
        return built

    return command


def _known_version(wf: Workflow[..., Any]) -> str:
    # A workflow met by name only has no version here: the engine that
    # runs the child decides it.
    return LATEST_VERSION if wf.remote and wf.group is None else wf.version


# -- eager steps ---------------------------------------------------------------------


@final
@attrs.frozen
class EagerSteps:
    """What a deciding worker runs steps with.

    Attributes:
      routes: The group routes the worker serves.
      capabilities: What it offers to steps with ``requires=``.
      execute: Runs a step's task as the worker runs any, returning its
        result (never raising for the step's own failure).
    """

    routes: frozenset[str]
    capabilities: frozenset[str]
    execute: Callable[[Task], Awaitable[Result]]


def may_run(
    eager: EagerSteps,
    allowed: Eager,
    replay: Replay,
    step: Step[..., Any],
    flow_queue: str | None,
    dedup_key: str | None,
    dispatched_at: float,
) -> bool:
    """Whether the worker runs ``step``, which the body reaches now, at once."""
    if replay.cancellation is not None or step.group is None:
        return False
    if flow_queue is not None or step.queue is not None or dedup_key is not None:
        return False
    if step.name in allowed.paused or replay.peek() in replay.turn.checkpoints:
        return False
    if group_route(step, replay.run.namespace) not in eager.routes:
        return False
    if not set(step.requires) <= eager.capabilities:
        return False
    if allowed.budget is None:
        return True
    elapsed = replay.runtime.clock.now() - dispatched_at
    return step.timeout is not None and elapsed + step.timeout <= allowed.budget


async def run_at_once(
    eager: EagerSteps,
    replay: Replay,
    step: Step[..., Any],
    args: Sequence[Any],
    compensation: str | None,
) -> None:
    """Run ``step``'s first attempt here and record its checkpoint in the
    turn (settled, or pending with its next attempt due)."""
    app = replay.runtime.app
    undo = None if compensation is None else app.get_step(compensation)
    input_json = _serde.check_step_args(step, args, undo)
    seq = replay.peek()
    run = replay.run
    route = group_route(step, run.namespace)
    now = replay.runtime.clock.now()
    execution = new_execution(replay.runtime.rng)
    task = Task(
        run_id=run.id,
        seq=seq,
        attempt=1,
        step=step.name,
        workflow=run.workflow,
        route=route,
        input=input_json,
        timeout=step.timeout,
        dispatched_at=now,
        execution=execution,
    )
    result = await eager.execute(task)
    cp = Checkpoint(
        run_id=run.id,
        seq=seq,
        name=step.name,
        kind="remote",
        input=input_json,
        attempts=1,
        group=route,
        compensation=compensation,
        enqueued_at=now,
        started_at=result.started_at,
        finished_at=result.finished_at,
        executions=(execution,),
    )
    if result.status == "completed":
        cp = attrs.evolve(cp, status="completed", output=result.output)
    else:
        error = result_error(result, replay.runtime.options.traceback_limit)
        if result.retryable and step.retry.attempts > 1:
            due = result.finished_at + step.retry.delay(1, replay.runtime.rng)
            cp = attrs.evolve(
                cp, attempts=2, errors=(error,), started_at=None, finished_at=None, wake_at=due
            )
        else:
            cp = attrs.evolve(cp, status="failed", error=error, errors=(error,))
    replay.turn.put(cp)


def eager_events(cp: Checkpoint, worker: str | None) -> list[tuple[EventKind, dict[str, Any]]]:
    """The events of a step a worker ran at once, as an engine emits them
    when it applies the decision: its start, and its result."""
    events: list[tuple[EventKind, dict[str, Any]]] = [
        ("step.started", {"attempt": 1, "route": cp.group, "eager": True})
    ]
    if cp.status == "completed":
        duration = max(0.0, (cp.finished_at or 0.0) - (cp.started_at or 0.0))
        events.append(
            ("step.completed", {"attempt": 1, "duration": duration, "worker": worker or ""})
        )
    else:
        error = cp.errors[-1] if cp.errors else cp.error
        data: dict[str, Any] = {
            "attempt": 1,
            "worker": worker or "",
            "final": cp.status == "failed",
        }
        if error is not None:
            data.update(error=error.message, code=error.code)
        events.append(("step.failed", data))
    return events
