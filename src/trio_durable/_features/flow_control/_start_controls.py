"""Starts under a workflow's run controls: the writes that create a run
with its admission, and the keyed claims that make a start return an open
run instead of creating one (a singleton, a dedup key). A claim goes with
the run that holds it (`PutValue.run_id`): retention deletes it with that
run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ..._base._records import TERMINAL_STATUSES
from ..._stores._base import WriteConflict
from ..._stores._ops import QUEUE_SLOT, CreateRun, Op, PutValue, UpdateRun
from ._admission import ADMISSION, StartControls, creation_ops, waits

if TYPE_CHECKING:
    from ..._base._records import Run
    from ..._base._run_records import RunRecord
    from ..._stores._base import Store

SINGLETON_SCOPE: Final = "singleton:"
DEDUP_SCOPE: Final = "dedup:"
_CLAIM_ATTEMPTS: Final = 1000
"""Compare-and-swap rounds before a start gives up: each lost round means
another start's claim went in, so this bounds only a store that refuses
every write for another reason."""


async def create_controlled(
    store: Store,
    run: Run,
    controls: StartControls,
    also: Sequence[Op],
    own: Sequence[RunRecord] = (),
) -> tuple[Run, bool]:
    """Create ``run`` under ``controls`` with the writes ``also`` and its
    records ``own`` (written only if the run is created: its deadline),
    unless a run with its id exists, or, for a singleton or a dedup key, a
    run with its key is open (queued); return the run as stored (or that
    run) and whether it was created (`create_run`).

    A key's run is kept in the store's keyed values (scopes
    ``singleton:<workflow>`` and ``dedup:<workflow>``, key
    ``<namespace>:<key>``), claimed by compare-and-swap in the batch that
    creates the run: of two starts racing for one key, one creates its run
    and the other, its claim refused, reads the winner and returns it. A
    claim whose run has ended (or no longer queues) is taken over.

    The run's admission is written in the same batch. Should a run with the
    id have been created since it was looked for, that batch is refused if
    the run ended (so no slot is taken for it); one still going is left as
    it was (asking again for its slot changes nothing).
    """
    claims = [
        (SINGLETON_SCOPE, controls.singleton, _open),
        (DEDUP_SCOPE, controls.dedup, _queued),
    ]
    for _ in range(_CLAIM_ATTEMPTS):
        ops: list[Op] = []
        for prefix, key, holds in claims:
            if key is None:
                continue
            scope, name = prefix + controls.workflow, f"{run.namespace}:{key}"
            stored = await store.get_value(scope, name)
            if stored is not None:
                holder = await store.get_run(json.loads(stored.value)["run_id"])
                if holder is not None and await holds(store, holder, run.created_at):
                    return holder, False
            ops.append(
                PutValue(
                    scope,
                    name,
                    json.dumps({"run_id": run.id}),
                    run.created_at,
                    expect_version=0 if stored is None else stored.version,
                    run_id=run.id,
                )
            )
        # Strict: a run of the same id that ended rolls the whole batch back.
        guard = UpdateRun(run.id, {}, expect_status=frozenset({run.status}))
        admission = creation_ops(run.id, controls, run.created_at)
        try:
            results = await store.apply(
                [*ops, CreateRun(run, records=tuple(own)), guard, *admission, *also]
            )
        except WriteConflict:
            existing = await store.get_run(run.id)
            if existing is not None:
                return existing, False
            continue  # a claim went to another start: read whose
        stored_run, created = results[len(ops)]
        return stored_run, created
    raise WriteConflict(f"could not claim the keys of a run of workflow {controls.workflow!r}")


async def _open(store: Store, run: Run, now: float) -> bool:
    return run.status not in TERMINAL_STATUSES


async def _queued(store: Store, run: Run, now: float) -> bool:
    """Whether ``run`` has not started its body yet at ``now``: no engine
    took it, or it waits for admission."""
    if run.status in TERMINAL_STATUSES:
        return False
    if run.status == "pending":
        return True
    records = {record.kind: record for record in await store.get_records(run.id)}
    admission = records.get(ADMISSION)
    return admission is not None and waits(admission, QUEUE_SLOT in records, now)
