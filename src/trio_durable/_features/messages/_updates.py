"""Updates: a caller changes a run's state through one of its update
handlers, durably, and gets the handler's result.

The caller replays the run where it stands (`_read_replay`): the name must
be a registered update handler there, and its validator must accept the
arguments, else nothing is written. Accepted, the update is two keyed
values of the scope ``update:<run id>``, written in one batch with the
run's wake-up (the run made due, and announced): its record ``record/<id>``
(``accepted``, later its outcome) and its inbox entry ``inbox/<id>``. The
run's next turn, wherever it runs, reads its inbox before the body, and
the body applies the updates accepted while it waited where it stood,
before going past it; updates that arrive during a turn are read where
the body suspends or completes. Applying one validates it again on the
state the body holds then, runs its handler, logs it (see `_handlers`)
and writes its outcome, deleting the inbox entry, with the turn's own
writes. The caller waits for the outcome without polling where the store
announces writes (see `_published`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final

from ..._base import _serde
from ..._base._exceptions import (
    InvalidRunStateError,
    UnknownHandlerError,
    UpdateFailed,
    UpdateRejected,
    UsageError,
)
from ..._base._failures import error_info
from ..._base._index_text import refuse_nul
from ..._base._records import TERMINAL_STATUSES
from ..._kernel._handlers import Handlers, LoggedUpdate, UpdateHandler, check_arguments, plain_args
from ..._kernel._hooks import AfterBody, Feature
from ..._kernel._markers import BODY_SEQ_LIMIT, is_patch_marker
from ..._kernel._options import check_id
from ..._stores._base import WriteConflict
from ..._stores._ops import Op, PutValue, UpdateRun
from ._published import Front, current_run, notify_values, wait_until
from ._read_replay import holds_body, replay_now

if TYPE_CHECKING:
    from ..._base._records import Checkpoint, Run
    from ..._kernel._replay import Replay
    from ..._kernel._turn import Turn
    from ..._stores._base import Store

UPDATE_SCOPE: Final = "update:"
"""The scope of a run's updates is this followed by its id."""

INBOX: Final = "inbox/"
RECORD: Final = "record/"
_PAGE: Final = 100
_DONE: Final = frozenset({"completed", "failed", "rejected"})


def update_scope(run_id: str) -> str:
    """The keyed-value scope of ``run_id``'s updates."""
    return f"{UPDATE_SCOPE}{run_id}"


# -- in the run's turn ------------------------------------------------------------------


async def take_waiting_updates(turn: Turn, replay: Replay, now: float) -> set[str]:
    """Before the body runs: read the updates accepted while the run waited,
    and have the body apply them where it stood (the operation its last
    turn left it at), before that operation returns, so that the body never
    goes on from there without them, even if what it waited for came
    before them (a signal, a result). Returns the ids of those it applies,
    filled in as the body goes.

    Only the turn of a run that something made due reads the inbox first:
    accepting an update makes a waiting run due (`_wake_ops`), so a run
    that is not due took no update while it waited (one accepted while a
    turn ran is applied where the body next waits, by `apply_updates`),
    and the turns that a result, a signal or a child's end wake read
    nothing more. Nor does the turn of a run that never took an operation,
    which stood nowhere yet: its updates are applied where its body first
    waits."""
    run = turn.state.run
    if run.wake_at is None or run.wake_at > now:
        return set()
    if _stood_at(turn.state.checkpoints, replay.handlers) == 0:
        return set()
    inbox = await read_inbox(turn.runtime.store, update_scope(turn.state.run.id))
    return apply_on_the_way(
        replay,
        inbox,
        lambda handler, update_id, entry, seq: _apply_one(
            turn, replay, handler, update_id, entry, seq
        ),
    )


Apply = Callable[[UpdateHandler, str, dict[str, Any], int], None]
"""Applies one update of the inbox (its handler, id and entry) at a seq."""


