"""The workflow-control operations of `Context`: ending a run to continue
as a new generation, messaging another run, and calling keyed entities.

`Context` inherits them from `ControlOperations`; each works on the turn's
`Replay` as the operations of `_context` do.
"""

from __future__ import annotations

from typing import Any

from ._entities import EntityRef, workflow_entity
from ._replay import Replay


class ControlOperations:
    """Workflow-control operations of `Context` (see `Context`)."""

    _replay: Replay

    def entity(self, name: str, key: Any) -> EntityRef:
        """One key of the entity ``name``: its handlers are the attributes,
        ``await ctx.entity("cart", key).add(item)``.

        An exclusive call is an awaited child run (``<run>.child.<seq>``)
        that waits its turn behind the key's earlier exclusive calls,
        fleet-wide; replay returns its recorded result, as for
        `Context.child`. A shared call reads the state as stored and its
        result is recorded (replay returns it). See docs/entities.md.

        Raises:
          UnknownEntityError: No entity ``name`` (or, at the call, no such
            handler).
          EntityKeyError: ``key`` is not of the entity's key type.
          InvalidArgumentsError: At the call, the inputs do not fit the
            handler; nothing is recorded.
          RunFailed: An exclusive handler raised (its error's message, code
            and details are the exception's); the state is unchanged.
          StepFailed: A shared handler raised.
        """
        return workflow_entity(self._replay, name, key)
