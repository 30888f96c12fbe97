"""The store operations of webhooks and breakpoints (part of `Op`).

Webhooks are kept under the SHA-256 of their token; a delivery marks one
used in the batch that delivers its payload, so of two deliveries of one
token exactly one wins. Breakpoints are rows any process may add or
remove; a run paused at one has a row in ``paused_steps`` besides the
marked checkpoint its turns replay.
"""

from __future__ import annotations

from typing import final

import attrs

from .._base._records import Breakpoint, PausedStep


@final
@attrs.define(frozen=True)
class CreateWebhook:
    """Keep a webhook of ``run_id`` under ``token_hash`` (nothing if one is
    kept under it already: a turn written again). Result: None."""

    token_hash: str
    run_id: str
    name: str
    at: float


@final
@attrs.define(frozen=True)
class UseWebhook:
    """Mark the webhook under ``token_hash`` used at ``at``.

    It must exist and be unused: otherwise the whole batch is rolled back
    and `WriteConflict` raised (so the delivery written with it never
    happens twice). Result: None.
    """

    token_hash: str
    at: float


@final
@attrs.define(frozen=True)
class KeepSetting:
    """Store ``value`` under ``name`` unless a value is stored there
    already. Result: the value stored now (the older one, if any)."""

    name: str
    value: str


@final
@attrs.define(frozen=True)
class PutBreakpoint:
    """Add a breakpoint (nothing if its id exists). Result: None."""

    breakpoint: Breakpoint


@final
@attrs.define(frozen=True)
class DeleteBreakpoint:
    """Remove the breakpoint with this id. Result: whether it existed."""

    breakpoint_id: str


@final
@attrs.define(frozen=True)
class PauseStep:
    """Record that a run paused before the step at ``paused.seq`` (nothing
    if recorded already). Result: None."""

    paused: PausedStep

    @property
    def run_id(self) -> str:
        return self.paused.run_id


@final
@attrs.define(frozen=True)
class ResumeStep:
    """Remove the pause of ``(run_id, seq)``.

    It must exist: otherwise the whole batch is rolled back and
    `WriteConflict` raised (of two actions resuming one pause, exactly one
    wins). Result: None.
    """

    run_id: str
    seq: int


HookOp = (
    CreateWebhook
    | UseWebhook
    | KeepSetting
    | PutBreakpoint
    | DeleteBreakpoint
    | PauseStep
    | ResumeStep
)
