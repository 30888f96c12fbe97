"""Sliding windows: what starts the waiting members of a fan with
``concurrency=``.

A fan of N members with ``concurrency=c`` (c < N) records every member in
its first turn: members ``0 .. c-1`` start at once, the others are recorded
pending but *waiting* (not started, marked with the error code
`WINDOW_WAIT`). Each time a member in flight ends, the waiting member of
lowest index starts: at most c members are in flight, a slow member holds
back no other, and which member starts next depends on indexes alone.

The start is made where the member ended, just after the write that settled
it (`advance_windows`: the result consumer for remote steps, the child's
last turn for child workflows), not by a turn of the parent: the parent is
woken once the last member ended (or at a ``fail_fast`` failure, see
`_barrier`), so its turns read the fan's checkpoints a few times over the
fan's life, not once per member, and a start reads only the rows it starts.

A keyed value per fan (scope `WINDOW_SCOPE`, a `Window`) is the window's
durable state: the members in flight and the next one to start, with what
a start needs that the member's checkpoint lacks. A start removes the
members that ended from those in flight and adds the ones it starts, in one
write that expects the version of the value it read: so each end starts
exactly one member, even when engines sharing results, or a parent's turn
rescuing a lost start, race to make it. A ``fail_fast`` fan that freezes
deletes the value, which stops every start still on its way.

A start lost to a crash between the settle and the start is rescued by the
parent: while members wait, it suspends with a due time that comes late and
backs off (`_fans.RESCUE_FIRST`), and its turn makes the starts owed to
members in flight that ended.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, final

import attrs
import trio

from ..._base._exceptions import StoreError
from ..._base._failures import FAN_CANCELLED
from ..._base._observe import Event
from ..._base._records import Checkpoint, Mark, Run, RunStatus, StoredValue
from ..._brokers._base import BrokerError
from ..._kernel._carrier import sent_now
from ..._kernel._executions import new_execution
from ..._kernel._hooks import Feature
from ..._kernel._learned import step_of
from ..._kernel._replay import TurnDraft
from ..._stores._base import Store, WriteConflict
from ..._stores._ops import ClaimCheckpoint, Op, PutValue, UpdateRun
from ..._wire._messages import Task
from ._children import record_child

if TYPE_CHECKING:
    from ..._kernel._runtime import Runtime

logger = logging.getLogger("trio_durable")

WINDOW_WAIT: Final = "fan_window"
"""The error code that marks a member waiting for its place in its fan's
window (pending, not started)."""

WINDOW_SCOPE: Final = "fan-window"
"""The scope of the keyed values that hold fans' windows."""

_PARENT_WAITS: Final[frozenset[RunStatus]] = frozenset({"suspended", "running"})
_ATTEMPTS: Final = 4

_locks: Final[weakref.WeakValueDictionary[tuple[int, str, int], trio.Lock]] = (
    weakref.WeakValueDictionary()
)
"""The starts of one fan made in this process, by store, run and fan: they
take turns, rather than fail each other's writes (children of one fan end
in turns that run at once). Engines in other processes are kept apart by
the window value's version alone."""


def _lock(store: Store, run_id: str, first: int) -> trio.Lock:
    key = (id(store), run_id, first)
    lock = _locks.get(key)
    if lock is None:
        lock = _locks[key] = trio.Lock()
    return lock


@final
@attrs.define(frozen=True, kw_only=True)
class Window:
    """A fan's window, as its keyed value holds it.

    Attributes:
      concurrency: The fan's ``concurrency=``.
      workflow: The parent's workflow (its tasks name it).
      namespace: The parent's namespace (its children's).
      version: The child workflow's version, for a fan of children.
      next: The index of the next member to start.
      inflight: The indexes of the members started whose end has not
        started another yet, in the order they started.
      build: The build the parent's tasks went to when the fan began
        (see `_builds`): the members the window starts go there too.
    """

    concurrency: int
    workflow: str
    namespace: str
    version: str | None = None
    next: int = 0
    inflight: tuple[int, ...] = ()
    build: str | None = None

    def dump(self) -> str:
        data = attrs.asdict(self)
        data["inflight"] = list(self.inflight)
        if self.build is None:
            # Left out: the window reads as the releases before wrote it.
            del data["build"]
        return json.dumps(data, sort_keys=True)

    def slide(self, ended: Iterable[int], size: int) -> tuple[Window, list[int]]:
        """The window once the members ``ended`` (indexes in flight) made
        way, and the members that start in their place: the next ones by
        index, one for each."""
        gone = set(ended) & set(self.inflight)
        starts = list(range(self.next, min(self.next + len(gone), size)))
        inflight = (*(i for i in self.inflight if i not in gone), *starts)
        return attrs.evolve(self, next=self.next + len(starts), inflight=inflight), starts


