"""Breakpoints: pausing runs before a step, durably, until an action.

A breakpoint names a workflow and a step. A run of that workflow reaching a
step of that name with no recorded result pauses before running it: the
turn records the step's checkpoint ``pending`` with the `PAUSED` mark, a row
of ``paused_steps``, and suspends the run with no wake time. Replays find the
mark and suspend again. An action resumes it (`continue_step`: the mark
becomes `CONTINUED` and the step runs on the next turn; `skip_step`: the
checkpoint is settled with the given output, as if the step had returned
it), removing the pause row in the same batch, so of two actions exactly
one wins.

Engines keep the breakpoints in memory (`Breakpoints`): read at the first
step after the engine starts, and again after an announcement says they
changed (or the watch may have missed one), never once per step.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from ..._base._bounds import check_name
from ..._base._exceptions import InvalidRunStateError
from ..._base._records import (
    TERMINAL_STATUSES,
    Breakpoint,
    Checkpoint,
    CheckpointKind,
    Mark,
    PausedStep,
    Run,
)
from ..._kernel._carrier import CONTINUED as CONTINUED
from ..._kernel._hooks import Feature
from ..._kernel._replay import Suspend
from ..._stores._base import RunWatch, WriteConflict, offers
from ..._stores._hook_ops import DeleteBreakpoint, PauseStep, PutBreakpoint, ResumeStep
from ..._stores._ops import Announce, ClaimCheckpoint, Op, SettleCheckpoint, UpdateRun

if TYPE_CHECKING:
    from ..._kernel._replay import Replay
    from ..._stores._base import Store

PAUSED: Final = "paused"
"""The mark (its code) of a pending step a breakpoint paused its run before."""

_UNWATCHED_REFRESH: Final = 5.0
"""Seconds an engine keeps the breakpoints it read from a store that
announces nothing (not a `RunWatch`) before reading them again."""


def marked(cp: Checkpoint | None, mark: str) -> bool:
    """Whether ``cp`` is a pending step with ``mark``."""
    return (
        cp is not None and cp.status == "pending" and cp.mark is not None and cp.mark.code == mark
    )


@final
class Breakpoints(Feature):
    """An engine's copy of the store's breakpoints."""

    def __init__(self) -> None:
        self._by_step: dict[tuple[str, str], Breakpoint] = {}
        self._stale = True
        self._read_at = 0.0
        self._lock = trio.Lock()

    def changed(self) -> None:
        """Read them again before the next step (an announcement said they
        changed, or announcements may have been missed)."""
        self._stale = True

    def announced(self, kind: str, run_id: str | None) -> None:
        if kind == "breakpoints":
            self.changed()

    def missed(self) -> None:
        self.changed()

    async def paused_steps(self, store: Store, workflow: str) -> frozenset[str]:
        return await self.steps_of(store, workflow)

    async def refresh(self, store: Store) -> None:
        """Read the breakpoints (the engine does at start, so a step finds
        them without waiting for the store)."""
        async with self._lock:
            # Cleared before reading: a change announced during the read
            # makes the next step read again.
            self._stale = False
            try:
                found = await store.list_breakpoints()
            except BaseException:
                self._stale = True
                raise
            self._by_step = {(bp.workflow, bp.step): bp for bp in found}
            self._read_at = trio.current_time()

    async def steps_of(self, store: Store, workflow: str) -> frozenset[str]:
        """The steps of ``workflow`` that have a breakpoint (read as
        `match` reads them)."""
        await self.match(store, workflow, "")
        return frozenset(step for wf, step in self._by_step if wf == workflow)

    async def match(self, store: Store, workflow: str, step: str) -> Breakpoint | None:
        """The breakpoint on ``step`` of ``workflow``, if any: from memory,
        unless they changed since they were read."""
        if not offers(store, RunWatch) and (
            trio.current_time() - self._read_at > _UNWATCHED_REFRESH
        ):
            self._stale = True
        if self._stale:
            await self.refresh(store)
        elif self._lock.locked():
            # A read in flight: wait for what it finds.
            async with self._lock:
                pass
        return self._by_step.get((workflow, step))


async def pause_before(
    replay: Replay,
    seq: int,
    name: str,
    kind: CheckpointKind,
    input_json: str,
    compensation: str | None,
) -> None:
    """Pause the run before the new step ``name`` at ``seq`` if a
    breakpoint is on it (raising `Suspend`); return if none is.

    Breakpoints are an engine's: a worker deciding a remote workflow's turn
    stops its body before a local step the engine named paused (the
    decider's `pauses`), and the engine pauses the run there
    (`pause_decided`)."""
    rt, run = replay.decider.engine, replay.run
    if rt is None:
        return
    found = await rt.features.part(Breakpoints).match(rt.store, run.workflow, name)
    if found is None:
        return
    now = rt.clock.now()
    replay.turn.put(
        Checkpoint(
            run_id=run.id,
            seq=seq,
            name=name,
            kind=kind,
            input=input_json,
            compensation=compensation,
            mark=Mark(code=PAUSED, message=f"paused at breakpoint {found.id}"),
            enqueued_at=now,
        )
    )
    paused = PausedStep(
        run_id=run.id,
        seq=seq,
        workflow=run.workflow,
        step=name,
        breakpoint_id=found.id,
        paused_at=now,
    )
    replay.turn.ops.append(PauseStep(paused))
    raise Suspend("breakpoint")


def pause_command(name: str, input_json: str, compensation: str | None) -> dict[str, Any]:
    """The command a worker's decision stops at before a local step a
    breakpoint is on."""
    return {"op": "pause", "name": name, "input": input_json, "compensation": compensation}


async def pause_decided(
    replay: Replay, name: str, input_json: str, compensation: str | None
) -> None:
    """Carry out a decision's ``pause`` command at the replay's next seq:
    pause the run before the local step ``name`` (it stays paused until an
    action). If the step was skipped meanwhile, return (settled); if it was
    continued, or its breakpoint went before the pause was written, make
    the run due again, its step marked `CONTINUED`, so that the next
    decision runs it.

    Raises:
      Suspend: The run waits, paused or due again.
    """
    seq = replay.next_seq()
    cp = replay.recorded(seq, name, "local")
    if cp is not None and cp.status in ("completed", "failed"):
        return
    if cp is None:
        await pause_before(replay, seq, name, "local", input_json, compensation)
        cp = Checkpoint(
            run_id=replay.run.id,
            seq=seq,
            name=name,
            kind="local",
            input=input_json,
            compensation=compensation,
            mark=Mark(code=CONTINUED, message="no breakpoint is on it any more"),
            enqueued_at=replay.runtime.clock.now(),
        )
        replay.turn.put(cp)
    suspend_if_paused(cp)
    raise Suspend("continued", replay.runtime.clock.now())


def suspend_if_paused(cp: Checkpoint | None) -> None:
    """Suspend again a run replaying a step it is paused before."""
    if marked(cp, PAUSED):
        raise Suspend("breakpoint")


# -- actions from outside a run --------------------------------------------------


def announce_change(store: Store, origin: str, breakpoint_id: str) -> list[Op]:
    """The announcement that tells engines elsewhere to read the
    breakpoints again."""
    if not isinstance(store, RunWatch):
        return []
    return [Announce(run_id=breakpoint_id, kind="breakpoints", origin=origin)]


async def set_breakpoint(
    store: Store, now: float, origin: str, workflow: str, step: str
) -> Breakpoint:
    """Add a breakpoint (or return the one already on that step).

    Raises:
      UsageError: ``workflow`` or ``step`` is not a non-empty string.
    """
    check_name("workflow", workflow)
    check_name("step", step)
    for existing in await store.list_breakpoints():
        if (existing.workflow, existing.step) == (workflow, step):
            return existing
    bp = Breakpoint(id=f"bp-{secrets.token_hex(8)}", workflow=workflow, step=step, created_at=now)
    await store.apply([PutBreakpoint(bp), *announce_change(store, origin, bp.id)])
    return bp


async def clear_breakpoint(store: Store, origin: str, breakpoint_id: str) -> bool:
    """Remove a breakpoint; returns whether it existed (runs paused at it
    stay paused until an action)."""
    check_name("breakpoint_id", breakpoint_id)
    existed, *_ = await store.apply(
        [DeleteBreakpoint(breakpoint_id), *announce_change(store, origin, breakpoint_id)]
    )
    return bool(existed)


async def _paused(store: Store, run: Run) -> PausedStep:
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run.id!r} is {run.status}; it is not paused")
    pauses = await store.paused_steps(run.id)
    if not pauses:
        raise InvalidRunStateError(f"run {run.id!r} is not paused at a breakpoint")
    return pauses[0]


async def resume(
    store: Store, now: float, run: Run, output_json: str | None, also: list[Op]
) -> PausedStep:
    """Continue ``run`` past the step it is paused before (the first, if
    several), or, given ``output_json``, skip that step with that output,
    writing ``also`` with it.

    Raises:
      InvalidRunStateError: The run is not paused (or another action
        resumed it meanwhile); nothing changed.
    """
    paused = await _paused(store, run)
    op: Op
    if output_json is not None:
        op = SettleCheckpoint(run.id, paused.seq, "completed", output_json, None, now)
    else:
        [cp] = await store.get_checkpoints(run.id, paused.seq, paused.seq)
        mark = Mark(code=CONTINUED, message=f"continued past breakpoint {paused.breakpoint_id}")
        op = ClaimCheckpoint(attrs.evolve(cp, mark=mark))
    # Due now: an engine that starts later (or missed the announcement)
    # finds the run by its due time; its checkpoint, still pending when
    # continued, keeps the reconcile pass from seeing it as stalled.
    due = UpdateRun(
        run.id, {"wake_at": now}, expect_status=frozenset({"suspended"}), now=now, strict=False
    )
    try:
        await store.apply([ResumeStep(run.id, paused.seq), op, due, *also])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run.id!r} was resumed meanwhile") from exc
    return paused
