"""Which step attempt the current task runs: `current_step`."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import attrs

from ._exceptions import UsageError


@final
@attrs.define(frozen=True, kw_only=True)
class StepInfo:
    """The step attempt a task is running, as `current_step` returns it.

    Attributes:
      run_id: The run the step belongs to.
      workflow: The run's workflow name.
      namespace: The run's namespace (tenant).
      step: The step's registered name.
      seq: The step's checkpoint seq in the run (negative for an undo: it
        sits at ``-seq`` of the step it undoes).
      attempt: Which attempt this is, counting from 1. A remote step counts
        every dispatch, so an attempt sent again by ``remote_redispatch``
        has a number of its own; a task the broker delivers again after a
        worker died keeps its number.
    """

    run_id: str
    workflow: str
    namespace: str
    step: str
    seq: int
    attempt: int


_current: Final[contextvars.ContextVar[StepInfo]] = contextvars.ContextVar(
    "trio_durable.current_step"
)


def current_step() -> StepInfo:
    """The step attempt the calling task runs, in the engine (a local step)
    or on a worker (a remote step).

    Tasks a step starts in its own nurseries inherit it (Trio copies the
    context into every child task).

    Raises:
      UsageError: The caller is not inside a step (for instance a workflow
        body, which has its `Context` instead).
    """
    try:
        return _current.get()
    except LookupError:
        raise UsageError(
            "td.current_step() was called outside a step; it answers only inside a step's"
            " function (a workflow body reads ctx.run_id instead)"
        ) from None


async def call_step(info: StepInfo, fn: Callable[..., Awaitable[Any]], args: Sequence[Any]) -> Any:
    """Await ``fn(*args)`` with ``info`` as `current_step` for its task."""
    token = _current.set(info)
    try:
        return await fn(*args)
    finally:
        _current.reset(token)
