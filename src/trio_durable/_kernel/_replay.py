"""Replay: a body's way through one turn of its run.

A turn reads the run and its checkpoints (`TurnDraft`) and replays the body
against them. Every durable operation takes the next seq (`Replay`). If the
run's checkpoint at that seq is settled, the operation returns (or raises)
what was recorded, without running again; a checkpoint of another name or
kind there means the workflow changed under the run (non-determinism). If
it is missing, the operation runs, and what it records is collected as a
write of the turn. The body ends the turn at a durable wait by raising
`Suspend`; the turn then writes everything it collected in one batch.

A body replays in three places: an engine's turn, a worker deciding a
remote workflow's turn (`_decide`), and a reader answering a query
(`_read_replay`). What a replay reaches of the process it runs in
(`Replay.runtime`) is a `ReplayHost`: the engine's `Runtime` is one, and so
are the worker's and the reader's stand-ins, which the type checker checks
against it. The host holds only what the paths outside an engine use.

Every durable operation goes through the replay's `Decider` before it
runs, wherever the body runs; one decider per place, chosen when the
replay is made, so no operation asks where it is:

- on an engine (`InPlace`), the operation is carried out on the spot, its
  writes collected in the turn (an engine carrying out a remote body's
  command runs the same code, `Replay.seek` to the command's seq);
- on a worker deciding a turn (`_decider.CommandDecider`), an operation
  the history has not settled stops the body and becomes the decision's
  command;
- on a reader (`_read_replay`), it stops the body: a reader writes
  nothing.

What only an engine's turn does (send or park a remote step, wake a run,
read the store or write to it outside the replay's writes) takes the
whole `Runtime` from `Replay.engine`, the one an `InPlace` decider holds.
Outside an engine, every durable operation is settled in the history or
stops the body before that code (its decider's `Decider.reach`), so it is
never reached there, and `Replay.engine` raises if it is. An accessor
rather than a parameter: that code is reached through the same `Context`
methods as the settled paths (a step, a signal, a fan), and the `Context`
holds only its `Replay`, so a `Runtime` passed down would run through
every operation's signature; and a host with the engine's every part
would have the stand-ins fake a dispatcher, a scheduler and a store.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs

from .._base import _serde
from .._base._exceptions import NonDeterminismError, UnknownWorkflowError, UsageError
from .._base._observe import Event, EventKind
from .._base._records import Checkpoint, CheckpointKind, Run
from .._base._run_records import RunRecord
from .._stores._ops import Op, PutCheckpoint
from .._stores._record_ops import PutRecord
from ._definitions import Registry, Step, Workflow, remote_body, workflow_of
from ._handlers import Handlers
from ._markers import is_patch_marker

if TYPE_CHECKING:
    import random

    from .._base._clock import Clock
    from .._stores._base import Store
    from .._wire._messages import Task
    from .._wire._tracing import Tracing
    from ._cancellation import CancelDelivery
    from ._learned import Learned
    from ._runtime import Runtime
    from ._webhook_keys import WebhookKeys


@final
class ContinueAsNew(BaseException):
    """Raised through a workflow body by `Context.continue_as_new` to end
    the turn with the next generation's inputs.

    It derives from BaseException, as `Suspend` does, so that ``except
    Exception`` in a body does not swallow it.
    """

    def __init__(self, input_json: str) -> None:
        super().__init__("continue as new")
        self.input_json = input_json


@final
class Suspend(BaseException):
    """Raised through a workflow body to end the turn at a durable wait.

    It derives from BaseException so that ``except Exception`` in a body does
    not swallow it; a body must not catch it.
    """

    def __init__(
        self,
        reason: str,
        wake_at: float | None = None,
        watch: tuple[int, int] | None = None,
        recheck: Callable[[Store], Awaitable[bool]] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wake_at = wake_at
        # The seq range of checkpoints (remote steps, children) the run
        # waits on, rechecked after the suspend commits (see
        # `Turn.suspend`).
        self.watch = watch
        # For a wait in a flow-control queue's line (the run's admission, a
        # remote step's slot): asked once the suspend commits whether a
        # release let it in meanwhile (its wake was lost while this turn
        # held the lease); True: look again at once.
        self.recheck = recheck


@attrs.define(kw_only=True, eq=False)
class TurnDraft:
    """What one turn of a run has read and is about to write: its draft,
    built from what the store read for it (`.._stores._base.TurnState`) and
    committed in one batch at the turn's end."""

    run: Run
    checkpoints: dict[int, Checkpoint]
    ops: list[Op] = attrs.field(factory=list)
    # Runs to wake once this turn's writes commit (children created, children
    # told to cancel): they must not run before their rows exist.
    wake_after: list[str] = attrs.field(factory=list)
    started_children: list[Run] = attrs.field(factory=list)
    # Awaited children this turn's writes tell to cancel: once the writes
    # commit, their turns in flight are cut short, as `Engine.cancel` does.
    cancelled_children: list[str] = attrs.field(factory=list)
    # Tasks of remote steps to send once the writes commit, each with the
    # index of the op that records it: a task whose claim lost is not sent.
    dispatch: list[tuple[int, Task]] = attrs.field(factory=list)
    nondeterminism: NonDeterminismError | None = None
    # Writes the run's body hands to the write that completes the run (an
    # entity's new state, a continued run's next generation): they commit
    # with its end or not at all.
    end_ops: list[Op] = attrs.field(factory=list)
    # Called once the turn's writes commit (waking this process's callers
    # waiting on what the run wrote, see `_published`).
    committed: list[Callable[[], None]] = attrs.field(factory=list)

    # The run's own records, by kind (see `_run_records`).
    records: dict[str, RunRecord] = attrs.field(factory=dict)

    def put(self, checkpoint: Checkpoint) -> None:
        self.checkpoints[checkpoint.seq] = checkpoint
        self.ops.append(PutCheckpoint(checkpoint))

    def put_record(self, record: RunRecord) -> None:
        self.records[record.kind] = record
        self.ops.append(PutRecord(record))


