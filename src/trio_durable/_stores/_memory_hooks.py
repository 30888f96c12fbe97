"""The memory store's webhooks, breakpoints, pauses and settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import attrs

from .._base._records import Breakpoint, PausedStep, Webhook
from ._base import WriteConflict
from ._hook_ops import (
    CreateWebhook,
    DeleteBreakpoint,
    HookOp,
    KeepSetting,
    PauseStep,
    PutBreakpoint,
    ResumeStep,
    UseWebhook,
)

_Undo = Callable[[], None]


@final
class MemoryHooks:
    """The rows, and the writes of `HookOp` with their undos."""

    def __init__(self) -> None:
        self.webhooks: dict[str, Webhook] = {}
        self.breakpoints: dict[str, Breakpoint] = {}
        self.paused: dict[tuple[str, int], PausedStep] = {}
        self.settings: dict[str, str] = {}

    def apply(self, op: HookOp, journal: list[_Undo]) -> Any:
        match op:
            case CreateWebhook(token_hash, run_id, name, at):
                if token_hash not in self.webhooks:
                    hook = Webhook(token_hash=token_hash, run_id=run_id, name=name, created_at=at)
                    put_undoable(self.webhooks, token_hash, hook, journal)
                return None
            case UseWebhook(token_hash, at):
                found = self.webhooks.get(token_hash)
                if found is None or found.used_at is not None:
                    raise WriteConflict("the webhook is unknown or used")
                put_undoable(self.webhooks, token_hash, attrs.evolve(found, used_at=at), journal)
                return None
            case KeepSetting(name, value):
                if name not in self.settings:
                    put_undoable(self.settings, name, value, journal)
                return self.settings[name]
            case PutBreakpoint(bp):
                if bp.id not in self.breakpoints:
                    put_undoable(self.breakpoints, bp.id, bp, journal)
                return None
            case DeleteBreakpoint(breakpoint_id):
                if breakpoint_id not in self.breakpoints:
                    return False
                put_undoable(self.breakpoints, breakpoint_id, None, journal)
                return True
            case PauseStep(paused):
                key = (paused.run_id, paused.seq)
                if key not in self.paused:
                    put_undoable(self.paused, key, paused, journal)
                return None
            case ResumeStep(run_id, seq):
                if (run_id, seq) not in self.paused:
                    raise WriteConflict(f"run {run_id!r} is not paused at seq {seq}")
                put_undoable(self.paused, (run_id, seq), None, journal)
                return None
        raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover

    def list_breakpoints(self) -> list[Breakpoint]:
        return sorted(self.breakpoints.values(), key=lambda bp: (bp.created_at, bp.id))

    def paused_steps(self, run_id: str | None) -> list[PausedStep]:
        return [p for key, p in sorted(self.paused.items()) if run_id is None or key[0] == run_id]

    def forget(self, run_id: str) -> None:
        """Drop a pruned run's webhooks and pauses."""
        for token_hash in [t for t, hook in self.webhooks.items() if hook.run_id == run_id]:
            del self.webhooks[token_hash]
        for key in [key for key in self.paused if key[0] == run_id]:
            del self.paused[key]


def put_undoable(mapping: dict[Any, Any], key: Any, value: Any, journal: list[_Undo]) -> None:
    """Set ``mapping[key]`` to ``value`` (None deletes it), with the undo of
    that in ``journal``."""
    missing = key not in mapping
    old = mapping.get(key)
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value

    def undo() -> None:
        if missing:
            mapping.pop(key, None)
        else:
            mapping[key] = old

    journal.append(undo)
