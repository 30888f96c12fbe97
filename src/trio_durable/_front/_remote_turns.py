"""A worker's part in remote workflows: deciding a run's turn
(`_kernel._decide`) and answering a query of its run
(`_features.messages._remote_queries`), each task answered with a result.

The worker consumes these tasks on the queues of its steps and hands each
here by its kind (``decision``, ``query``); the remote steps a decision runs
at once run through the worker (`EagerSteps`).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import final

import attrs

from .._base._clock import Clock
from .._base._exceptions import UnknownWorkflowError
from .._base._failures import error_info
from .._features.lifecycle._feature import Lifecycle
from .._features.messages._decision_updates import RemoteUpdates
from .._features.messages._remote_queries import answer_query, query_failure_code
from .._kernel._decide import decide
from .._kernel._decider import EagerSteps
from .._kernel._hooks import Features
from .._payloads._blobs import Blobs
from .._wire._blob_wire import resolve_task_input
from .._wire._messages import Result, Task, WireError
from .._wire._tracing import Tracing
from ._app import App

logger = logging.getLogger("trio_durable")

ResultOf = Callable[..., Result]
"""Makes the result of the task at hand from its status and fields."""


def worker_features() -> Features:
    """The features a worker decides remote workflows' turns with: undoing
    a body's work, and applying the updates a decision task carries."""
    return Features([Lifecycle(), RemoteUpdates()])


@final
@attrs.define(frozen=True, kw_only=True)
class RemoteTurns:
    """Decides remote workflows' turns and answers queries of their runs,
    for one worker.

    Attributes:
      app: The worker's app, whose workflows it replays.
      clock: The worker's clock.
      rng: The worker's seeded source (a decision's ids and jitter).
      worker_id: The worker's id, as announced.
      traceback_limit: How many characters of a traceback an error keeps.
      tracing: Where a decision's own spans go.
      eager: What a decision runs the remote steps it reaches with at
        once: the worker's routes, capabilities and execution.
      span: Opens the worker's span around a task it handles (the span's
        name, the task); an exception leaving it is recorded on it.
      features: The features a decision is made with (`worker_features`).
    """

    app: App
    clock: Clock
    rng: random.Random
    worker_id: str
    traceback_limit: int
    tracing: Tracing
    eager: EagerSteps
    span: Callable[[str, Task], AbstractContextManager[None]]
    features: Features = attrs.field(factory=worker_features)

    async def decide(
        self, task: Task, result: ResultOf, *, blobs: Blobs | None, redelivered: bool
    ) -> Result:
        """Decide a remote workflow's turn (see `_decide`). A task the
        broker delivers again runs no step at once: its decision may be
        stale (its run moved on, or ended, while it was out), and the
        engine sends the step if it is not."""
        try:
            with self.span(f"decide {task.step}", task):
                decision = await decide(
                    self.app,
                    attrs.evolve(task, input=await resolve_task_input(blobs, task.input)),
                    clock=self.clock,
                    rng=self.rng,
                    worker_id=self.worker_id,
                    traceback_limit=self.traceback_limit,
                    tracing=self.tracing,
                    features=self.features,
                    eager=None if redelivered else self.eager,
                )
        except WireError as exc:
            return result("failed", error=str(exc), code="bad_task", retryable=False)
        except UnknownWorkflowError as exc:
            return result("failed", error=str(exc), code="unknown_workflow", retryable=False)
        except Exception as exc:
            # A fault of this worker (not of the body, whose failure is a
            # decision): the run fails with it rather than loop on it.
            info = error_info(exc, traceback_limit=self.traceback_limit)
            logger.error(
                "worker %s could not decide run %r: %s",
                self.worker_id,
                task.run_id,
                info.message,
                exc_info=exc,
            )
            return result(
                "failed",
                error=info.message,
                code=info.code or "decision_failed",
                retryable=False,
                error_type=info.type,
                traceback=info.traceback,
            )
        return result(
            "completed",
            output=json.dumps(decision.encode()),
            version=decision.wire_version,
        )

    async def answer_query(self, task: Task, result: ResultOf, *, blobs: Blobs | None) -> Result:
        """Answer a query of a remote workflow's run (see `_remote_queries`):
        the body replayed read-only on the task's history, then the handler."""
        try:
            value = await answer_query(
                self.app,
                attrs.evolve(task, input=await resolve_task_input(blobs, task.input)),
                clock=self.clock,
                traceback_limit=self.traceback_limit,
            )
        except Exception as exc:
            info = error_info(exc, traceback_limit=self.traceback_limit)
            return result(
                "failed",
                error=info.message,
                code=query_failure_code(exc),
                details=info.details,
                retryable=False,
                error_type=info.type,
                version=2,
            )
        return result("completed", output=value, version=2)
