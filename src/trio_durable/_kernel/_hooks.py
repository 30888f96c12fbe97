"""What a feature adds to the kernel: hooks at fixed points of an engine's
work, and the part of the engine it owns.

The kernel names no feature. A feature is an object of a `Feature`
subclass, which overrides the hooks it needs; the engine's assembly
registers each one (`Features.add`), and the kernel calls every registered
feature at each point, in the order they were added. A feature's state is
the object itself: code of the feature reaches it through the runtime by
its type (``rt.features.part(StreamWaiters)``), so the runtime's type names
no feature either.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, final

if TYPE_CHECKING:
    from .._base._records import Checkpoint, ErrorInfo, RunStatus
    from .._stores._base import Store
    from .._stores._ops import Op
    from .._wire._decision_commands import Command
    from .._wire._decision_wire import Decision
    from .._wire._messages import Result
    from ._definitions import Workflow
    from ._replay import ContinueAsNew, Replay
    from ._runtime import Runtime
    from ._scheduler import Slot
    from ._turn import Turn

F = TypeVar("F", bound="Feature")

AfterBody = Callable[[bool], Awaitable[None]]
"""What a feature does once a body suspended or completed (True) without
non-determinism (see `Feature.before_body`)."""

Inbox = list[tuple[str, dict[str, Any]]]
"""Messages waiting for a run that a decision task carries to the worker
(the updates accepted while it waited), by id, in the order accepted."""


class DecisionUpdates(Protocol):
    """The updates one decision task carried, as the worker's replay
    applies them (see `Feature.decision_updates`)."""

    @property
    def outcomes(self) -> list[tuple[str, str]]:
        """Each applied update's id and outcome (JSON text)."""
        ...

    @property
    def log(self) -> str | None:
        """The update log's JSON text, if a handler ran in this decision."""
        ...

    @property
    def handlers(self) -> tuple[str, ...]:
        """The update handlers the body registered by the decision's end."""
        ...

    def where_it_waits(self, *, completed: bool) -> None:
        """The body suspended (or returned): apply the rest there."""


