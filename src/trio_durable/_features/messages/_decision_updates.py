"""Updates of remote workflows' runs, applied on the worker that decides.

An update is accepted as for any run (`_updates`): validated where the run
stands (by a worker, see `_remote_queries`), then kept in the run's inbox
with the run made due. The run's decision task carries the inbox
(`DecisionRequest.updates`), and the worker's replay applies each update
whose handler the body registered, where an engine's turn would: where
the run stood, before the operation it waited in returns, for updates
accepted while it waited; else where the body now waits, or after it
returned. The decision carries their outcomes and the update log back
(`Decision.updates`, `.update_log`), and the engine writes them with the
turn that applies it, as its own turn writes a local body's. The log
travels in the history, so every later replay, on any worker, applies
them again at the same seqs.

The engine sends the inbox with a decision task when the run was made due
(an update was accepted while it waited) or when the body's last decision
had update handlers registered (`Decision.update_handlers`); applying a
decision, it sends the next one at once if updates for those handlers
arrived meanwhile.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, final

from ..._kernel._handlers import UPDATES_NAME, UpdateHandler, log_with
from ..._kernel._hooks import Feature, Inbox
from ._updates import (
    apply_on_the_way,
    apply_update,
    apply_where_it_waits,
    read_inbox,
    update_scope,
    write_outcome,
)

if TYPE_CHECKING:
    from ..._kernel._replay import Replay
    from ..._kernel._runtime import Runtime
    from ..._wire._decision_wire import Decision


# -- on the worker ----------------------------------------------------------------------


@final
class WorkerUpdates:
    """The updates a decision task carried, as the worker's replay applies
    them; their outcomes go back in the decision."""

    def __init__(self, replay: Replay, inbox: Inbox, stood_due: bool, traceback_limit: int):
        self._replay = replay
        self._inbox = inbox
        self._limit = traceback_limit
        self._on_the_way: set[str] = set()
        self.outcomes: list[tuple[str, str]] = []
        self._logged = False
        if inbox and stood_due:
            self._on_the_way = apply_on_the_way(replay, inbox, self._apply)

    def _apply(
        self, handler: UpdateHandler, update_id: str, entry: dict[str, Any], seq: int
    ) -> None:
        outcome = apply_update(self._replay, handler, update_id, entry, seq, self._limit)
        self._logged = self._logged or outcome["status"] != "rejected"
        self.outcomes.append((update_id, json.dumps(outcome)))

    def where_it_waits(self, *, completed: bool) -> None:
        """The body suspended (or returned): apply the rest there."""
        if self._inbox and self._replay.handlers.updates:
            apply_where_it_waits(
                self._replay,
                self._inbox,
                self._apply,
                completed=completed,
                applied=self._on_the_way,
            )

    @property
    def log(self) -> str | None:
        """The update log's JSON text, if a handler ran in this decision."""
        if not self._logged:
            return None
        found = self._replay.turn.records.get(UPDATES_NAME)
        return None if found is None else found.output

    @property
    def handlers(self) -> tuple[str, ...]:
        """The update handlers the body registered by the decision's end."""
        return tuple(sorted(self._replay.handlers.updates))


# -- on the engine ----------------------------------------------------------------------


def write_decided(replay: Replay, decision: Decision) -> None:
    """Write what a decision says of updates with the turn that applies
    it: each outcome (the caller waiting is told), and the update log."""
    for update_id, outcome in decision.updates:
        write_outcome(replay, update_id, json.loads(outcome))
    if decision.update_log is not None:
        turn = replay.turn
        turn.put_record(log_with(turn, decision.update_log))


async def waiting_updates(rt: Runtime, run_id: str) -> Inbox:
    """The updates waiting in the run's inbox, in the order accepted."""
    return await read_inbox(rt.store, update_scope(run_id))


def arrived_meanwhile(inbox: Inbox, decision: Decision) -> bool:
    """Whether ``inbox`` holds an update that the decision did not apply
    though the body registered its handler: it arrived while the task was
    out, and the next decision applies it."""
    applied = {update_id for update_id, _ in decision.updates}
    handlers = set(decision.update_handlers)
    return any(update_id not in applied and entry["name"] in handlers for update_id, entry in inbox)


@final
class RemoteUpdates(Feature):
    """Updates of remote workflows: the engine sends the inbox with a
    decision task and writes what the decision says of them; the worker
    applies them in its replay."""

    async def inbox(self, rt: Runtime, run_id: str) -> Inbox:
        return await waiting_updates(rt, run_id)

    def decided(self, replay: Replay, decision: Decision, *, cancelled: bool) -> None:
        if not cancelled:
            write_decided(replay, decision)

    def decision_updates(
        self, replay: Replay, inbox: Inbox, stood_due: bool, traceback_limit: int
    ) -> WorkerUpdates:
        return WorkerUpdates(replay, inbox, stood_due, traceback_limit)