def apply_on_the_way(
    replay: Replay, inbox: list[tuple[str, dict[str, Any]]], apply_one: Apply
) -> set[str]:
    """Have the body apply ``inbox``'s updates whose handlers it registered
    where the run stood (see `take_waiting_updates`), each by ``apply_one``;
    the ids of those it applies, filled in as the body goes."""
    applied: set[str] = set()
    handlers = replay.handlers
    stood = _stood_at(replay.turn.checkpoints, handlers)
    if stood == 0 or not inbox:
        return applied

    def apply(seq: int) -> None:
        for update_id, entry in inbox:
            if update_id in applied:
                continue
            handler = handlers.updates.get(entry["name"])
            if handler is not None:
                applied.add(update_id)
                apply_one(handler, update_id, entry, seq)

    handlers.apply_waiting(stood, apply)
    return applied


def _stood_at(checkpoints: dict[int, Checkpoint], handlers: Handlers) -> int:
    """The seq of the operation where the run's history left its body: the
    last one it recorded (a fan's first seq for its members), or where it
    last applied an update, if later; 0 if none.

    Applying an update there changes nothing any turn committed: every
    operation before it replays as recorded, and what the body did past it
    was never committed (it suspended there, or its turn was cut short)."""
    recorded = (
        seq if cp.parallel_group is None else cp.parallel_group
        for seq, cp in checkpoints.items()
        if 0 < seq < BODY_SEQ_LIMIT and not is_patch_marker(cp)
    )
    logged = (item.at for item in handlers.log)
    return max(max(recorded, default=0), max(logged, default=0))


async def apply_updates(
    turn: Turn, replay: Replay, *, completed: bool, applied: Collection[str] = ()
) -> None:
    """Apply the updates waiting in the run's inbox whose handlers the body
    registered, where it suspended (or after it completed), adding their
    writes to the turn's; but ``applied``, which the body applied on its
    way (`take_waiting_updates`)."""
    if not replay.handlers.updates:
        return
    inbox = await read_inbox(turn.runtime.store, update_scope(turn.state.run.id))
    apply_where_it_waits(
        replay,
        inbox,
        lambda handler, update_id, entry, seq: _apply_one(
            turn, replay, handler, update_id, entry, seq
        ),
        completed=completed,
        applied=applied,
    )


def apply_where_it_waits(
    replay: Replay,
    inbox: list[tuple[str, dict[str, Any]]],
    apply_one: Apply,
    *,
    completed: bool,
    applied: Collection[str] = (),
) -> None:
    """Apply ``inbox``'s updates whose handlers the body registered, where
    it suspended (or after it completed), each by ``apply_one``; but
    ``applied``, which the body applied on its way."""
    handlers = replay.handlers
    position = replay.peek() if completed else handlers.position
    for update_id, entry in inbox:
        handler = handlers.updates.get(entry["name"])
        if update_id in applied:
            continue  # The body applied it on its way; its removal is not written yet.
        if handler is None:
            continue  # Not registered here yet: it waits in the inbox.
        apply_one(handler, update_id, entry, position)


def _apply_one(
    turn: Turn,
    replay: Replay,
    handler: UpdateHandler,
    update_id: str,
    entry: dict[str, Any],
    position: int,
) -> None:
    """Apply an update of the inbox at ``position``, adding its writes (its
    log entry, its outcome, its inbox entry's removal) to the turn's."""
    limit = turn.runtime.options.traceback_limit
    outcome = apply_update(replay, handler, update_id, entry, position, limit)
    write_outcome(replay, update_id, outcome)


def apply_update(
    replay: Replay,
    handler: UpdateHandler,
    update_id: str,
    entry: dict[str, Any],
    position: int,
    traceback_limit: int,
) -> dict[str, Any]:
    """Validate and run an update at ``position``, logging it in the run's
    update log (the log's record put in the replay's turn) if its handler
    ran; its outcome."""
    handlers = replay.handlers
    outcome, ran = _apply(handlers, handler, entry, traceback_limit)
    if ran is not None:
        replay.turn.put_record(
            handlers.append(
                LoggedUpdate(
                    id=update_id, name=entry["name"], args=entry["args"], at=position, ok=ran
                )
            )
        )
    return outcome


