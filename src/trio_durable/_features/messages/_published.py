"""Values a run publishes, and waiting for what a run writes for its callers.

`Context.set_event` records a completed "signal" checkpoint named
``event:<key>`` and writes the value as the keyed value ``(run-event:<run
id>, key)``, both with the turn's other writes: a replay finds the
checkpoint and writes nothing again, and a reader never sees a value the
run's history does not hold. `get_event` reads it, and waits for it.

Callers that wait for what a run writes (a published value, an update's
outcome) wait without polling where the store can tell: a turn of this
engine that wrote such values wakes them once its write committed, and it
announces the write (kind ``"values"``) to the watches of other processes,
which wake theirs (`Endings.changed`). A run's end wakes them too. Where
nothing announces (a store that is no `RunWatch`), they read again every
``poll_interval`` seconds.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs
import trio

from ..._base import _serde
from ..._base._bounds import is_finite
from ..._base._exceptions import UsageError
from ..._base._index_text import refuse_nul
from ..._base._records import TERMINAL_STATUSES, Checkpoint, Run
from ..._kernel._run_reads import read_run
from ..._kernel._wakes import announce
from ..._stores._base import ChangeFeed
from ..._stores._ops import Op, PutValue
from ..lifecycle._lifecycle import latest_generation

if TYPE_CHECKING:
    from ..._base._clock import Clock
    from ..._kernel._definitions import Registry
    from ..._kernel._endings import Ending, Endings
    from ..._kernel._replay import Replay, TurnDraft
    from ..._stores._base import Store

AskKind = Literal["query", "update"]
"""What a front end asks a remote workflow's workers: to answer a query, or
to validate an update."""

PUBLISHED_SCOPE: Final = "run-event:"
"""The scope of a run's published values is this followed by its id."""


def event_scope(run_id: str) -> str:
    """The keyed-value scope of ``run_id``'s published values."""
    return f"{PUBLISHED_SCOPE}{run_id}"


@final
class Done:
    """What `Context.set_event` returns: it has already done its work, and
    may be awaited or not."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield


DONE: Final = Done()


def check_event_key(key: object) -> str:
    """Raise `UsageError` unless ``key`` is a non-empty string."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"an event key must be a non-empty string, not {key!r}")
    refuse_nul("an event key", key)
    return key


def set_event(replay: Replay, key: str, value: Any) -> None:
    """`Context.set_event`, with its key checked."""
    seq = replay.next_seq()
    name = f"event:{key}"
    if replay.recorded(seq, name, "signal") is not None:
        return  # Published by an earlier turn: never again.
    value_json = _serde.dumps(value)
    rt, turn = replay.runtime, replay.turn
    now = rt.clock.now()
    turn.put(
        Checkpoint(
            run_id=turn.run.id,
            seq=seq,
            name=name,
            kind="signal",
            status="completed",
            input=value_json,
            enqueued_at=now,
            started_at=now,
            finished_at=now,
        )
    )
    run_id = turn.run.id
    turn.ops.append(PutValue(event_scope(run_id), key, value_json, now, run_id=run_id))
    notify_values(replay)


def notify_values(replay: Replay) -> None:
    """Have this turn wake the callers waiting on what the run writes, once
    its writes committed: here directly, elsewhere by an announcement
    written with them (once per turn)."""
    rt, turn = replay.engine, replay.turn
    if turn.run.id in _notified(turn):
        return
    run = turn.run
    turn.ops.extend(announce(rt.store, rt.engine_id, "values", [run]))
    turn.committed.append(_Notice(rt.endings, run.id))


def _notified(turn: TurnDraft) -> set[str]:
    return {callback.run_id for callback in turn.committed if isinstance(callback, _Notice)}


@final
@attrs.define(frozen=True)
class _Notice:
    endings: Endings
    run_id: str

    def __call__(self) -> None:
        self.endings.changed(self.run_id)


# -- the callers' side ----------------------------------------------------------------