class ReplayStore(Protocol):
    """What a replay writes at once, apart from its turn's batch (a
    webhook's nonce, an undo's outcome): an engine's store; on a worker,
    the decision's local checkpoints; on a reader, nothing (it refuses)."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]: ...


class EventSink(Protocol):
    """Where a replay's events go: an engine's `Telemetry`, or nowhere."""

    def emit(self, event: Event) -> None: ...


class ReplayOptions(Protocol):
    """The settings a replay reads."""

    @property
    def traceback_limit(self) -> int: ...


class ReplayHost(Protocol):
    """What a replay reaches of the process it runs in, wherever the body
    runs: an engine's `Runtime`, a worker's stand-in (`_decide`), a
    reader's (`_read_replay`). Only what the paths outside an engine use
    is here; engine-only code takes `Replay.engine`."""

    @property
    def app(self) -> Registry: ...

    @property
    def clock(self) -> Clock: ...

    # A local step's retry jitter.
    @property
    def rng(self) -> random.Random: ...

    # The owner a write at once is fenced by, and an announcement's origin.
    @property
    def engine_id(self) -> str: ...

    @property
    def options(self) -> ReplayOptions: ...

    # A local step's span.
    @property
    def tracing(self) -> Tracing: ...

    @property
    def store(self) -> ReplayStore: ...

    @property
    def telemetry(self) -> EventSink: ...

    # The steps and queues remote workflows' decisions named, on an engine.
    @property
    def learned(self) -> Learned: ...

    # What a webhook's token derives from: a reader replays a recorded one.
    @property
    def webhook_keys(self) -> WebhookKeys: ...


class Decider:
    """Where a body's durable operations go before they run (see the
    module): the one path every operation takes, wherever the body runs.

    Each method here is what an engine does, the operation carried out on
    the spot (`InPlace`); a worker's and a reader's deciders override what
    they do otherwise.
    """

    __slots__ = ()

    @property
    def engine(self) -> Runtime | None:
        """The engine that carries operations out here, if this is one."""
        return None

    def reach(
        self,
        replay: Replay,
        name: str,
        kind: CheckpointKind,
        count: int,
        command: Callable[[], dict[str, Any]],
    ) -> None:
        """Before a durable operation over the next ``count`` seqs: return
        to have it run (carried out, or replayed from the history), or stop
        the body (`Suspend`) with ``command`` standing for it.

        Raises:
          NonDeterminismError: The history holds another operation there.
          Suspend: The operation stops the body here.
        """

    async def before_step(
        self,
        replay: Replay,
        step: Step[..., Any],
        args: Sequence[Any],
        compensation: str | None,
        flow_queue: str | None,
        dedup_key: str | None,
    ) -> None:
        """Before a remote step's `reach`: the chance to settle it first (a
        worker running it at once)."""

    def check(self, replay: Replay, seq: int, name: str, kind: CheckpointKind) -> None:
        """What the history holds at ``seq``, which the operation ``name``
        of ``kind`` takes, read (of that name and kind, or nothing): return
        to go on, or stop the body (a reader at an unsettled one).

        Raises:
          Suspend: The body stops here.
          NonDeterminismError: The history cannot go on here (a replay
            test of a run that ended before this operation).
        """

    def carry_value(self, offset: int, value_json: str) -> bool:
        """Whether a value the body emitted past the stream's stored head
        is this decider's to carry (or drop) instead of written here."""
        return False

    def webhook_token(self, replay: Replay, name: str) -> str | None:
        """`Context.webhook`'s token where this decider knows it, else None
        (the webhook is created, or read back, here)."""
        return None

    def pauses(self, step: str) -> bool:
        """Whether a breakpoint stops the body before a new local step
        named ``step`` here, where the engine said so (a worker: the engine
        pauses the run); an engine matches its own breakpoints."""
        return False

    def by_name(self, name: str) -> Workflow[..., Any] | None:
        """A workflow this app lacks that a child or a fan names, if this
        decider lets the body go on with it (a worker: the engine that
        carries the command out knows it)."""
        return None