def window_key(run_id: str, first: int) -> str:
    """The key of the fan of ``run_id`` whose first seq is ``first``."""
    return f"{run_id}#{first}"


def read_window(stored: StoredValue | None) -> Window | None:
    """The window a stored value holds, or None (no window: the fan has no
    concurrency limit, runs in waves, froze, or ended)."""
    if stored is None or stored.value is None:
        return None
    data = json.loads(stored.value)
    data["inflight"] = tuple(data.get("inflight", ()))
    return Window(**data)


def waiting(cp: Checkpoint | None) -> bool:
    """Whether a member waits for its place in its fan's window."""
    return (
        cp is not None
        and cp.status == "pending"
        and cp.started_at is None
        and cp.mark is not None
        and cp.mark.code == WINDOW_WAIT
    )


def waiting_mark(concurrency: int) -> Mark:
    """The mark of a waiting member."""
    return Mark(
        code=WINDOW_WAIT, message=f"waiting for its place in its fan's window of {concurrency}"
    )


def lets_successor_start(cp: Checkpoint) -> bool:
    """Whether a member that ended makes way for the next: not if its
    ``fail_fast`` fan froze (it cancelled the rest) or is about to (it
    failed)."""
    if cp.status not in ("completed", "failed"):
        return False
    if cp.error is not None and cp.error.code == FAN_CANCELLED:
        return False
    return not (cp.status == "failed" and cp.parallel_mode == "fail_fast")


@final
class FanWindows(Feature):
    """The fans with a window: a settled member lets the next one start."""

    async def settled(self, rt: Runtime, checkpoints: Sequence[Checkpoint]) -> None:
        await advance_windows(rt, checkpoints)


async def advance_windows(rt: Runtime, settled: Iterable[Checkpoint]) -> None:
    """After a write settled ``settled``: for each member of a fan with a
    window that ended and lets its fan go on, start the next waiting
    member. A start that cannot be made here (the store failed, the step
    requires capabilities, the parent is told to cancel) wakes the parent
    instead, whose turn makes it."""
    ends: dict[tuple[str, int, int], list[int]] = {}
    for cp in settled:
        if cp.parallel_group is None or cp.parallel_size is None:
            continue
        if lets_successor_start(cp):
            ends.setdefault((cp.run_id, cp.parallel_group, cp.parallel_size), []).append(cp.seq)
    for (run_id, first, size), seqs in ends.items():
        try:
            async with _lock(rt.store, run_id, first):
                done = await _advance(rt, run_id, first, size, [seq - first for seq in seqs])
        except (StoreError, BrokerError) as exc:
            logger.warning("could not slide the window of fan %s of %r: %s", first, run_id, exc)
            done = False
        if not done:
            rt.scheduler.wake(run_id)


async def _advance(rt: Runtime, run_id: str, first: int, size: int, ended: list[int]) -> bool:
    """Start a member in place of each of ``ended`` (indexes) still in
    flight; False if the parent's turn should look instead."""
    store = rt.store
    key = window_key(run_id, first)
    for _ in range(_ATTEMPTS):
        stored = await store.get_value(WINDOW_SCOPE, key)
        window = read_window(stored)
        if stored is None or window is None:
            return True
        # An end that already made way (this write was tried before, or the
        # parent's turn rescued it) is not counted twice: it left inflight.
        slid, starts = window.slide(ended, size)
        if not starts:
            return True
        rows = await store.get_checkpoints(run_id, first + starts[0], first + starts[-1])
        if len(rows) != len(starts) or not all(waiting(cp) for cp in rows):
            return False  # not recorded as a window records them
        plan = _Starts(rt, run_id, first, size, window)
        for cp in rows:
            await plan.check(cp)
            if not plan.add(cp):
                return False
        now = rt.clock.now()
        head: list[Op] = [
            PutValue(WINDOW_SCOPE, key, slid.dump(), now, expect_version=stored.version),
            # A parent told to cancel (or gone) starts nothing more.
            UpdateRun(run_id, {}, expect_status=_PARENT_WAITS),
        ]
        try:
            results = await store.apply([*head, *plan.ops])
        except WriteConflict:
            continue
        await plan.after_commit(results[len(head) :])
        return True
    return False


