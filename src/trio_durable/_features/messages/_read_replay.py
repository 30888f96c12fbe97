"""Read-only replay: a run's body replayed up to where it stands now, in the
caller's process, to answer a query or to validate an update.

The caller reads the run and its checkpoints (no lease), and runs the body
on a `Replay` whose decider is a reader's (`ReadOnly`): every durable
operation the history settled replays as in a turn, and the first one it
did not settle stops the body (a local step never runs, a timer never fires, nothing is
written). The updates the run applied are applied again on the way, as in
a turn. The handlers registered by then answer.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Literal, final

import attrs

from ..._base import _serde
from ..._base._exceptions import QueryFailed, UnknownHandlerError, UsageError
from ..._base._failures import error_info
from ..._base._records import Checkpoint, CheckpointKind, Run
from ..._base._run_records import RunRecord
from ..._kernel._definitions import Workflow, remote_body
from ..._kernel._handlers import check_arguments, plain_args
from ..._kernel._learned import Learned
from ..._kernel._replay import ContinueAsNew, Decider, Replay, Suspend, TurnDraft
from ..._kernel._webhook_keys import WebhookKeys
from ..._wire._tracing import DISABLED, Tracing
from ._published import Front, current_run

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..._base._clock import Clock
    from ..._base._observe import Event
    from ..._kernel._definitions import Registry
    from ..._stores._base import Store


@final
class _ReadOnlyStore:
    """What a read-only replay holds as its store: it writes nothing."""

    async def apply(self, ops: object) -> list[Any]:
        raise AssertionError("a read-only replay wrote to the store")


@final
class ReadOnly(Decider):
    """A reader's `Decider`: an operation the history did not settle stops
    the body where it stands (once the updates applied there are applied
    again); a value the body emits is dropped (it was written, or will be,
    by the run's own turn)."""

    __slots__ = ()

    def check(self, replay: Replay, seq: int, name: str, kind: CheckpointKind) -> None:
        cp = replay.turn.checkpoints.get(seq)
        if cp is None or cp.status not in ("completed", "failed"):
            raise Suspend("read-only replay")

    def carry_value(self, offset: int, value_json: str) -> bool:
        return True


@final
class _NoEvents:
    def emit(self, event: Event) -> None:
        pass


@attrs.define
class _Options:
    traceback_limit: int


@attrs.define
class _ReadRuntime:
    """The `ReplayHost` of a read-only replay: what `Replay` and the settled
    paths of the durable operations use of an engine's runtime."""

    app: Registry
    clock: Clock
    options: _Options
    # A placeholder: reading the real secret may write it (see
    # `WebhookKeys`), and a client does not know an engine's.
    webhook_keys: WebhookKeys = attrs.field(factory=lambda: WebhookKeys(b"read-only replay"))
    engine_id: str = "read-only replay"
    rng: random.Random = attrs.field(factory=lambda: random.Random(0))
    tracing: Tracing = DISABLED
    store: _ReadOnlyStore = attrs.field(factory=_ReadOnlyStore)
    telemetry: _NoEvents = attrs.field(factory=_NoEvents)
    learned: Learned = attrs.field(factory=Learned)


def body_of(app: Registry | None, run: Run, *, remote: bool = False) -> Workflow[..., Any]:
    """The workflow whose body ``run`` executes, from ``app``; with
    ``remote``, also a remote workflow's, if the app holds its body (as the
    workers' app does).

    Raises:
      UsageError: There is no app, or its body is not in it (a remote
        workflow's body runs on workers).
      UnknownWorkflowError: The app lacks the workflow.
    """
    if app is None:
        raise UsageError(
            "queries and updates replay the run here: open the client with the app"
            " (open_client(..., app=app))"
        )
    wf = app.find_workflow(run.workflow, run.version)
    if wf is None and not any(w.remote for w in app.workflows if w.name == run.workflow):
        wf = app.get_workflow(run.workflow, run.version)  # raises UnknownWorkflowError
    if wf is not None and remote and wf.remote and wf.fn is not remote_body:
        return wf
    if wf is None or wf.remote:
        raise UsageError(
            f"workflow {run.workflow!r} is decided on workers: an engine asks them its"
            " runs' queries and updates, a client only where its app holds the body"
        )
    return wf


async def replay_now(
    front: Front, run: Run, store: Store | None = None, *, remote: bool = False
) -> Replay:
    """Replay ``run``'s body up to where its history stands; return the
    replay, whose handlers answer. With ``remote``, a remote workflow's run
    too, where the app holds its body (a query).

    Raises:
      NonDeterminismError: The history does not match the body.
    """
    wf = body_of(front.app, run, remote=remote)
    assert front.app is not None
    reading = store or front.store
    checkpoints = await reading.get_checkpoints(run.id)
    records = await reading.get_records(run.id)
    return await replay_history(
        front.app, front.clock, front.traceback_limit, wf, run, checkpoints, records
    )


async def replay_history(
    app: Registry,
    clock: Clock,
    traceback_limit: int,
    wf: Workflow[..., Any],
    run: Run,
    checkpoints: Iterable[Checkpoint],
    records: Iterable[RunRecord] = (),
) -> Replay:
    """Replay ``run``'s body ``wf`` read-only against ``checkpoints`` (what
    `replay_now` read, or what a query task carried to a worker); return
    the replay, whose handlers answer.

    Raises:
      NonDeterminismError: The history does not match the body.
    """
    end = await replay_body(app, clock, traceback_limit, wf, run, checkpoints, records, ReadOnly())
    # The body may have raised where the run failed: the handlers
    # registered by then answer (a failure of the replay itself is raised).
    if end.replay.turn.nondeterminism is not None:
        raise end.replay.turn.nondeterminism
    end.replay.handlers.finish()
    return end.replay


@final
@attrs.define(frozen=True, kw_only=True)
class BodyEnd:
    """How a body replayed outside an engine's turn ended.

    Attributes:
      replay: Its replay: the turn holds the history (and whether it
        diverged, `TurnDraft.nondeterminism`), the handlers what the body
        registered.
      how: ``returned``; ``raised``; ``stopped`` where the decider stopped
        it (`Suspend`); ``continued`` (`Context.continue_as_new`).
      value: What it returned, or the exception that ended it.
    """

    replay: Replay
    how: Literal["returned", "raised", "stopped", "continued"]
    value: Any = None


async def replay_body(
    app: Registry,
    clock: Clock,
    traceback_limit: int,
    wf: Workflow[..., Any],
    run: Run,
    checkpoints: Iterable[Checkpoint],
    records: Iterable[RunRecord],
    decider: Decider,
) -> BodyEnd:
    """Replay ``run``'s body ``wf`` against ``checkpoints`` and ``records``
    in this process, writing nothing, each operation going through
    ``decider`` (a reader's `ReadOnly`, or a replay test's); return how
    the body ended."""
    state = TurnDraft(
        run=run,
        checkpoints={cp.seq: cp for cp in checkpoints},
        records={record.kind: record for record in records},
    )
    runtime = _ReadRuntime(app=app, clock=clock, options=_Options(traceback_limit))
    replay = Replay(runtime, state, decider)
    try:
        args = _serde.load_args(run.input, wf.fn, skip=1)
        value = await wf.fn(replay.runtime.app.context(replay), *args)
    except Suspend as stop:
        return BodyEnd(replay=replay, how="stopped", value=stop)
    except ContinueAsNew as cont:
        return BodyEnd(replay=replay, how="continued", value=cont)
    except Exception as exc:
        return BodyEnd(replay=replay, how="raised", value=exc)
    return BodyEnd(replay=replay, how="returned", value=value)


async def query_run(
    front: Front,
    run_id: str,
    name: str,
    args: tuple[Any, ...],
    namespace: str | None,
    type_: Any,
) -> Any:
    """`Engine.query`."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"a query's name must be a non-empty string, not {name!r}")
    _, values = plain_args(args)
    run = await current_run(front, run_id, namespace)
    if front.ask is not None and not holds_body(front.app, run):
        # A remote workflow whose body only its workers hold: they answer.
        return _serde.loads(await front.ask(run, name, values, "query"), type_)
    replay = await replay_now(front, run, remote=True)
    return _serde.loads(answer(replay, run, name, values), type_)


def holds_body(app: Registry | None, run: Run) -> bool:
    """Whether ``app`` holds the body of ``run``'s workflow."""
    if app is None:
        return False
    wf = app.find_workflow(run.workflow, run.version)
    return wf is not None and wf.fn is not remote_body


def answer(replay: Replay, run: Run, name: str, values: list[Any]) -> str:
    """The answer, as JSON text, of the query handler ``name`` the replayed
    body registered, called with ``values``.

    Raises:
      UnknownHandlerError: The body registered no such query by then.
      InvalidArgumentsError: ``values`` do not fit the handler.
      QueryFailed: The handler raised.
    """
    handler = replay.handlers.queries.get(name)
    if handler is None:
        raise UnknownHandlerError(
            f"run {run.id!r} has no query handler {name!r} where it stands"
            f" (it has: {', '.join(sorted(replay.handlers.queries)) or 'none'})"
        )
    check_arguments(handler, values, f"query {name!r}")
    try:
        value = replay.handlers.call(handler, values)
    except Exception as exc:
        info = error_info(exc)
        raise QueryFailed(run.id, name, info.message, info.code, info.details) from exc
    return _serde.dumps(value)
