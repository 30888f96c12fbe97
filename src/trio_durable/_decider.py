"""The `Decider`: what stops a remote workflow's body in a decision.

On a worker deciding a turn (see `_decide`), every durable operation the
body reaches asks the decider first (`Decider.reach`): settled in the
history, it replays as on an engine; not settled, the body stops there and
the operation becomes the decision's `Command`, built by the functions
here from what the body passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, final

import attrs

from . import _serde
from ._app import App, Step, Workflow
from ._decision_commands import Command
from ._decision_wire import DecisionRequest
from ._exceptions import Cancelled, NonDeterminismError
from ._records import LATEST_VERSION, CheckpointKind
from ._replay import Replay, Suspend
from ._search_values import SearchValue, dump_attributes

_SETTLED: Final = frozenset({"completed", "failed"})


@final
class Decider:
    """What a decision's body reached: the command it stopped at, if any."""

    def __init__(self, request: DecisionRequest) -> None:
        self.request = request
        self.next: Command | None = None
        # The values the body emitted past the stream's stored head:
        # (offset, value as JSON text), for the engine to write.
        self.emitted: list[tuple[int, str]] = []

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
        self.next = Command(op=op, seq=first, args=args)
        # The body waits here, as an engine's turn's body waits at the seq
        # its operation took: the updates the run applied up to here are
        # applied again, and those waiting are applied here.
        replay.handlers.reached(first)
        raise Suspend("decision")

    def webhook(self, replay: Replay, name: str) -> str:
        """`Context.webhook`: the token the engine derived, once the
        webhook is recorded; else the body stops to have it created."""
        self.reach(replay, name, "webhook", 1, lambda: {"op": "webhook", "name": name})
        seq = replay.next_seq()
        token = self.request.tokens.get(seq)
        if token is None:
            _corrupt(f"the history holds no token for the webhook at seq {seq}")
        return token


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


def step_spec(app: App, step: Step[..., Any], queue: str | None = None) -> dict[str, Any]:
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