@final
class _Starts:
    """The writes that start waiting members outside the parent's turn,
    and what follows once they commit."""

    def __init__(self, rt: Runtime, run_id: str, first: int, size: int, window: Window) -> None:
        self.rt = rt
        self.window = window
        self.fan = (first, size)
        self.now = rt.clock.now()
        # Children are recorded as the parent's turn records them.
        parent = Run(id=run_id, workflow=window.workflow, namespace=window.namespace)
        self.turn = TurnDraft(run=parent, checkpoints={})
        self.tasks: list[tuple[int, Task]] = []
        # Routes whose live workers lack what the steps require.
        self.gaps: set[str] = set()

    async def check(self, cp: Checkpoint) -> None:
        """Look up, once per route, whether a live worker can take ``cp``."""
        step = step_of(self.rt.app, self.rt.learned, cp.name)
        if (
            cp.kind == "remote"
            and step is not None
            and (step.requires or self.window.build is not None)
            and cp.group is not None
            and await self.rt.dispatcher.capability_gap(cp.group, step.requires, self.window.build)
            is not None
        ):
            self.gaps.add(cp.group)

    @property
    def ops(self) -> list[Op]:
        return self.turn.ops

    def add(self, cp: Checkpoint) -> bool:
        """Add the start of ``cp``; False if only the parent's turn can make it."""
        rt, now, turn = self.rt, self.now, self.turn
        if cp.kind == "remote":
            step = step_of(rt.app, rt.learned, cp.name)
            if step is None or cp.group is None or cp.group in self.gaps:
                # Parking a step no live worker can take is the turn's.
                return False
            sent = sent_now(
                cp,
                now,
                rt.dispatcher.carrier,
                rt.options.remote_redispatch,
                new_execution(rt.rng),
            )
            turn.ops.append(ClaimCheckpoint(sent))
            task = Task(
                run_id=cp.run_id,
                seq=cp.seq,
                attempt=cp.attempts,
                step=cp.name,
                workflow=self.window.workflow,
                route=cp.group,
                input=cp.input or "[]",
                timeout=step.timeout,
                dispatched_at=now,
                execution=sent.executions[-1],
                build=self.window.build,
            )
            self.tasks.append((len(turn.ops) - 1, task))
            return True
        if cp.kind != "child" or cp.child_id is None or cp.parallel_mode is None:
            return False
        version = self.window.version or ""
        workflow = (
            rt.app.get_workflow(cp.name, version)
            if rt.app.has_workflow(cp.name, version)
            else (cp.name, version)
        )
        record_child(
            turn,
            workflow,
            cp.seq,
            cp.child_id,
            cp.input or "[]",
            now,
            awaited=True,
            fan=(*self.fan, cp.parallel_mode),
        )
        return True

    async def after_commit(self, results: list[object]) -> None:
        rt = self.rt
        tasks = [task for index, task in self.tasks if results[index] is not False]
        for task in tasks:
            rt.telemetry.emit(
                Event(
                    kind="step.started",
                    run_id=task.run_id,
                    workflow=task.workflow,
                    at=self.now,
                    seq=task.seq,
                    name=task.step,
                    data={"attempt": task.attempt, "route": task.route},
                )
            )
        if tasks:
            await rt.dispatcher.send(tasks)
        for child in self.turn.started_children:
            rt.telemetry.emit_run("run.started", child)
        for child_id in self.turn.wake_after:
            rt.scheduler.wake(child_id)
