"""`StoreHelpers`: the store protocol's single-operation forms, written on
top of `Store.apply`, for store implementations to inherit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._base._records import Checkpoint, Run
from ._ops import (
    ClaimCheckpoint,
    CreateRun,
    DeliverSignal,
    LockRun,
    Op,
    PutCheckpoint,
    ReleaseRun,
    RemoveSignalWaiter,
    WaitSignal,
)


class StoreHelpers:
    """The protocol's single-operation forms, written on top of `apply`.

    Store implementations inherit these so that every store offers them.
    """

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        raise NotImplementedError

    async def create_run(self, run: Run) -> tuple[Run, bool]:
        """Insert ``run`` unless its id exists; return the stored run and
        whether it was created."""
        [result] = await self.apply([CreateRun(run)])
        stored: tuple[Run, bool] = result
        return stored

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Insert or replace a checkpoint."""
        await self.apply([PutCheckpoint(checkpoint)])

    async def save_checkpoint_if_pending(self, checkpoint: Checkpoint) -> bool:
        """The claim write: replace the checkpoint only if the stored one is
        pending. Returns whether it was written."""
        [result] = await self.apply([ClaimCheckpoint(checkpoint)])
        return bool(result)

    async def save_checkpoints_if_pending(self, checkpoints: Sequence[Checkpoint]) -> list[bool]:
        """The batch claim: one atomic write, one result per checkpoint."""
        return [bool(r) for r in await self.apply([ClaimCheckpoint(c) for c in checkpoints])]

    async def try_lock_run(self, run_id: str, owner: str, expiry: float, now: float) -> bool:
        """Take or extend a run's lease (see `LockRun`)."""
        [result] = await self.apply([LockRun(run_id, owner, expiry, now)])
        return bool(result)

    async def release_run_lock(self, run_id: str, owner: str) -> None:
        """Give up a run's lease if ``owner`` holds it."""
        await self.apply([ReleaseRun(run_id, owner)])

    async def add_signal_waiter(
        self, token: str, run_id: str, seq: int, at: float | None = None
    ) -> str | None:
        """Register a waiter, or consume a buffered signal (see `WaitSignal`)."""
        [result] = await self.apply([WaitSignal(token, run_id, seq, at)])
        payload: str | None = result
        return payload

    async def remove_signal_waiter(self, token: str) -> None:
        """Remove the waiter for ``token``, if any."""
        await self.apply([RemoveSignalWaiter(token)])

    async def deliver_signal(
        self, token: str, payload: str, at: float | None = None
    ) -> tuple[str, int] | None:
        """Deliver a signal to its waiter or buffer it (see `DeliverSignal`)."""
        [result] = await self.apply([DeliverSignal(token, payload, at)])
        waiter: tuple[str, int] | None = result
        return waiter