@final
class _NoUpdates:
    """No feature applies updates here: none is applied."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str]] = []
        self.log: str | None = None
        self.handlers: tuple[str, ...] = ()

    def where_it_waits(self, *, completed: bool) -> None:
        pass


class Feature:
    """A feature's hooks into the kernel. Each does nothing unless the
    feature overrides it; none may raise but to report a defect (or a
    store's failure, which abandons the turn).

    The hooks of a turn, in the order a turn reaches them: `turn_starts`;
    then, for a cancelling run, `cancel_turn`, `undo`, `cancel_error` and
    `cancelling`; else `take_turn`, `body_deadline`, `before_body`, and
    after the body `continue_run`, or `undo` and `failed`, or `wake_by`;
    at a run's end `end_ops` and `ended`.
    """

    def turn_starts(self, turn: Turn, now: float) -> None:
        """A turn took its run on: the feature may change the run it takes
        (``turn.state.run``), recording why among the turn's writes."""

    async def cancel_turn(
        self, turn: Turn, slot: Slot, renew_lease: Callable[[], Awaitable[None]]
    ) -> bool:
        """A turn of a cancelling run, before the kernel ends it: True if
        the feature took the turn (its body's cleanup ran and waits, or the
        body was interrupted)."""
        return False

    async def take_turn(self, turn: Turn, now: float) -> bool:
        """Before the body runs: True if the feature took the turn (the
        run follows its on-error handler, or waits for admission)."""
        return False

    def body_deadline(self, turn: Turn, now: float) -> float:
        """The Trio deadline the body's turn is cut short at."""
        return math.inf

    async def before_body(self, turn: Turn, replay: Replay, now: float) -> AfterBody | None:
        """Just before the body runs; what to do once it suspended or
        completed, if anything."""
        return None

    async def continue_run(self, turn: Turn, cont: ContinueAsNew) -> bool:
        """The body continued as new: True if the feature ended the run
        and started its next generation."""
        return False

    async def undo(self, replay: Replay) -> None:
        """The run failed or was cancelled with compensation: undo what
        its body did (the kernel renews the lease meanwhile)."""

    async def failed(self, turn: Turn, wf: Workflow[..., Any] | None, error: ErrorInfo) -> bool:
        """The body of ``wf`` (None: a remote workflow's, decided on a
        worker) failed with ``error``: True if the feature took the run on
        (handed it to an on-error handler)."""
        return False

    def wake_by(self, turn: Turn, wake_at: float | None) -> float | None:
        """When the suspending run is due, given that the others say
        ``wake_at``."""
        return wake_at

    def cancel_error(self, turn: Turn) -> ErrorInfo | None:
        """The error a cancelled run ends with, if the feature says."""
        return None

    async def cancelling(self, turn: Turn, error: ErrorInfo) -> None:
        """The cancelled run's last turn: add what the feature's part of
        it needs to the turn's writes (cancels of its children, ...)."""

    def end_ops(
        self,
        turn: Turn,
        status: RunStatus,
        output: str | None,
        error: ErrorInfo | None,
        returned_by: tuple[str, str] | None,
    ) -> Sequence[Op]:
        """The writes to make with the run's end, in its batch."""
        return ()

    async def ended(self, turn: Turn, ops: Sequence[Op], results: Sequence[Any]) -> None:
        """The run's end committed; ``ops`` are the last writes of the
        batch, ``results`` all of its results."""

    async def settled(self, rt: Runtime, checkpoints: Sequence[Checkpoint]) -> None:
        """A write settled ``checkpoints`` (a remote step's result, a child
        run's end), before the runs waiting on them are woken."""

    def takes_result(self, result: Result) -> bool:
        """Whether this feature takes ``result``, a result of a task of its
        own rather than of a step or decision (which the kernel settles)."""
        return False

    def committed(self, run_id: str) -> None:
        """A turn of ``run_id`` committed its writes in this process."""

    def announced(self, kind: str, run_id: str | None) -> None:
        """A process announced a change of ``kind`` (of the run ``run_id``,
        where it names one) through the store (see `_wakes`)."""

    def missed(self) -> None:
        """Announcements may have been missed (a watch reconnected): read
        again whatever this feature keeps of the store."""

    async def paused_steps(self, store: Store, workflow: str) -> frozenset[str]:
        """The steps of ``workflow`` this feature holds back before they
        run: a worker deciding a run runs none of them at once."""
        return frozenset()

    async def carry_out(self, replay: Replay, command: Command) -> bool:
        """Carry out ``command``, a remote workflow's decision names, as a
        local body's turn would (recording in ``replay``'s turn, raising
        `Suspend` where the body would wait); False if it is not one of
        this feature's commands."""
        return False

    async def inbox(self, rt: Runtime, run_id: str) -> Inbox:
        """What this feature sends along with a decision task of
        ``run_id`` (see `Inbox`)."""
        return []

    def decided(self, replay: Replay, decision: Decision, *, cancelled: bool) -> None:
        """A decision is applied: write what it carries for this feature
        (values the body emitted, updates' outcomes) with ``replay``'s
        turn. ``cancelled``: the run is being cancelled (its cleanup's
        decision, or the last turn that was out when the cancel came)."""

    def decision_updates(
        self, replay: Replay, inbox: Inbox, stood_due: bool, traceback_limit: int
    ) -> DecisionUpdates | None:
        """On a worker: what applies the updates a decision task carried
        (``inbox``) in ``replay``, if this feature does."""
        return None

    def close(self, error: Callable[[], Exception]) -> None:
        """The engine closed: callers still waiting on this feature raise
        ``error()`` rather than wait for ever."""


_HOOKS: Final = tuple(
    name for name, value in vars(Feature).items() if callable(value) and not name.startswith("_")
)
"""The hooks a feature may override."""


@final
class Features:
    """The features an engine runs with, in the order they were added."""

    def __init__(self, features: Sequence[Feature] = ()) -> None:
        self._features: list[Feature] = []
        self._by_type: dict[type[Feature], Feature] = {}
        # Per hook, the features that override it: a turn calls a dozen
        # hooks, each of which most features leave as it is.
        self._by_hook: dict[str, list[Feature]] = {name: [] for name in _HOOKS}
        for feature in features:
            self.add(feature)

    def add(self, feature: Feature) -> None:
        """Register ``feature`` (one of each type)."""
        if type(feature) in self._by_type:
            raise ValueError(f"a feature of type {type(feature).__name__} is registered already")
        self._features.append(feature)
        self._by_type[type(feature)] = feature
        for name, using in self._by_hook.items():
            if getattr(type(feature), name) is not getattr(Feature, name):
                using.append(feature)

    def part(self, kind: type[F]) -> F:
        """The registered feature of type ``kind``.

        Raises:
          LookupError: None is registered.
        """
        feature = self._by_type.get(kind)
        if feature is None:
            raise LookupError(f"no feature of type {kind.__name__} is registered")
        assert isinstance(feature, kind)
        return feature

    async def settled(self, rt: Runtime, checkpoints: Sequence[Checkpoint]) -> None:
        """Tell every feature that a write settled ``checkpoints``."""
        if not checkpoints:
            return
        for feature in self._by_hook["settled"]:
            await feature.settled(rt, checkpoints)

    def takes_result(self, result: Result) -> bool:
        """Whether a feature took ``result`` (see `Feature.takes_result`)."""
        return any(feature.takes_result(result) for feature in self._by_hook["takes_result"])

    def committed(self, run_id: str) -> None:
        for feature in self._by_hook["committed"]:
            feature.committed(run_id)

    def announced(self, kind: str, run_id: str | None) -> None:
        for feature in self._by_hook["announced"]:
            feature.announced(kind, run_id)

    def missed(self) -> None:
        for feature in self._by_hook["missed"]:
            feature.missed()

    async def paused_steps(self, store: Store, workflow: str) -> frozenset[str]:
        """The steps of ``workflow`` a feature holds back (see
        `Feature.paused_steps`)."""
        paused: frozenset[str] = frozenset()
        for feature in self._by_hook["paused_steps"]:
            paused |= await feature.paused_steps(store, workflow)
        return paused

    async def carry_out(self, replay: Replay, command: Command) -> None:
        """Carry out ``command`` through the feature it belongs to (see
        `Feature.carry_out`).

        Raises:
          LookupError: No feature carries out commands of its kind.
        """
        for feature in self._by_hook["carry_out"]:
            if await feature.carry_out(replay, command):
                return
        raise LookupError(f"no feature carries out a command {command.op!r}")

    def turn_starts(self, turn: Turn, now: float) -> None:
        for feature in self._by_hook["turn_starts"]:
            feature.turn_starts(turn, now)

    async def cancel_turn(
        self, turn: Turn, slot: Slot, renew_lease: Callable[[], Awaitable[None]]
    ) -> bool:
        for feature in self._by_hook["cancel_turn"]:
            if await feature.cancel_turn(turn, slot, renew_lease):
                return True
        return False

    async def take_turn(self, turn: Turn, now: float) -> bool:
        for feature in self._by_hook["take_turn"]:
            if await feature.take_turn(turn, now):
                return True
        return False

    def body_deadline(self, turn: Turn, now: float) -> float:
        return min(
            (f.body_deadline(turn, now) for f in self._by_hook["body_deadline"]), default=math.inf
        )

    async def before_body(self, turn: Turn, replay: Replay, now: float) -> list[AfterBody]:
        after = []
        for feature in self._by_hook["before_body"]:
            then = await feature.before_body(turn, replay, now)
            if then is not None:
                after.append(then)
        return after

    async def continue_run(self, turn: Turn, cont: ContinueAsNew) -> None:
        """Continue the run as new through the feature that does.

        Raises:
          LookupError: None does.
        """
        for feature in self._by_hook["continue_run"]:
            if await feature.continue_run(turn, cont):
                return
        raise LookupError("no feature continues a run as new")

    async def undo(self, replay: Replay) -> None:
        for feature in self._by_hook["undo"]:
            await feature.undo(replay)

    async def failed(self, turn: Turn, wf: Workflow[..., Any] | None, error: ErrorInfo) -> bool:
        for feature in self._by_hook["failed"]:
            if await feature.failed(turn, wf, error):
                return True
        return False

    def wake_by(self, turn: Turn, wake_at: float | None) -> float | None:
        for feature in self._by_hook["wake_by"]:
            wake_at = feature.wake_by(turn, wake_at)
        return wake_at

    def cancel_error(self, turn: Turn) -> ErrorInfo | None:
        for feature in self._by_hook["cancel_error"]:
            error = feature.cancel_error(turn)
            if error is not None:
                return error
        return None

    async def cancelling(self, turn: Turn, error: ErrorInfo) -> None:
        for feature in self._by_hook["cancelling"]:
            await feature.cancelling(turn, error)

    def end_ops(
        self,
        turn: Turn,
        status: RunStatus,
        output: str | None,
        error: ErrorInfo | None,
        returned_by: tuple[str, str] | None,
    ) -> list[Op]:
        return [
            op
            for feature in self._by_hook["end_ops"]
            for op in feature.end_ops(turn, status, output, error, returned_by)
        ]

    async def ended(self, turn: Turn, ops: Sequence[Op], results: Sequence[Any]) -> None:
        for feature in self._by_hook["ended"]:
            await feature.ended(turn, ops, results)

    async def inbox(self, rt: Runtime, run_id: str) -> Inbox:
        inbox: Inbox = []
        for feature in self._by_hook["inbox"]:
            inbox.extend(await feature.inbox(rt, run_id))
        return inbox

    def decided(self, replay: Replay, decision: Decision, *, cancelled: bool) -> None:
        for feature in self._by_hook["decided"]:
            feature.decided(replay, decision, cancelled=cancelled)

    def decision_updates(
        self, replay: Replay, inbox: Inbox, stood_due: bool, traceback_limit: int
    ) -> DecisionUpdates:
        for feature in self._by_hook["decision_updates"]:
            updates = feature.decision_updates(replay, inbox, stood_due, traceback_limit)
            if updates is not None:
                return updates
        return _NoUpdates()

    def close(self, error: Callable[[], Exception]) -> None:
        for feature in self._by_hook["close"]:
            feature.close(error)
