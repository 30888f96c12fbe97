"""What an engine learned of steps and queues from remote workflows' decisions.

A remote workflow's steps and flow-control queues are registered on the
workers, not here. A decision names each step it calls with its
registration (group, requirements, retry, timeout, queue), so the engine
builds the `Step` and `FlowQueue` it dispatches with and keeps them, by
name, for what follows: the broker queue a step's tasks travel on, and the
queue slots its results give back.
"""

from __future__ import annotations

from typing import Any, final

from ._app import App, FlowQueue, Step


@final
class Learned:
    """Steps and flow-control queues known from decisions, by name."""

    def __init__(self) -> None:
        self.steps: dict[str, Step[Any, Any]] = {}
        self.queues: dict[str, FlowQueue] = {}


def step_of(app: App, learned: Learned, name: str) -> Step[Any, Any] | None:
    """The step ``name``: registered in ``app``, else learned."""
    return app.get_step(name) or learned.steps.get(name)


def queue_of(app: App, learned: Learned, name: str) -> FlowQueue | None:
    """The flow-control queue ``name``: registered in ``app``, else learned."""
    return app.get_queue(name) or learned.queues.get(name)
