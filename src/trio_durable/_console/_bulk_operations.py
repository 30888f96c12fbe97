"""The bulk operations a console started (`BulkOperations`): each a task
of the nursery the console owns for its application's lifespan.

Leaving the lifespan cancels and joins every operation still going; one
so stopped (or that failed) resumes when started again with the same
action and selection, since it keeps the name `RunSelection.key` gives it
and the client skips the runs it acted on already.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, Literal, final

import attrs
import trio

from .._base._exceptions import TrioDurableError
from .._front._front_bulk import BulkAction, BulkProgress, BulkReport

logger = logging.getLogger("trio_durable")

KEPT: Final = 20
"""How many ended operations the console remembers (the newest)."""

OperationState = Literal["running", "finished", "failed", "stopped"]


@final
@attrs.define(kw_only=True)
class BulkOperation:
    """What the console knows of one bulk operation it started.

    Attributes:
      name: The operation's name (`RunSelection.key`); started again with
        the same action and selection, it resumes.
      action: ``cancel``, ``retry`` or ``terminate``.
      state: ``running``; ``finished`` (it went through every run);
        ``failed`` (``error`` says why); ``stopped`` (the console closed).
      done: Runs dealt with so far.
      total: Runs it acts on in all (the count when it started).
      report: What it did, once finished.
      error: Why it failed.
    """

    name: str
    action: BulkAction
    state: OperationState = "running"
    done: int = 0
    total: int = 0
    report: BulkReport | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The operation as ``GET /api/bulk/{operation}`` answers it."""
        return {
            "operation": self.name,
            "action": self.action,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "report": None if self.report is None else report_json(self.report),
            "error": self.error,
        }


def report_json(report: BulkReport) -> dict[str, Any]:
    """A `BulkReport` as the API answers it."""
    data = attrs.asdict(report)
    data["first_ids"] = list(report.first_ids)
    return data


Act = Callable[[Callable[[BulkProgress], None]], Awaitable[BulkReport]]


@final
class BulkOperations:
    """The console's bulk operations, each a task of the nursery `open`
    holds for the application's lifespan."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._operations: dict[str, BulkOperation] = {}

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Hold the nursery operations run in; leaving cancels and joins
        them (each stops between two batches' writes, and resumes when
        started again)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def get(self, name: str) -> BulkOperation | None:
        """The operation of this name, if the console remembers it."""
        return self._operations.get(name)

    def recent(self) -> list[BulkOperation]:
        """The operations remembered, newest first."""
        return list(reversed(self._operations.values()))

    @property
    def is_open(self) -> bool:
        """Whether operations can start: the lifespan holds the nursery."""
        return self._nursery is not None

    def start(self, name: str, action: BulkAction, total: int, act: Act) -> BulkOperation | None:
        """Run ``act`` as the task of an operation named ``name``; None if
        one of that name is running already.

        Raises:
          RuntimeError: The nursery is not open (see `is_open`).
        """
        if self._nursery is None:
            raise RuntimeError("the console's bulk operations are closed")
        running = self._operations.get(name)
        if running is not None and running.state == "running":
            return None
        operation = BulkOperation(name=name, action=action, total=total)
        # Newest last: a name started again moves to the end.
        self._operations.pop(name, None)
        self._operations[name] = operation
        ended = [op.name for op in self._operations.values() if op.state != "running"]
        for old in ended[: max(len(ended) - KEPT, 0)]:
            del self._operations[old]
        self._nursery.start_soon(self._carry, operation, act, name=f"bulk {name}")
        return operation

    async def _carry(self, operation: BulkOperation, act: Act) -> None:
        def advanced(progress: BulkProgress) -> None:
            operation.done, operation.total = progress.done, progress.total

        try:
            operation.report = await act(advanced)
        except trio.Cancelled:
            operation.state = "stopped"
            raise
        except TrioDurableError as exc:
            operation.state, operation.error = "failed", str(exc)
        except Exception:
            # A request's task, not the console's: as a request's 500, it is
            # logged and said, and the console serves on.
            logger.exception("the bulk operation %r failed", operation.name)
            operation.state, operation.error = "failed", "it failed; see the console's log"
        else:
            operation.state = "finished"
            operation.done = operation.report.acted + operation.report.refused
