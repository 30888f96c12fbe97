"""The lifecycle feature: a run's deadline, its cancellation's cleanup,
compensation, continue-as-new, and the children cancelled with their
parent, as the kernel's turns reach them (see `_kernel._hooks`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, final

from ..._kernel._hooks import Feature
from ._cancel_turn import deliver_cancel
from ._lifecycle import (
    body_deadline,
    cancel_error,
    cancel_linked,
    check_deadline,
    continue_run,
    wake_by_deadline,
)
from ._saga import compensate

if TYPE_CHECKING:
    from ..._base._records import ErrorInfo
    from ..._kernel._replay import ContinueAsNew, Replay
    from ..._kernel._scheduler import Slot
    from ..._kernel._turn import Turn


@final
class Lifecycle(Feature):
    """A run's life past its body."""

    def turn_starts(self, turn: Turn, now: float) -> None:
        # A deadline that passed makes the run cancelling, with compensation.
        check_deadline(turn, now)

    async def cancel_turn(
        self, turn: Turn, slot: Slot, renew_lease: Callable[[], Awaitable[None]]
    ) -> bool:
        return await deliver_cancel(turn, slot, renew_lease)

    def body_deadline(self, turn: Turn, now: float) -> float:
        return body_deadline(turn.state.records, now)

    async def continue_run(self, turn: Turn, cont: ContinueAsNew) -> bool:
        await continue_run(turn, cont)
        return True

    async def undo(self, replay: Replay) -> None:
        await compensate(replay)

    def wake_by(self, turn: Turn, wake_at: float | None) -> float | None:
        return wake_by_deadline(turn.state.records, wake_at)

    def cancel_error(self, turn: Turn) -> ErrorInfo | None:
        return cancel_error(turn.state.records)

    async def cancelling(self, turn: Turn, error: ErrorInfo) -> None:
        await cancel_linked(turn)