@final
@attrs.define(frozen=True, kw_only=True)
class Front:
    """What `get_event`, `Engine.query` and `Engine.update` need of the
    engine or client they are called on.

    Attributes:
      store: Its store.
      app: Its app (None for a client opened without one).
      clock: Its clock.
      endings: Where its callers wait for runs (and what they write).
      poll_interval: Seconds between reads of a run that nothing announces.
      origin: Its id, which its writes carry.
      new_id: Makes an update's id.
      wake_ops: The writes that wake a run wherever it is served.
      woke: Called with the run once those writes committed.
      traceback_limit: How much of a handler's traceback an error keeps.
      ask: Has a remote workflow's workers answer a query of its run (its
        name and plain arguments), or validate an update, where the app
        lacks the body: the answer as JSON text (an engine's; None for a
        client).
    """

    store: Store
    app: Registry | None
    clock: Clock
    endings: Endings
    poll_interval: float
    origin: str
    new_id: Callable[[], str]
    wake_ops: Callable[[Sequence[Run]], Sequence[Op]]
    woke: Callable[[Run], None]
    traceback_limit: int = 8192
    ask: Callable[[Run, str, list[Any], AskKind], Awaitable[str]] | None = None


async def current_run(front: Front, run_id: str, namespace: str | None) -> Run:
    """The run ``run_id`` names: its latest generation if it continued as new.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
    """
    return await latest_generation(front.store, await read_run(front.store, run_id, namespace))


async def wait_for_change(front: Front, run_id: str, ending: Ending, deadline: float) -> None:
    """Wait until a write for ``run_id`` is announced, it ends, the poll
    interval passed, or ``deadline`` (a `trio.current_time` value)."""
    with trio.move_on_at(min(deadline, trio.current_time() + front.poll_interval)):
        store = front.store
        if not isinstance(store, ChangeFeed):
            await ending.event.wait()
            return
        # Its ends are not announced: every writer shares this process,
        # and the store says so itself.
        ended = store.run_end_event(run_id)
        async with trio.open_nursery() as nursery:
            for event in (ending.event, ended):
                nursery.start_soon(_first, event, nursery.cancel_scope)


async def _first(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def wait_until(
    front: Front,
    run_id: str,
    read: Callable[[], Awaitable[tuple[bool, Any]]],
    deadline: float = math.inf,
) -> tuple[bool, Any]:
    """Call ``read`` (which returns whether it found what it waits for, and
    that) until it finds it, or ``deadline`` passes; the last answer."""
    while True:
        # Registered before the read: a write that commits while the read
        # is in flight still wakes this caller.
        ending = front.endings.register(run_id)
        try:
            found, value = await read()
        except BaseException:
            front.endings.forget(run_id, ending)
            raise
        if found or trio.current_time() >= deadline:
            front.endings.forget(run_id, ending)
            return found, value
        await wait_for_change(front, run_id, ending, deadline)


async def get_event(
    front: Front,
    run_id: str,
    key: str,
    timeout: float | None,  # noqa: ASYNC109 (returns None, not a cancel scope)
    namespace: str | None,
    type_: Any,
) -> Any:
    """`Engine.get_event`."""
    check_event_key(key)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not is_finite(timeout)
        or timeout < 0
    ):
        raise UsageError(f"get_event timeout must be a finite number >= 0 or None, not {timeout!r}")
    store = front.store
    await read_run(store, run_id, namespace)
    scope = event_scope(run_id)

    async def read() -> tuple[bool, Any]:
        stored = await store.get_value(scope, key)
        if stored is not None and stored.value is not None:
            return True, stored
        run = await store.get_run(run_id)
        if run is None or run.status in TERMINAL_STATUSES:
            # Read after the run ended: a value published with its end
            # is there now, or never will be.
            stored = await store.get_value(scope, key)
            return True, stored if stored is not None and stored.value is not None else None
        return False, None

    deadline = math.inf if timeout is None else trio.current_time() + timeout
    _, stored = await wait_until(front, run_id, read, deadline)
    return None if stored is None else _serde.loads(stored.value, type_)
