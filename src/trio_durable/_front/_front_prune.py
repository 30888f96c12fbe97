"""Pruning the ended runs a selection matches (`PrunesRuns`, a method family
`Engine` and `Client` share): the bulk action of `_front_bulk`'s shape
that deletes runs, each batch in one store write, through the store's
optional `RunDeleter.delete_runs` (which the blob store wraps, deleting
the blobs only the deleted runs referred to).

A run it deleted is gone, so a prune keeps no state and marks no run:
called again after an interruption, it finds the runs that are left and
deletes them. As retention does, it keeps a run whose parent has not
ended (the parent may still read it, or retry it).
"""

from __future__ import annotations

from .._base._records import TERMINAL_STATUSES, Run
from .._stores._base import delete_runs
from .._stores._wrapping import check_deletes_runs
from ._front_bulk import (
    FIRST_IDS,
    BulkProgress,
    BulkReport,
    Progress,
    RunSelection,
    operation_name,
    select_runs,
)
from ._front_core import FrontPart


class PrunesRuns(FrontPart):
    """Deleting the ended runs a `RunSelection` matches (see `_front_prune`)."""

    async def prune_many(
        self,
        selection: RunSelection,
        *,
        dry_run: bool = False,
        operation: str | None = None,
        batch_size: int = 100,
        on_progress: Progress | None = None,
    ) -> BulkReport:
        """Delete every run ``selection`` matches that has ended (completed,
        failed, cancelled, terminated or dead), with what retention deletes
        with a run: its input and output, checkpoints, signals, queue
        entries, webhooks, records, the keyed values that go with it, and
        the blobs only it referred to. A run whose parent has not ended is
        kept (`BulkReport.skipped`).

        Interrupted, the same call made again deletes the runs that are
        left: a deleted run cannot be deleted twice.

        Args:
          selection: Which runs.
          dry_run: Write nothing: count the runs and list the first ids.
          operation: The operation's name, for the report and progress
            (default: one made of the action and the selection).
          batch_size: Runs deleted per store write, 1 to 1000.
          on_progress: Called after each batch.

        Raises:
          UsageError: A filter, ``batch_size`` or ``operation`` is
            malformed, or the store cannot delete runs it is given (it is
            no `trio_durable.stores.RunDeleter`); nothing changed.
          SearchAttributeError: A search attribute filter is refused.
        """
        core = self._core
        core.check_open()
        name = operation_name("prune", selection, operation, batch_size)
        store = core.store
        check_deletes_runs(store)
        # Whether each parent seen has not ended, read without its payloads.
        running: dict[str, bool] = {}

        async def parent_running(run: Run) -> bool:
            parent_id = run.parent_id
            if parent_id is None:
                return False
            if parent_id not in running:
                stamp = await store.run_stamp(parent_id)
                running[parent_id] = stamp is not None and stamp.status not in TERMINAL_STATUSES
            return running[parent_id]

        ids, skipped = await select_runs(store, "prune", selection, parent_running)
        deleted = refused = 0
        if not dry_run:
            for start in range(0, len(ids), batch_size):
                batch = ids[start : start + batch_size]
                # The store deletes only what still may be: a run retried,
                # or deleted by another call, since it was selected is left.
                gone = await delete_runs(store, batch)
                deleted += len(gone)
                refused += len(batch) - len(gone)
                if on_progress is not None:
                    on_progress(
                        BulkProgress(operation=name, done=deleted + refused, total=len(ids))
                    )
        return BulkReport(
            action="prune",
            operation=name,
            dry_run=dry_run,
            matched=len(ids),
            acted=deleted,
            skipped=skipped,
            refused=refused,
            first_ids=tuple(ids[:FIRST_IDS]),
            finished=not dry_run,
        )
