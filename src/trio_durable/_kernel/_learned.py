"""What an engine learned of steps, queues and search attributes from remote
workflows' decisions.

A remote workflow's steps and flow-control queues are registered on the
workers, not here. A decision names each step it calls with its
registration (group, requirements, retry, timeout, queue), so the engine
builds the `Step` and `FlowQueue` it dispatches with and keeps them, by
name, for what follows: the broker queue a step's tasks travel on, and the
queue slots its results give back. A decision that sets search attributes
names each one's type as the workers declare it.
"""

from __future__ import annotations

from typing import Any, final

from .._base._policies import FlowQueue
from .._base._search_values import SearchAttributeType
from ._definitions import Registry, Step


@final
class Learned:
    """Steps, flow-control queues and search attributes known from
    decisions, by name."""

    def __init__(self) -> None:
        self.steps: dict[str, Step[Any, Any]] = {}
        self.queues: dict[str, FlowQueue] = {}
        self.search_attributes: dict[str, SearchAttributeType] = {}


def search_types(app: Registry, learned: Learned) -> dict[str, SearchAttributeType]:
    """The search attributes declared in ``app``, and those learned (the
    app's own declaration of a name wins)."""
    return {**learned.search_attributes, **app.search_attributes}


def step_of(app: Registry, learned: Learned, name: str) -> Step[Any, Any] | None:
    """The step ``name``: registered in ``app``, else learned."""
    return app.get_step(name) or learned.steps.get(name)


def queue_of(app: Registry, learned: Learned, name: str) -> FlowQueue | None:
    """The flow-control queue ``name``: registered in ``app``, else learned."""
    return app.get_queue(name) or learned.queues.get(name)
