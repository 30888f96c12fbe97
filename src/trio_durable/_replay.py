"""What one turn of a run reads and writes, and how its body stops.

A turn reads the run and its checkpoints (`TurnState`), replays the body
against them, and collects the writes the body's new operations make. The
body ends the turn at a durable wait by raising `Suspend`; the turn then
writes everything it collected in one batch.
"""

from __future__ import annotations

from typing import final

import attrs

from ._exceptions import NonDeterminismError
from ._records import Checkpoint, Run
from ._stores._base import Op, PutCheckpoint
from ._wire import Task


@final
class Suspend(BaseException):
    """Raised through a workflow body to end the turn at a durable wait.

    It derives from BaseException so that ``except Exception`` in a body does
    not swallow it; a body must not catch it.
    """

    def __init__(
        self,
        reason: str,
        wake_at: float | None = None,
        watch: tuple[int, int] | None = None,
        admission: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.wake_at = wake_at
        # The seq range of checkpoints (remote steps, children) the run
        # waits on, rechecked after the suspend commits (see
        # `Turn.suspend`).
        self.watch = watch
        # The seq of a remote step waiting in a flow-control queue, rechecked
        # after the suspend commits: a release may have let it in meanwhile.
        self.admission = admission


@attrs.define(kw_only=True, eq=False)
class TurnState:
    """What one turn of a run has read and is about to write."""

    run: Run
    checkpoints: dict[int, Checkpoint]
    ops: list[Op] = attrs.field(factory=list)
    # Runs to wake once this turn's writes commit (children created, children
    # told to cancel): they must not run before their rows exist.
    wake_after: list[str] = attrs.field(factory=list)
    started_children: list[Run] = attrs.field(factory=list)
    # Awaited children this turn's writes tell to cancel: once the writes
    # commit, their turns in flight are cut short, as `Engine.cancel` does.
    cancelled_children: list[str] = attrs.field(factory=list)
    # Tasks of remote steps to send once the writes commit, each with the
    # index of the op that records it: a task whose claim lost is not sent.
    dispatch: list[tuple[int, Task]] = attrs.field(factory=list)
    nondeterminism: NonDeterminismError | None = None

    def put(self, checkpoint: Checkpoint) -> None:
        self.checkpoints[checkpoint.seq] = checkpoint
        self.ops.append(PutCheckpoint(checkpoint))
