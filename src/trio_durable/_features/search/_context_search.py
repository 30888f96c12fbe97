"""`Context.upsert_search_attributes`: a run changes its own search
attributes, durably and once.

The change is a durable operation: it takes the next seq and records a
completed checkpoint there (kind ``local``, named `UPSERT_NAME`, its input
the changes), written in the same batch as the run's new attributes. A
replay finds the checkpoint and writes nothing, so a run's attributes are
what its last recorded change made them, however often it is replayed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..._base._records import Checkpoint, CheckpointKind
from ..._base._search_values import check_attributes, dump_attributes, merged, plain_value
from ..._kernel._learned import search_types
from ..._kernel._replay import Replay
from ..._stores._ops import UpdateRun
from ..determinism._argument_check import Arguments

UPSERT_NAME: Final = "search_attributes:upsert"
"""The name of an upsert's checkpoint (no step can have it: step names take
no ``:``)."""


class SearchOperations:
    """The search-attribute operations of `Context` (see `Context`)."""

    _replay: Replay

    if TYPE_CHECKING:

        def _before_op(
            self,
            name: str,
            kind: CheckpointKind,
            arguments: Arguments | None,
            *,
            recorded: Arguments | None = None,
        ) -> None: ...

    def upsert_search_attributes(self, attributes: Mapping[str, Any]) -> None:
        """Set the run's search attributes named in ``attributes`` to their
        values; a value None removes that attribute. Others stay as they
        are.

        Durable and recorded in the run's history: it takes a seq like any
        durable operation (adding or removing a call is a change of the
        workflow, as for a step), and a replay of it writes nothing. The
        change is written with the turn's next write; `Engine.list_runs`
        finds the run by its new values from then on.

        Args:
          attributes: Values by name, each attribute declared in the app
            (`App.search_attribute`) and the value of its type.

        Raises:
          SearchAttributeError: A name is not declared, or a value is not of
            its attribute's type; nothing is recorded.
        """
        replay = self._replay
        rt = replay.runtime
        checked = check_attributes(attributes, search_types(rt.app, rt.learned), removals=True)
        changes = {
            name: None if value is None else plain_value(value) for name, value in checked.items()
        }
        changes_json = json.dumps(changes, separators=(",", ":"), sort_keys=True)
        self._before_op(UPSERT_NAME, "local", lambda cp: changes_json)
        # The engine carries it out: the command names each value's
        # type as this app declares it.
        replay.decider.reach(
            replay,
            UPSERT_NAME,
            "local",
            1,
            lambda: {
                "op": "upsert_search",
                "attributes": dump_attributes(
                    {name: value for name, value in checked.items() if value is not None}
                ),
                "remove": sorted(name for name, value in checked.items() if value is None),
            },
        )
        seq = replay.next_seq()
        if replay.recorded(seq, UPSERT_NAME, "local") is not None:
            return
        run = replay.turn.run
        now = replay.runtime.clock.now()
        replay.turn.put(
            Checkpoint(
                run_id=run.id,
                seq=seq,
                name=UPSERT_NAME,
                kind="local",
                status="completed",
                input=changes_json,
                attempts=1,
                enqueued_at=now,
                started_at=now,
                finished_at=now,
            )
        )
        new = merged(run.search_attributes, checked)
        replay.turn.ops.append(
            UpdateRun(run.id, {"search_attributes": new}, expect_owner=replay.runtime.engine_id)
        )
        # Later upserts of this turn build on this one.
        replay.turn.run = attrs.evolve(run, search_attributes=new)
