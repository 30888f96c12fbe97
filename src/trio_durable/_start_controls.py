"""Starts under a workflow's run controls: the writes that create a run
with its admission, and the keyed claims that make a start return an open
run instead of creating one (a singleton, a dedup key).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ._admission import StartControls, creation_ops
from ._stores._base import WriteConflict
from ._stores._ops import CreateRun, Op, UpdateRun

if TYPE_CHECKING:
    from ._records import Run
    from ._stores._base import Store

SINGLETON_SCOPE: Final = "singleton:"
DEDUP_SCOPE: Final = "dedup:"


async def create_controlled(
    store: Store, run: Run, controls: StartControls, also: Sequence[Op]
) -> tuple[Run, bool]:
    """Create ``run`` under ``controls`` with the writes ``also``, unless a
    run with its id exists; return the run as stored and whether it was
    created (`create_run`).

    The run's admission is written in the batch that creates it. Should a
    run with the id have been created since it was looked for, that batch
    is refused if the run ended (so no slot is taken for it); one still
    going is left as it was (asking again for its slot changes nothing).
    """
    # Strict: a run of the same id that ended rolls the whole batch back.
    guard = UpdateRun(run.id, {}, expect_status=frozenset({run.status}))
    try:
        [(stored, created), *_] = await store.apply(
            [CreateRun(run), guard, *creation_ops(run.id, controls, run.created_at), *also]
        )
    except WriteConflict:
        existing = await store.get_run(run.id)
        assert existing is not None
        return existing, False
    return stored, created
