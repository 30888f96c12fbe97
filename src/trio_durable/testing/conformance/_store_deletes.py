"""Store checks of the optional `RunDeleter.delete_runs`: the runs given that
may go are deleted with everything of theirs, in one transaction, and
nothing else is. Skipped for a store that is no `RunDeleter`."""

from __future__ import annotations

import trio

from ..._base._records import PausedStep, RunFilter, signal_token
from ..._base._run_records import RunRecord
from ..._stores._base import RunDeleter, Store, offers
from ..._stores._hook_ops import CreateWebhook, PauseStep
from ..._stores._ops import AdmitToQueue, PutValue, UpdateRun
from ..._stores._record_ops import PutRecord
from ._outcomes import skip
from ._store_queries import QUEUED
from ._store_support import (
    OpenStore,
    StoreFactory,
    counters,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
)


def _deleter(store: Store) -> RunDeleter:
    if not offers(store, RunDeleter):
        skip("the store is no RunDeleter: it cannot delete the runs it is given")
    assert isinstance(store, RunDeleter)
    return store


async def check_delete_runs_deletes_the_ended_runs_given_with_their_rows(
    factory: StoreFactory | OpenStore,
) -> None:
    """`RunDeleter.delete_runs` deletes those of the runs given that have
    ended and whose parent has ended or is gone, with every row of theirs
    (input, checkpoints, signal waiters, buffered signals, queue slots,
    webhooks, pauses, records, tags, the keyed values that go with them),
    in one transaction; never a run that has not ended, one whose parent
    has not, a run it was not given, nor what another run owns."""
    async with fresh_store(factory) as store:
        deleter = _deleter(store)
        for run in (
            make_run("done", status="completed", tags=("vip",)),
            make_run("bad", status="failed", parent_id="done"),
            make_run("orphan", status="cancelled", parent_id="pruned-long-ago"),
            make_run("busy", status="suspended"),
            make_run("kid", status="completed", parent_id="busy"),
            make_run("other", status="completed"),
            make_run("done1", status="running"),
        ):
            await store.create_run(run)
        for run_id in ("done", "done1"):
            await store.save_checkpoint(make_checkpoint(run_id, 1, kind="signal", name="go"))
            await store.add_signal_waiter(signal_token(run_id, "go"), run_id, 1)
            await store.deliver_signal(signal_token(run_id, "spare"), '"x"')
            await store.apply(
                [
                    PutValue("s", run_id, '"v"', 1.0, run_id=run_id),
                    PutRecord(RunRecord(run_id=run_id, kind="forked_from")),
                    CreateWebhook(f"h-{run_id}", run_id, "go", 1.0),
                ]
            )
        await store.save_checkpoint(make_checkpoint("done", 2, kind="remote", mark=QUEUED))
        assert await store.apply([AdmitToQueue("q", "done", 2, 0, 1, 0.0)]) == [True]
        await store.apply(
            [
                UpdateRun("done", {"status": "suspended"}),
                PauseStep(
                    PausedStep(
                        run_id="done",
                        seq=3,
                        workflow="checkout",
                        step="s",
                        breakpoint_id="b",
                        paused_at=1.0,
                    )
                ),
                UpdateRun("done", {"status": "completed"}),
            ]
        )

        # Nothing given: nothing deleted, nothing written.
        before = counters(store)
        assert await deleter.delete_runs([]) == []
        assert counters(store) == before
        given = ["kid", "busy", "done1", "nope", "orphan", "done", "bad", "done"]
        assert await deleter.delete_runs(given) == ["bad", "done", "orphan"]
        assert await store.get_run("done") is None
        assert await store.get_checkpoints("done") == []
        assert await store.signal_waiter(signal_token("done", "go")) is None
        assert await store.buffered_signals(signal_token("done", "spare")) == []
        assert await store.find_runs(RunFilter(tags=("vip",))) == []
        assert await store.get_value("s", "done") is None
        assert await store.get_records("done") == []
        assert await store.get_webhook("h-done") is None
        # The queue slot it held is free again.
        await store.create_run(make_run("c", status="suspended"))
        await store.save_checkpoint(make_checkpoint("c", 1, kind="remote", mark=QUEUED))
        assert await store.apply([AdmitToQueue("q", "c", 1, 0, 1, 0.0)]) == [True]
        # What is not its own is kept: a run whose id starts the same.
        assert await store.signal_waiter(signal_token("done1", "go")) == ("done1", 1)
        assert await store.buffered_signals(signal_token("done1", "spare")) == ['"x"']
        assert await store.get_value("s", "done1") is not None
        assert len(await store.get_records("done1")) == 1
        assert await store.get_webhook("h-done1") is not None
        left = sorted(run.id for run in await store.find_runs(RunFilter()))
        assert left == ["busy", "c", "done1", "kid", "other"]
        # Deleted already: nothing more to delete.
        assert await deleter.delete_runs(["done", "bad"]) == []
        # Once its parent ended, a child may go; a new run may take an id.
        await store.apply([UpdateRun("busy", {"status": "completed"})])
        assert await deleter.delete_runs(["kid"]) == ["kid"]
        await store.create_run(make_run("done", status="suspended"))
        assert await store.get_checkpoints("done") == []
        assert await store.paused_steps() == []


async def check_delete_runs_after_aclose_raises_closed_resource_error(
    factory: StoreFactory | OpenStore,
) -> None:
    """`RunDeleter.delete_runs` raises `trio.ClosedResourceError` once the
    store is closed."""
    async with fresh_store(factory) as store:
        deleter = _deleter(store)
        await store.aclose()
        with raises(trio.ClosedResourceError):
            await deleter.delete_runs(["r1"])


DELETES_CHECKS = (
    check_delete_runs_deletes_the_ended_runs_given_with_their_rows,
    check_delete_runs_after_aclose_raises_closed_resource_error,
)
