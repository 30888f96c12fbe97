"""The determinism operations of `Context`: durable time, seeded
randomness and ids, patches for changing a workflow's code under runs in
flight, and the shield a cancelled body cleans up in.

None of them takes part in replay as an operation would (but for the marker
`Context.patched` records): each answers from what the run already holds (its
id, its creation time, its history), so a replay answers the same.
See docs/determinism.md and docs/changing-workflow-code.md.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import attrs

from ..._base import _serde
from ..._base._exceptions import StepFailed, UsageError
from ..._base._records import Checkpoint, CheckpointKind
from ..._kernel._cancellation import write_cleanup
from ..._kernel._definitions import Step, Workflow
from ..._kernel._markers import (
    body_seqs,
    is_patch_marker,
    marker_change_id,
    patch_marker_name,
    record,
)
from ..._kernel._replay import Replay
from ..steps._local import local_step
from ._argument_check import Arguments, check_arguments, checked_from

_CHANGE_ID: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$")


@attrs.define(eq=False)
class DeterminismState:
    """What one `Context` (one turn's replay) worked out once."""

    # Change id -> the answer `patched` gave in this turn.
    patches: dict[str, bool] = attrs.field(factory=dict)
    # Change id -> the seq of its marker in the history (read once).
    markers: dict[str, int] | None = None
    # The highest seq a body operation took in the history as read.
    last_seq: int | None = None
    # `now`: the seqs scanned so far, and the latest time among them.
    now_scanned: int = 0
    now_latest: float | None = None
    rng: random.Random | None = None
    ids: random.Random | None = None
    # None: not looked up yet; 0: the workflow does not check arguments.
    checked_from: int | None = None


def _seed(replay: Replay, purpose: str) -> int:
    run = replay.run
    text = f"trio-durable/{purpose}\0{run.namespace}\0{run.id}\0{run.created_at!r}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:16], "big")


def _check_change_id(change_id: object) -> str:
    if not isinstance(change_id, str) or not _CHANGE_ID.match(change_id):
        raise UsageError(
            f"a change id must be letters, digits, '_', '.', '-' (at most 200), not {change_id!r}"
        )
    return change_id


class DeterminismOperations:
    """Determinism operations of `Context` (see `Context`)."""

    _replay: Replay
    _determinism: DeterminismState

    # -- time, randomness, ids --------------------------------------------------------

    def now(self) -> datetime.datetime:
        """The run's durable time at this point of the body, as an aware
        UTC datetime: when the last durable operation before this point
        ended (the run's creation before the first), as recorded (patch
        markers do not count).

        It is the same on every replay, and does not move while the body
        runs between two durable operations: a workflow's counterpart of
        Temporal's ``workflow.now()``. Read the wall clock inside a step.
        """
        replay, state = self._replay, self._determinism
        upto = replay.peek()
        checkpoints = replay.turn.checkpoints
        latest = state.now_latest if state.now_latest is not None else replay.run.created_at
        for seq in range(state.now_scanned + 1, upto):
            cp = checkpoints.get(seq)
            if cp is None or is_patch_marker(cp):
                # A marker is recorded by the first pass that reaches it,
                # after a `now` there may already have answered.
                continue
            at = cp.finished_at or cp.started_at or cp.enqueued_at
            if at is not None and at > latest:
                latest = at
        state.now_scanned = max(state.now_scanned, upto - 1)
        state.now_latest = latest
        return datetime.datetime.fromtimestamp(latest, tz=datetime.UTC)

    def random(self) -> random.Random:
        """The run's own `random.Random`, seeded from the run (its
        namespace, id and creation time), so that the body draws the same
        numbers on every replay (as Temporal's ``workflow.random()``).

        One instance per turn, fresh from the seed: draw from it only in
        the body, in an order the body's code fixes (a draw moved before
        another changes both).
        """
        state = self._determinism
        if state.rng is None:
            state.rng = random.Random(_seed(self._replay, "random"))
        return state.rng

    def uuid4(self) -> uuid.UUID:
        """A version-4 UUID that is the same on every replay: the n-th
        call of a run always returns the run's n-th id (as Temporal's
        ``workflow.uuid4()``). Drawn from a seeded stream of its own, apart
        from `random`'s, so drawing numbers does not change the ids.
        """
        state = self._determinism
        if state.ids is None:
            state.ids = random.Random(_seed(self._replay, "uuid4"))
        return uuid.UUID(int=state.ids.getrandbits(128), version=4)

    # -- patches ----------------------------------------------------------------------

    def patched(self, change_id: str) -> bool:
        """Whether this run takes the new code of the change ``change_id``.

        True for a run that reaches this point with nothing recorded after
        it (a new run, or one that waited right before it), which records a
        marker (a ``local`` checkpoint named ``patch:<change id>``) so that
        every replay answers True too; False for a run whose history already
        went past this point without the marker (recorded by the code before
        the change), and for a run that ended without it (replayed for a
        query, or by `trio_durable.testing.replay`). The answer is kept for the rest of the turn: later
        calls with the same id return it. See docs/changing-workflow-code.md.

        Raises:
          UsageError: ``change_id`` is not letters, digits, ``_``, ``.``,
            ``-`` (at most 200).
        """
        change_id = _check_change_id(change_id)
        answer = self._determinism.patches.get(change_id)
        if answer is None:
            answer = self._decide_patch(change_id)
        return answer

    def deprecate_patch(self, change_id: str) -> None:
        """Mark the change ``change_id`` as the only code left: put it where
        ``if ctx.patched(change_id):`` stood, keeping only the new branch,
        once no run that predates the change is open.

        It never changes the replay: a history with the change's marker
        and one without are both accepted (every operation steps over a
        marker nothing asks for). A run that reaches it with nothing
        recorded after it still records the marker, so that a deploy that
        still calls ``patched(change_id)`` (in a rollout) replays it on
        the new branch. Remove the call once no such deploy runs.

        Raises:
          UsageError: ``change_id`` is malformed (as for `patched`).
        """
        change_id = _check_change_id(change_id)
        if change_id not in self._determinism.patches:
            self._decide_patch(change_id)

    def _decide_patch(self, change_id: str) -> bool:
        replay, state = self._replay, self._determinism
        checkpoints = replay.turn.checkpoints
        if state.markers is None:
            state.markers = {}
            for seq in sorted(body_seqs(checkpoints)):
                cp = checkpoints[seq]
                if is_patch_marker(cp):
                    state.markers.setdefault(marker_change_id(cp), seq)
            state.last_seq = max(body_seqs(checkpoints), default=0)
        position = replay.peek()  # past the markers recorded right here
        seen = state.markers.get(change_id)
        if seen is not None and seen < position:
            answer = True
        elif position > (state.last_seq or 0) and not replay.run.done:
            # Nothing recorded from here on: new code runs from here. (A
            # run that ended, replayed by a reader or a replay test, went
            # past every point without the marker.)
            seq = replay.take_marker_seq()
            now = replay.runtime.clock.now()
            replay.turn.put(record(replay.run.id, seq, patch_marker_name(change_id), "true", now))
            state.markers[change_id] = seq
            answer = True
        else:
            answer = False
        state.patches[change_id] = answer
        return answer

    # -- cancellation -------------------------------------------------------------------

    @contextmanager
    def shield(self) -> Iterator[None]:
        """A block whose durable operations run even after the run's
        cancellation was delivered: where a body catching `Cancelled`
        runs its cleanup steps::

            try:
                await ctx.wait_signal("approved")
            except td.Cancelled:
                with ctx.shield():
                    await ctx.step(release_hold, order_id)
                raise

        Cleanup may run any durable operation. A local step is written as
        soon as it ends; one that waits (a timer, a signal, a remote step, a
        child, a fan) suspends the run, which stays in its cleanup until the
        wait is over. Outside a cancelled run's cleanup the block changes
        nothing. See docs/determinism.md.
        """
        delivery = self._replay.cancellation
        if delivery is None:
            yield
            return
        delivery.shield += 1
        try:
            yield
        finally:
            delivery.shield -= 1

    # -- what `Context`'s operations ask first ------------------------------------------

    def _before_op(
        self,
        name: str,
        kind: CheckpointKind,
        arguments: Arguments | None,
        *,
        recorded: Arguments | None = None,
    ) -> None:
        """Before a durable operation: compare its ``arguments`` (with what
        ``recorded`` reads of its checkpoint, by default its input) if the
        workflow checks them."""
        if arguments is None:
            return
        first = self._checked_from()
        if first:
            check_arguments(self._replay, first, name, kind, arguments, recorded=recorded)

    def _checked_from(self) -> int:
        """The first seq the check covers; 0 if the workflow does not check
        arguments."""
        replay, state = self._replay, self._determinism
        if state.checked_from is None:
            wf = replay.runtime.app.find_workflow(replay.run.workflow, replay.run.version)
            checks = wf is not None and wf.check_arguments
            state.checked_from = checked_from(replay) if checks else 0
        return state.checked_from

    def _before_fan(
        self, target: Workflow[..., Any] | Step[..., Any] | str, inputs: object
    ) -> None:
        """Before a fan: as `_before_op`, comparing each member's input with
        what the member's checkpoint (at its reserved seq) recorded."""
        replay = self._replay
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            return  # the fan refuses them
        first = self._checked_from()
        if not first:
            return
        kind: CheckpointKind
        if isinstance(target, Step):
            name, kind = target.name, "remote"
        else:
            name, kind = replay.workflow(target).name, "child"
        start = replay.peek()
        for i, value in enumerate(inputs):
            check_arguments(
                replay, first, name, kind, _member_input(value), seq=start + i, recorded=_input
            )

    async def _local_step(
        self, step: Step[..., Any], args: Sequence[Any], compensate: Step[..., Any] | None
    ) -> Any:
        """A local step; in a cancelled run's cleanup, written as soon as
        it ends."""
        replay = self._replay
        try:
            value = await local_step(replay, step, args, compensate)
        except StepFailed:
            await write_cleanup(replay)
            raise
        await write_cleanup(replay)
        return value


def _member_input(value: Any) -> Arguments:
    # A member a fail-fast fan froze before it started recorded no input.
    return lambda cp: "" if cp.input is None else _serde.dump_args([value])


def _input(cp: Checkpoint) -> str:
    return cp.input or ""


def inputs_of(text: Callable[[], str]) -> Arguments:
    """Arguments compared as the JSON text ``text`` makes (a step's or a
    child's inputs)."""
    return lambda cp: text()
