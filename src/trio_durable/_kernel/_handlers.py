"""Query and update handlers: what a body registers, and the updates its
history re-applies.

A body registers handlers as it runs (`HandlerOperations`), so they are
registered again at every turn, and at every read-only replay of a query.
An update is applied where the body waits: the turn that finds it in the
run's inbox runs its handler when the body takes seq ``S`` (its
*position*) for the operation the run waited in, before that operation
returns, or after the body suspended at the operation taking ``S``; and
records it in the run's update log (the run's record of kind `UPDATES_NAME`,
written with the turn). Every later replay runs the handler again when
the body takes seq ``S``, before that operation: the body then sees the
same state as the run did when the operation returned (see
docs/queries-and-updates.md).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs

from .._base import _serde
from .._base._exceptions import InvalidArgumentsError, NonDeterminismError, UsageError
from .._base._run_records import RunRecord

if TYPE_CHECKING:
    from ._replay import TurnDraft

UPDATES_NAME: Final = "updates"
"""The kind of a run's update log: its output lists the updates applied, in
order."""

F = TypeVar("F", bound=Callable[..., Any])


@final
@attrs.define(frozen=True, kw_only=True)
class UpdateHandler:
    """An update handler and its validator (None: every update is accepted)."""

    fn: Callable[..., Any]
    validator: Callable[..., Any] | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class LoggedUpdate:
    """An update applied to a run, as its log keeps it.

    Attributes:
      id: The update's id.
      name: Its handler's name.
      args: Its arguments (JSON text of a list).
      at: Its position: the seq of the operation the body waited at.
      ok: Whether the handler returned (False: it raised).
    """

    id: str
    name: str
    args: str
    at: int
    ok: bool


def check_handler_name(name: object, what: str) -> str:
    """Raise `UsageError` unless ``name`` is a non-empty string."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"a {what} handler's name must be a non-empty string, not {name!r}")
    return name


def check_function(fn: object, what: str) -> None:
    """Raise `UsageError` unless ``fn`` is callable."""
    if not callable(fn):
        raise UsageError(f"a {what} must be a function, not {fn!r}")


def check_arguments(fn: Callable[..., Any], args: list[Any], target: str) -> None:
    """Raise `InvalidArgumentsError` unless ``args`` fit ``fn``."""
    try:
        inspect.signature(fn).bind(*args)
    except TypeError as exc:
        raise InvalidArgumentsError(f"{target}: {exc}", target=target) from None


@final
class Handlers:
    """The handlers a body registered so far in one replay, and the updates
    of the run's log it re-applied."""

    def __init__(self, turn: TurnDraft) -> None:
        self._turn = turn
        self.queries: dict[str, Callable[..., Any]] = {}
        self.updates: dict[str, UpdateHandler] = {}
        self._log: list[LoggedUpdate] | None = None
        self._applied = 0
        # The first seq of the operation the body reached last: where it
        # waits when it suspends.
        self.position = 0
        # Set while a handler or a validator runs: it may not take a seq.
        self._calling = False
        # In a turn: from which seq on, and how, the body applies the
        # updates accepted while the run waited (see `_updates`).
        self._waiting: tuple[int, Callable[[int], None]] | None = None

    def call(self, fn: Callable[..., Any], args: list[Any]) -> Any:
        """Call a handler or a validator with ``args``; return its result.

        An ``async def`` one is run to its end at once: it may await what
        never waits (``await ctx.set_event(...)`` returns at once too, but
        takes a seq, so it is refused), and raises `UsageError` if it waits.

        Raises:
          UsageError: It ran a durable operation, or waited.
        """
        self._calling = True
        try:
            result = fn(*args)
            if inspect.iscoroutine(result):
                try:
                    result.send(None)
                except StopIteration as done:
                    return done.value
                result.close()
                raise UsageError("a query or update handler (or validator) cannot wait")
            return result
        finally:
            self._calling = False

    @property
    def log(self) -> list[LoggedUpdate]:
        """The updates the run's history applied, in order."""
        if self._log is None:
            found = self._turn.records.get(UPDATES_NAME)
            self._log = [] if found is None else read_log(found)
        return self._log

    def reached(self, seq: int) -> None:
        """The body takes ``seq`` for its next operation: first apply again
        the updates the run applied while it waited there.

        Raises:
          UsageError: A handler or a validator runs a durable operation.
        """
        if self._calling:
            raise UsageError(
                "a query or update handler (or validator) cannot run durable operations"
            )
        self.position = seq
        if UPDATES_NAME in self._turn.records or self._log is not None:
            log = self.log
            while self._applied < len(log) and log[self._applied].at <= seq:
                self._reapply(log[self._applied])
                self._applied += 1
        if self._waiting is not None and seq >= self._waiting[0]:
            self._waiting[1](seq)

    def skip_log(self) -> None:
        """Apply none of the logged updates again: the replay carries out a
        remote workflow's command on the engine, which holds no body (its
        worker applied them)."""
        self._applied = len(self.log)

    def apply_waiting(self, stood: int, apply: Callable[[int], None]) -> None:
        """Have ``apply`` called with each seq the body takes from ``stood``
        on (the operation where the run stood when its turn began), before
        that operation: it applies the updates accepted while the run
        waited there, before the body goes past it."""
        self._waiting = (stood, apply)

    def finish(self) -> None:
        """Apply again the logged updates the body did not reach (applied
        after it returned)."""
        log = self.log
        while self._applied < len(log):
            self._reapply(log[self._applied])
            self._applied += 1

    def _reapply(self, logged: LoggedUpdate) -> None:
        handler = self.updates.get(logged.name)
        if handler is None:
            error = NonDeterminismError(
                f"the run applied update {logged.id!r} with handler {logged.name!r} at seq"
                f" {logged.at}, but the workflow registers no such handler there now",
                details={"update": logged.id, "handler": logged.name, "seq": logged.at},
            )
            if self._turn.nondeterminism is None:
                self._turn.nondeterminism = error
            raise error
        # If it raised the first time, it raises again: what it changed
        # before raising is changed again, and its failure was recorded.
        with contextlib.suppress(Exception):
            self.call(handler.fn, json.loads(logged.args))

    def append(self, logged: LoggedUpdate) -> RunRecord:
        """Add an update applied now to the log; return the log's record to
        write."""
        self.finish()
        self.log.append(logged)
        self._applied = len(self.log)
        return log_record(self._turn, self.log)


def read_log(record: RunRecord) -> list[LoggedUpdate]:
    """The updates a run's log record lists."""
    return [LoggedUpdate(**item) for item in json.loads(record.output or "[]")]


def log_record(turn: TurnDraft, log: list[LoggedUpdate]) -> RunRecord:
    """The log record that lists ``log``."""
    output = json.dumps([attrs.asdict(item) for item in log], separators=(",", ":"))
    return log_with(turn, output)


def log_with(turn: TurnDraft, output: str) -> RunRecord:
    """The run's log record, its output ``output``."""
    previous = turn.records.get(UPDATES_NAME)
    if previous is not None:
        return attrs.evolve(previous, output=output)
    return RunRecord(run_id=turn.run.id, kind=UPDATES_NAME, output=output)


def plain_args(args: tuple[Any, ...] | list[Any]) -> tuple[str, list[Any]]:
    """``args`` as JSON text, and as the plain values a handler gets."""
    text = _serde.dumps(list(args))
    return text, json.loads(text)
