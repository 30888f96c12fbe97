"""The message operations of `Context`: registering query and update
handlers, and publishing values (see docs/queries-and-updates.md).

`Context` inherits them from `HandlerOperations`; each works on the turn's
`Replay` as the operations of `_context` do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..._base import _serde
from ..._base._records import CheckpointKind
from ..._kernel._handlers import UpdateHandler, check_function, check_handler_name
from ..._kernel._replay import Replay
from ..determinism._argument_check import Arguments
from ._published import DONE, check_event_key, set_event

F = TypeVar("F", bound=Callable[..., Any])


class HandlerOperations:
    """Query and update handlers, and published values (see `Context`)."""

    _replay: Replay

    if TYPE_CHECKING:

        def _before_op(
            self,
            name: str,
            kind: CheckpointKind,
            arguments: Arguments | None,
            *,
            recorded: Arguments | None = None,
        ) -> None: ...

    def query(self, name: str) -> Callable[[F], F]:
        """Register the decorated function as the query handler ``name``: `Engine.query` calls it with the query's arguments and
        returns what it returns (JSON-able). It reads the workflow's state
        (the variables it closes over) and must not change it::

            @ctx.query("progress")
            def progress() -> int:
                return len(done)

        A body registers its handlers as it runs, so register them before
        the first durable operation to have them answer from the start. A
        query replays the run in the caller's process up to where it
        stands, without writing anything, and asks the handlers registered
        by then. Registering ``name`` again replaces the handler.

        Handlers (and validators) run between the body's durable
        operations: a plain function, or an ``async def`` that never waits
        (it is run to its end at once; one that waits, or runs a durable
        operation, raises `UsageError`).

        Raises:
          UsageError: ``name`` is not a non-empty string, or the handler is
            not a function.
        """
        check_handler_name(name, "query")

        def register(fn: F) -> F:
            check_function(fn, "query handler")
            self._replay.handlers.queries[name] = fn
            return fn

        return register

    def update(self, name: str, *, validator: Callable[..., Any] | None = None) -> Callable[[F], F]:
        """Register the decorated function as the update handler ``name``
        (a plain function, or an ``async def`` that never waits, as for
        `query`): it changes the workflow's state and returns a result
        (JSON-able), which `Engine.update` returns to its caller::

            def positive(amount: int) -> None:
                if amount <= 0:
                    raise ValueError("amount must be positive")

            @ctx.update("add", validator=positive)
            def add(amount: int) -> int:
                items.append(amount)
                return sum(items)

        An update is applied in the run's next turn, where the body waits
        (at the durable operation it is suspended in, before it returns),
        and recorded in the run's history: every replay applies it again
        at the same point, so the body sees the same state.

        Args:
          name: The update's name.
          validator: A function called with the update's arguments
            before it is accepted (in the caller's replay of the run), and
            again before the handler runs in the turn; raising rejects the
            update (`UpdateRejected`). It must not change the state.

        Raises:
          UsageError: ``name`` is not a non-empty string, or the handler or
            the validator is not a function.
        """
        check_handler_name(name, "update")
        if validator is not None:
            check_function(validator, "update validator")

        def register(fn: F) -> F:
            check_function(fn, "update handler")
            self._replay.handlers.updates[name] = UpdateHandler(fn=fn, validator=validator)
            return fn

        return register

    def set_event(self, key: str, value: Any) -> Awaitable[None]:
        """Publish ``value`` (JSON-able) under ``key``, durably, for
        `Engine.get_event` to read (DBOS's ``set_event``).

        It is recorded in the run's history and written with the turn's
        other writes, once: a replay publishes nothing again. Publishing a
        key again replaces its value. It returns at once; awaiting what it
        returns is allowed too (``await ctx.set_event(...)``).

        Raises:
          UsageError: ``key`` is not a non-empty string.
          SerializationError: ``value`` cannot be serialized.
        """
        check_event_key(key)
        self._before_op(f"event:{key}", "signal", lambda cp: _serde.dumps(value))
        self._replay.decider.reach(
            self._replay,
            f"event:{key}",
            "signal",
            1,
            lambda: {"op": "set_event", "key": key, "value": _serde.dumps(value)},
        )
        set_event(self._replay, key, value)
        return DONE