@final
class InPlace(Decider):
    """An engine's `Decider`: every operation is carried out on the spot."""

    __slots__ = ("_engine",)

    def __init__(self, engine: Runtime) -> None:
        self._engine = engine

    @property
    def engine(self) -> Runtime:
        return self._engine


def recorded_value(step: Step[..., Any], cp: Checkpoint) -> Any:
    """What a completed step's checkpoint returns: its output, structured
    as the step's return annotation."""
    _, returns = _serde.signature_types(step.fn)
    return _serde.loads(cp.output, returns)


@final
class Replay:
    """A body's position in one turn's replay, and what it reaches.

    Attributes:
      runtime: What it reaches of the process it runs in.
      turn: What the turn read and is about to write.
    """

    def __init__(self, runtime: ReplayHost, turn: TurnDraft, decider: Decider) -> None:
        self.runtime = runtime
        self.turn = turn
        self._seq = 0
        # Where every durable operation goes before it runs (see the module).
        self.decider = decider
        # The query and update handlers the body registered (`_handlers`).
        self.handlers = Handlers(turn)
        # Set on the turn of a cancelling run whose body is replayed to
        # deliver its cancellation (see `_cancellation`): consulted at every
        # seq an operation takes.
        self.cancellation: CancelDelivery | None = None

    @classmethod
    def on_engine(cls, runtime: Runtime, turn: TurnDraft) -> Replay:
        """A replay in a turn of the engine ``runtime``: its operations are
        carried out in place (`InPlace`), and its engine-only code reaches
        all of the engine's parts (`engine`)."""
        return cls(runtime, turn, InPlace(runtime))

    @property
    def engine(self) -> Runtime:
        """The parts of the engine whose turn this is, for what only an
        engine's turn does.

        Raises:
          AssertionError: This replay runs outside an engine's turn (a
            worker deciding, a reader), where every operation the body
            reaches is settled in the history or stops the body before it
            gets here.
        """
        engine = self.decider.engine
        if engine is None:
            raise AssertionError(f"run {self.run.id!r}: engine-only code reached outside an engine")
        return engine

    def peek(self) -> int:
        """The seq the next durable operation takes."""
        self.take_markers()
        return self._seq + 1

    def seek(self, seq: int) -> None:
        """Take ``seq`` next (an engine carrying out a decision's command)."""
        self._seq = seq - 1

    @property
    def run(self) -> Run:
        """The run being replayed."""
        return self.turn.run

    def next_seq(self) -> int:
        """Take the next seq."""
        self.take_markers()
        self.handlers.reached(self._seq + 1)
        self._seq += 1
        if self.cancellation is not None:
            self.cancellation.reach(self, self._seq, 1)
        return self._seq

    def next_is_new(self) -> bool:
        """Whether nothing is recorded yet at the next seq."""
        self.take_markers()
        return self.turn.checkpoints.get(self._seq + 1) is None

    def take_seqs(self, count: int) -> int:
        """Take the next ``count`` seqs (a fan's members); return the first."""
        self.take_markers()
        first = self._seq + 1
        self.handlers.reached(first)
        self._seq += count
        if self.cancellation is not None:
            self.cancellation.reach(self, first, count)
        return first

    def take_markers(self) -> list[Checkpoint]:
        """Take the patch markers recorded at the next seqs, and return them.

        Markers belong to `Context.patched` alone (see
        `_context_determinism`): every other operation steps over them, so
        a deploy that dropped a ``patched`` call still replays histories
        that hold its marker.
        """
        taken: list[Checkpoint] = []
        checkpoints = self.turn.checkpoints
        while (cp := checkpoints.get(self._seq + 1)) is not None and is_patch_marker(cp):
            taken.append(cp)
            self._seq += 1
        return taken

    def take_marker_seq(self) -> int:
        """Take the next seq for a new patch marker (never a cancellation's
        delivery point: `Context.patched` does not wait)."""
        self.take_markers()
        self._seq += 1
        return self._seq

    def recorded(self, seq: int, name: str, kind: CheckpointKind) -> Checkpoint | None:
        """The checkpoint recorded at ``seq``, or None if there is none yet.

        Raises:
          NonDeterminismError: The checkpoint there is of another ``name`` or
            ``kind``, or replay already diverged.
        """
        if self.turn.nondeterminism is not None:
            # Replay already diverged (and the body caught the error): the run
            # fails, so it must not run steps or record anything more.
            raise self.turn.nondeterminism
        cp = self.turn.checkpoints.get(seq)
        if cp is not None and (cp.name != name or cp.kind != kind):
            error = NonDeterminismError(
                f"at seq {seq} the run recorded {cp.kind} {cp.name!r}, "
                f"but the workflow now asks for {kind} {name!r}",
                details={
                    "seq": seq,
                    "recorded": cp.name,
                    "requested": name,
                    "recorded_kind": cp.kind,
                    "requested_kind": kind,
                },
            )
            if self.turn.nondeterminism is None:
                self.turn.nondeterminism = error
            raise error
        self.decider.check(self, seq, name, kind)
        return cp

    def workflow(self, target: Workflow[..., Any] | str) -> Workflow[..., Any]:
        """The workflow ``target`` names for a child or a fan: registered
        here, or known by name only (its body lives on workers): one an
        engine met in a decision's command, or, on a worker deciding a
        turn, one this worker's app lacks.

        Raises:
          UnknownWorkflowError: It is neither.
        """
        if isinstance(target, Workflow) and target.fn is remote_body:
            return target
        try:
            return workflow_of(self.runtime.app, target)
        except UnknownWorkflowError:
            known = self.decider.by_name(target) if isinstance(target, str) and target else None
            if known is None:
                raise
            return known

    def check_step(self, step: object) -> None:
        """Raise `UsageError` unless ``step`` is a step of this app (or one
        a remote workflow's decision named, see `_decision_turn`)."""
        app = self.runtime.app
        if not isinstance(step, Step) or (
            app.get_step(step.name) is not step
            and self.runtime.learned.steps.get(step.name) is not step
        ):
            raise UsageError(f"{step!r} is not a step registered in app {app.name!r}")

    def emit(self, kind: EventKind, seq: int | None, name: str | None, **data: Any) -> None:
        """Emit an event of the operation at ``seq`` (``name``) of this run."""
        run = self.turn.run
        self.runtime.telemetry.emit(
            Event(
                kind=kind,
                run_id=run.id,
                workflow=run.workflow,
                at=self.runtime.clock.now(),
                seq=seq,
                name=name,
                data=data,
            )
        )
