"""Queries of remote workflows' runs, answered by their workers.

An engine whose app holds a workflow's body answers a query by replaying the
run itself (`_read_replay`). For a remote workflow whose body only the
workers hold, the engine sends a task of kind ``query`` on the route its
decision tasks take (`decision_route`), on the queue of the build the run
is on (see `_builds`: the code that decides the run answers), carrying the
run, its history and the query (envelope version 2: a worker of the
release before refuses it, naming both versions). A worker replays the body read-only, as the caller
would, calls the handler and answers with a result of kind ``query`` on the
engine's results queue; the result consumer hands it to the caller waiting
for that execution id (`QueryAnswers`) and writes nothing. A query is
never sent again: one lost (or refused by the broker) fails, and the caller
may ask again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio

from ..._base._exceptions import (
    InvalidArgumentsError,
    NonDeterminismError,
    QueryFailed,
    UnknownHandlerError,
    UnknownWorkflowError,
    UpdateRejected,
    UsageError,
)
from ..._base._records import Run
from ..._base._run_records import RunRecord
from ..._brokers._base import BrokerError
from ..._kernel._builds import build_queue, run_build
from ..._kernel._carrier import BLOCKED
from ..._kernel._decide import pick_workflow
from ..._kernel._decision_turn import decision_route
from ..._kernel._executions import new_execution
from ..._kernel._hooks import Feature
from ..._wire._decision_wire import history, read_request, request_input, request_run
from ..._wire._messages import Result, Task, WireError
from ..._wire._payload import task_message
from ..._wire._wire_records import DECISION_ON_WIRE
from ._published import AskKind
from ._read_replay import answer, replay_history
from ._updates import validate_update

if TYPE_CHECKING:
    from ..._base._clock import Clock
    from ..._kernel._definitions import Registry
    from ..._kernel._runtime import Runtime

QUERY_PATIENCE: Final = 30.0
"""Seconds an engine waits for a worker's answer to a query before it
raises `QueryFailed` of code ``no_answer``."""

NO_ANSWER: Final = "no_answer"
"""The code of a query no worker answered in time."""

BROKER_REFUSED: Final = "broker_unavailable"
"""The code of a query whose task the broker refused."""


@final
class QueryAnswers(Feature):
    """The queries this engine sent to workers, by execution id, and their
    answers once they came."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[trio.Event, list[Result]]] = {}

    def expect(self, execution: str) -> tuple[trio.Event, list[Result]]:
        """Register ``execution``: its answer sets the event and lands in
        the list."""
        entry = self._waiting[execution] = (trio.Event(), [])
        return entry

    def forget(self, execution: str) -> None:
        self._waiting.pop(execution, None)

    def answer(self, result: Result) -> bool:
        """Hand ``result`` to the caller waiting for it; False if none does
        (it gave up, or the answer is a duplicate)."""
        entry = self._waiting.pop(result.execution or "", None)
        if entry is None:
            return False
        event, answers = entry
        answers.append(result)
        event.set()
        return True

    def takes_result(self, result: Result) -> bool:
        # An answer to a query settles nothing: it goes to its caller.
        return result.kind == "query" and self.answer(result)


def query_input(
    run: Run,
    checkpoints: list[Any],
    records: list[RunRecord],
    name: str,
    args: list[Any],
    kind: AskKind = "query",
) -> str:
    """A query task's input: the run and its history as a decision task
    carries them (`request_input`), and the query's (or the update's to
    validate) name and arguments."""
    [request] = json.loads(request_input(run, history(checkpoints, records), {}))
    request["query"] = {"name": name, "args": args}
    if kind == "update":
        request["query"]["update"] = True
    return json.dumps([request], separators=(",", ":"), allow_nan=False)