def write_outcome(replay: Replay, update_id: str, outcome: dict[str, Any]) -> None:
    """Add the writes of an applied update's outcome to the turn: its
    record, and its inbox entry's removal; the callers waiting are told
    once the turn commits."""
    rt, state = replay.runtime, replay.turn
    run = state.run
    scope = update_scope(run.id)
    now = rt.clock.now()
    state.ops.append(PutValue(scope, f"{INBOX}{update_id}", None, now))
    state.ops.append(
        PutValue(
            scope, f"{RECORD}{update_id}", json.dumps(outcome), now, strict=False, run_id=run.id
        )
    )
    notify_values(replay)


def _apply(
    handlers: Handlers, handler: UpdateHandler, entry: dict[str, Any], traceback_limit: int
) -> tuple[dict[str, Any], bool | None]:
    """Validate and run an update; its outcome, and whether its handler ran
    and returned (None: it did not run)."""
    name = entry["name"]
    args = json.loads(entry["args"])
    base = {"name": name, "args": entry["args"]}
    try:
        check_arguments(handler.fn, args, f"update {name!r}")
        if handler.validator is not None:
            handlers.call(handler.validator, args)
    except Exception as exc:
        # The state moved on since the caller validated it.
        return {**base, "status": "rejected", "error": _error(exc, 0)}, None
    try:
        result = _serde.dumps(handlers.call(handler.fn, args))
    except Exception as exc:
        return {**base, "status": "failed", "error": _error(exc, traceback_limit)}, False
    return {**base, "status": "completed", "result": result}, True


def _error(exc: BaseException, traceback_limit: int) -> dict[str, Any]:
    info = error_info(exc, traceback_limit=traceback_limit)
    return {"message": info.message, "code": info.code, "details": info.details}


async def read_inbox(store: Store, scope: str) -> list[tuple[str, dict[str, Any]]]:
    """The updates waiting in an inbox, in the order they were accepted."""
    found: list[tuple[str, dict[str, Any]]] = []
    after: str | None = None
    while True:
        page = await store.list_values(scope, prefix=INBOX, after=after, limit=_PAGE)
        for stored in page:
            if stored.value is not None:
                found.append((stored.key[len(INBOX) :], json.loads(stored.value)))
        if len(page) < _PAGE:
            break
        after = page[-1].key
    found.sort(key=lambda item: (item[1]["at"], item[0]))
    return found


# -- the caller's side ------------------------------------------------------------------


