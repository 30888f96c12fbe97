"""The webhook and breakpoint methods `Engine` and `Client` share.

Each checks that its front end is open, writes through `_webhooks` or
`_breakpoints` with what the front end's `Waker` adds to the batch (a
client's announcement that wakes the run on the engine serving it), and
lets the `Waker` wake what its front end serves itself.
"""

from __future__ import annotations

from typing import Any

from .._base import _serde
from .._base._exceptions import BreakpointNotFoundError
from .._base._index_text import refuse_nul
from .._base._records import Breakpoint, PausedStep
from .._features.hooks import _webhooks
from .._features.steps import _breakpoints
from .._kernel._run_reads import read_run
from ._front_core import FrontPart


class HookActions(FrontPart):
    """Webhook deliveries and breakpoints, for a front end."""

    async def deliver_webhook(self, token: str, payload: Any = None) -> None:
        """Deliver ``payload`` through the webhook of ``token`` (made by
        `Context.webhook`): its run gets it as the signal named as the
        webhook, and the engine serving it resumes it at once.

        Raises:
          WebhookNotFoundError: No webhook has this token.
          WebhookUsedError: It was delivered already (a token is good once).
          InvalidRunStateError: Its run has ended.
          SerializationError: The payload cannot be serialized.
        """
        self._core.check_open()
        run, waiting = await _webhooks.deliver_webhook(
            self._core.store, self._core.clock.now(), token, payload, self._core.waker.wake_ops
        )
        if waiting:
            self._core.waker.woke(run)

    async def set_breakpoint(self, *, workflow: str, step: str) -> Breakpoint:
        """Pause runs of ``workflow`` before each step named ``step`` that
        has no recorded result (see docs/webhooks-and-breakpoints.md).
        Setting one already set returns it.

        Raises:
          UsageError: ``workflow`` or ``step`` is not a non-empty string.
        """
        self._core.check_open()
        try:
            return await _breakpoints.set_breakpoint(
                self._core.store, self._core.clock.now(), self._core.origin, workflow, step
            )
        finally:
            # Even if the write raised: it may have been applied, and this
            # front end's own watch skips the announcement it carried.
            self._core.waker.changed("breakpoints")

    async def breakpoints(self) -> list[Breakpoint]:
        """Every breakpoint, oldest first."""
        self._core.check_open()
        return await self._core.store.list_breakpoints()

    async def clear_breakpoint(self, breakpoint_id: str) -> None:
        """Remove a breakpoint. Runs paused at it stay paused until
        continued or skipped.

        Raises:
          BreakpointNotFoundError: No breakpoint has this id.
        """
        self._core.check_open()
        try:
            existed = await _breakpoints.clear_breakpoint(
                self._core.store, self._core.origin, breakpoint_id
            )
        finally:
            self._core.waker.changed("breakpoints")  # as in set_breakpoint
        if not existed:
            raise BreakpointNotFoundError(f"no breakpoint {breakpoint_id!r}")

    async def paused_steps(self, run_id: str | None = None) -> list[PausedStep]:
        """The runs paused at a breakpoint (only ``run_id``, if given), with
        the step each is paused before."""
        self._core.check_open()
        refuse_nul("run_id", run_id)
        return await self._core.store.paused_steps(run_id)

    async def continue_run(self, run_id: str) -> None:
        """Resume a run paused at a breakpoint: the step runs.

        Raises:
          RunNotFoundError: No run has this id.
          InvalidRunStateError: The run is not paused.
        """
        await self._resume(run_id, False, None)

    async def skip_step(self, run_id: str, output: Any = None) -> None:
        """Resume a run paused at a breakpoint without running the step:
        it is recorded as completed with ``output``, which the body gets
        as the step's return value.

        Raises:
          RunNotFoundError: No run has this id.
          InvalidRunStateError: The run is not paused.
          SerializationError: ``output`` cannot be serialized.
        """
        await self._resume(run_id, True, output)

    async def _resume(self, run_id: str, skip: bool, output: Any) -> None:
        self._core.check_open()
        output_json = _serde.dumps(output) if skip else None
        run = await read_run(self._core.store, run_id, None)
        also = list(self._core.waker.wake_ops([run]))
        await _breakpoints.resume(self._core.store, self._core.clock.now(), run, output_json, also)
        self._core.waker.woke(run)