async def ask_workers(
    rt: Runtime,
    run: Run,
    route: str,
    name: str,
    args: list[Any],
    kind: AskKind = "query",
    patience: float = QUERY_PATIENCE,
) -> str:
    """Have a worker of ``route`` answer the query ``name`` of ``run``, or
    validate its update ``name`` (the answer is then null); its answer as
    JSON text.

    Raises:
      UnknownHandlerError: The body registered no such handler where the
        run stands.
      InvalidArgumentsError: ``args`` do not fit the handler.
      UpdateRejected: The update's validator refused it.
      NonDeterminismError: The history does not match the workers' body.
      QueryFailed: The query's handler raised, no worker answered within
        ``patience`` seconds (code ``no_answer``), the broker refused
        the task (code ``broker_unavailable``), or no live worker of the
        run's build serves ``route`` (code ``blocked``; nothing is sent).
    """
    checkpoints = await rt.store.get_checkpoints(run.id)
    records = await rt.store.get_records(run.id)
    # Answered by the code that decides the run: its build's workers (for
    # an upgrading run, those of the build its last turn was on).
    build = run_build({record.kind: record for record in records})
    gap = None if build is None else await rt.dispatcher.capability_gap(route, (), build)
    if gap is not None:
        raise QueryFailed(run.id, name, f"{gap}: nothing can answer the {kind}", BLOCKED, None)
    execution = new_execution(rt.rng)
    task = Task(
        run_id=run.id,
        seq=DECISION_ON_WIRE,
        attempt=1,
        step=run.workflow,
        workflow=run.workflow,
        route=route,
        input=query_input(run, checkpoints, records, name, args, kind),
        reply_to=rt.results_queue,
        kind="query",
        execution=execution,
        version=2,
        build=build,
    )
    queue = build_queue(route, build)
    message = task_message(task, queue, rt.broker.max_payload, rt.clock.now(), rt.layers.signing)
    event, answers = rt.features.part(QueryAnswers).expect(execution)
    try:
        if message is not None:
            try:
                await rt.broker.dispatch([message])
            except BrokerError as exc:
                raise QueryFailed(
                    run.id, name, f"the broker refused the {kind}: {exc}", BROKER_REFUSED, None
                ) from exc
        with trio.move_on_after(patience):
            await event.wait()
    finally:
        rt.features.part(QueryAnswers).forget(execution)
    if not answers:
        raise QueryFailed(
            run.id,
            name,
            f"no worker of {route!r} answered the query within {patience:g} s",
            NO_ANSWER,
            None,
        )
    [answer] = answers
    if answer.status == "completed":
        return answer.output or "null"
    message_text = answer.error or "the query failed"
    if answer.error_type == "UpdateRejected":
        raise UpdateRejected(run.id, name, message_text, answer.code, answer.details)
    if answer.error_type == "QueryFailed":
        raise QueryFailed(run.id, name, message_text, answer.code, answer.details)
    if answer.code == "unknown_handler":
        raise UnknownHandlerError(message_text)
    if answer.code == "invalid_arguments":
        raise InvalidArgumentsError(message_text, target=f"query {name!r}")
    if answer.code == "non_determinism":
        raise NonDeterminismError(message_text)
    raise QueryFailed(run.id, name, message_text, answer.code, answer.details)


def engine_asker(rt: Runtime) -> Callable[[Run, str, list[Any], AskKind], Awaitable[str]]:
    """What an engine's queries call for a run whose body only workers
    hold: the workers of the route its decisions take answer."""

    async def ask(run: Run, name: str, args: list[Any], kind: AskKind) -> str:
        route = await decision_route(rt, run)
        if route is None:
            raise UsageError(
                f"workflow {run.workflow!r} is not registered here and no live worker"
                f" announces it: nothing can answer the {kind}"
            )
        return await ask_workers(rt, run, route, name, args, kind)

    return ask


async def answer_query(app: Registry, task: Task, *, clock: Clock, traceback_limit: int) -> str:
    """On a worker: the answer (JSON text) to the query ``task`` carries,
    from the body replayed read-only on the run's history.

    Raises:
      WireError: The task's input is not a valid query.
      UnknownWorkflowError: This worker lacks the workflow (or version).
      UnknownHandlerError, InvalidArgumentsError, QueryFailed,
      NonDeterminismError: As for a query answered in the caller.
    """
    request = read_request(task.run_id, task.input)
    name, args, update = _query_of(task.input)
    wf = pick_workflow(app, task.step, request.version)
    run = request_run(task.run_id, request, wf.name, wf.version)
    replay = await replay_history(
        app, clock, traceback_limit, wf, run, request.checkpoints.values(), request.records.values()
    )
    if update:
        validate_update(replay, run, name, args)
        return "null"
    return answer(replay, run, name, args)


def _query_of(input_json: str) -> tuple[str, list[Any], bool]:
    """The query's name and arguments in a query task's input, and whether
    it asks to validate an update of that name instead.

    Raises:
      WireError: It holds none.
    """
    try:
        query = json.loads(input_json)[0]["query"]
        name, args = query["name"], query["args"]
    except (ValueError, LookupError, TypeError):
        raise WireError("not a query task: its input holds no query") from None
    if not isinstance(name, str) or not name or not isinstance(args, list):
        raise WireError("not a query task: a query is a name and a list of arguments")
    return name, args, query.get("update") is True


def query_failure_code(exc: Exception) -> str | None:
    """The code a worker's failed answer carries, which the engine raises
    again as the same exception (see `ask_workers`)."""
    if isinstance(exc, UnknownHandlerError):
        return "unknown_handler"
    if isinstance(exc, InvalidArgumentsError):
        return "invalid_arguments"
    if isinstance(exc, NonDeterminismError):
        return "non_determinism"
    if isinstance(exc, QueryFailed | UpdateRejected):
        return exc.code
    if isinstance(exc, UnknownWorkflowError):
        return "unknown_workflow"
    if isinstance(exc, WireError):
        return "bad_task"
    return getattr(exc, "code", None)