async def update_run(
    front: Front,
    run_id: str,
    name: str,
    args: tuple[Any, ...],
    namespace: str | None,
    update_id: str | None,
    type_: Any,
) -> Any:
    """`Engine.update`."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"an update's name must be a non-empty string, not {name!r}")
    refuse_nul("an update's name", name)
    if update_id is not None:
        check_id("update_id", update_id)
    args_json, values = plain_args(args)
    run = await current_run(front, run_id, namespace)
    store, scope = front.store, update_scope(run.id)
    sent = None if update_id is None else await store.get_value(scope, f"{RECORD}{update_id}")
    if update_id is not None and sent is not None:
        # Sent before: its outcome, once there, is the answer.
        if sent.value is not None and json.loads(sent.value)["status"] == "accepted":
            # Not applied yet: wake the run again, in case nothing did (an
            # update accepted by an older version, a store restored).
            await store.apply(_wake_ops(front, run))
            front.woke(run)
        return await _outcome(front, run.id, update_id, type_)
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run.id!r} is {run.status}; it takes no updates")
    if front.ask is not None and not holds_body(front.app, run):
        # A remote workflow whose body only its workers hold: one of them
        # replays the run and validates the update.
        await front.ask(run, name, values, "update")
    else:
        validate_update(await replay_now(front, run), run, name, values)
    if update_id is None:
        update_id = front.new_id()
    now = front.clock.now()
    accepted = {"name": name, "args": args_json, "at": now}
    ops = [
        PutValue(
            scope,
            f"{RECORD}{update_id}",
            json.dumps({**accepted, "status": "accepted"}),
            now,
            expect_version=0,
            run_id=run.id,
        ),
        PutValue(
            scope,
            f"{INBOX}{update_id}",
            json.dumps(accepted),
            now,
            expect_version=0,
            run_id=run.id,
        ),
        *_wake_ops(front, run),
    ]
    try:
        await store.apply(ops)
    except WriteConflict:
        pass  # Accepted meanwhile under the same id: wait for that one.
    else:
        front.woke(run)
    return await _outcome(front, run.id, update_id, type_)


def validate_update(replay: Replay, run: Run, name: str, values: list[Any]) -> None:
    """Check an update against the run replayed where it stands: its
    handler is registered, ``values`` fit it, its validator accepts them.

    Raises:
      UnknownHandlerError: The body registered no update handler ``name``.
      InvalidArgumentsError: ``values`` do not fit the handler.
      UpdateRejected: The validator raised.
    """
    handler = replay.handlers.updates.get(name)
    if handler is None:
        raise UnknownHandlerError(
            f"run {run.id!r} has no update handler {name!r} where it stands"
            f" (it has: {', '.join(sorted(replay.handlers.updates)) or 'none'})"
        )
    check_arguments(handler.fn, values, f"update {name!r}")
    if handler.validator is not None:
        try:
            replay.handlers.call(handler.validator, values)
        except Exception as exc:
            info = error_info(exc)
            raise UpdateRejected(run.id, name, info.message, info.code, info.details) from exc


def _wake_ops(front: Front, run: Run) -> list[Op]:
    """The writes that wake ``run`` for its update: due now in the store, so
    that an engine opened later (or one that missed the announcement) takes
    it; and announced, so that an engine serving it now takes it at once
    (one whose turn of it is in flight runs another: a running run is not
    made due, its turn's end would overwrite that)."""
    due = UpdateRun(
        run.id,
        {"wake_at": front.clock.now()},
        expect_status=frozenset({"suspended"}),
        strict=False,
    )
    return [due, *front.wake_ops([run])]


async def _outcome(front: Front, run_id: str, update_id: str, type_: Any) -> Any:
    """Wait for an accepted update's outcome; its result, or its failure
    raised."""
    store, scope = front.store, update_scope(run_id)

    async def read() -> tuple[bool, Any]:
        stored = await store.get_value(scope, f"{RECORD}{update_id}")
        record = None if stored is None or stored.value is None else json.loads(stored.value)
        if record is not None and record["status"] in _DONE:
            return True, record
        run = await store.get_run(run_id)
        if run is None or run.status in TERMINAL_STATUSES:
            stored = await store.get_value(scope, f"{RECORD}{update_id}")
            record = None if stored is None or stored.value is None else json.loads(stored.value)
            if record is not None and record["status"] in _DONE:
                return True, record
            status = "gone" if run is None else run.status
            raise InvalidRunStateError(
                f"run {run_id!r} ended ({status}) before it applied update {update_id!r}"
            )
        return False, None

    _, record = await wait_until(front, run_id, read)
    if record["status"] == "completed":
        return _serde.loads(record["result"], type_)
    error = record.get("error") or {}
    cls = UpdateRejected if record["status"] == "rejected" else UpdateFailed
    raise cls(
        run_id, record["name"], error.get("message", ""), error.get("code"), error.get("details")
    )


class Updates(Feature):
    """Updates of local bodies: those accepted while the run waited are
    applied where its body waits, once it suspended or completed."""

    async def before_body(self, turn: Turn, replay: Replay, now: float) -> AfterBody | None:
        waiting = await take_waiting_updates(turn, replay, now)

        async def apply(completed: bool) -> None:
            await apply_updates(turn, replay, completed=completed, applied=waiting)

        return apply
