"""The workflow-control operations of `Context`: ending a run to continue
as a new generation, messaging another run, and calling keyed entities.

`Context` inherits them from `ControlOperations`; each works on the turn's
`Replay` as the operations of `_context` do.
"""

from __future__ import annotations

from ._replay import Replay


class ControlOperations:
    """Workflow-control operations of `Context` (see `Context`)."""

    _replay: Replay
