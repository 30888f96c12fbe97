"""Store checks of a run's own records (`RunRecord`): puts, claims, settles,
deletes, the turn's read, atomicity and pruning."""

from __future__ import annotations

import attrs

from ..._base._records import ErrorInfo, Mark
from ..._base._run_records import RunRecord
from ..._stores._base import WriteConflict
from ..._stores._ops import CreateRun, UpdateRun
from ..._stores._record_ops import ClaimRecord, DeleteRecords, PutRecord, SettleRecord
from ._store_support import OpenStore, StoreFactory, fresh_store, make_run, raises

OUT = Mark(code="out", message="out on the broker", details={"broker": "memory://"})


def _decision(run_id: str = "r1", **fields: object) -> RunRecord:
    """A pending record of a task sent on the run's behalf."""
    values: dict[str, object] = {
        "kind": "decision",
        "status": "pending",
        "input": '{"waits":[1,3]}',
        "mark": OUT,
        "errors": (ErrorInfo(message="lost", code="lost"),),
        "attempts": 2,
        "group": "deciders@tenant",
        "wake_at": 40.0,
        "enqueued_at": 1.5,
        "started_at": 2.5,
        "executions": ("e1", "e2"),
    }
    values.update(fields)
    return RunRecord(run_id=run_id, **values)  # type: ignore[arg-type]


async def check_records_are_kept_by_run_and_kind(factory: StoreFactory | OpenStore) -> None:
    """`PutRecord` keeps one record per run and kind, every field as written,
    and replaces it when put again; `Store.get_records` reads a run's
    records ordered by kind."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run("r1"))
        await store.create_run(make_run("r2"))
        checked = RunRecord(run_id="r1", kind="checked_from", output="3", finished_at=2.0)
        assert await store.apply(
            [
                PutRecord(_decision()),
                PutRecord(checked),
                PutRecord(RunRecord(run_id="r2", kind="checked_from", output="9")),
            ]
        ) == [None, None, None]
        assert await store.get_records("r1") == [checked, _decision()]
        again = attrs.evolve(checked, output="4")
        await store.apply([PutRecord(again)])
        assert await store.get_records("r1") == [again, _decision()]
        assert [r.output for r in await store.get_records("r2")] == ["9"]
        assert await store.get_records("missing") == []


async def check_a_claim_writes_a_record_only_while_it_is_pending(
    factory: StoreFactory | OpenStore,
) -> None:
    """`ClaimRecord` replaces a pending record (at the attempt, when given)
    and changes nothing otherwise: missing, settled, or another attempt."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        await store.apply([PutRecord(_decision())])
        third = _decision(attempts=3, executions=("e1", "e2", "e3"), mark=None)
        assert await store.apply([ClaimRecord(third, attempt=1)]) == [False]
        assert await store.apply([ClaimRecord(third, attempt=2)]) == [True]
        assert await store.get_records("r1") == [third]
        assert await store.apply([ClaimRecord(_decision("nobody"))]) == [False]
        assert await store.get_records("nobody") == []
        done = attrs.evolve(third, status="completed", output='{"end":1}')
        await store.apply([PutRecord(done)])
        assert await store.apply([ClaimRecord(third)]) == [False]
        assert await store.get_records("r1") == [done]


async def check_a_settle_ends_a_pending_record_under_its_conditions(
    factory: StoreFactory | OpenStore,
) -> None:
    """`SettleRecord` settles a pending record in place, keeping its other
    fields, only at its attempt, with one of its executions, and not while
    its run is in a status it names; settling again changes nothing."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        await store.apply([PutRecord(_decision())])

        def settle(**conditions: object) -> SettleRecord:
            return SettleRecord(
                "r1",
                "decision",
                "completed",
                '{"next":1}',
                None,
                9.0,
                **conditions,  # type: ignore[arg-type]
            )

        assert await store.apply(
            [
                settle(attempt=1),
                settle(execution="e9"),
                settle(unless_run_status=frozenset({"suspended"})),
                SettleRecord("r1", "other", "completed"),
            ]
        ) == [None, None, None, None]
        assert await store.get_records("r1") == [_decision()]
        expected = _decision(status="completed", output='{"next":1}', mark=None, finished_at=9.0)
        assert await store.apply([settle(attempt=2, execution="e2")]) == [expected]
        assert await store.get_records("r1") == [expected]
        assert await store.apply([settle()]) == [None]
        # A failure keeps the record's errors and sets its own; a settle
        # clears the mark of what the record waited for.
        await store.apply([PutRecord(_decision(kind="admission"))])
        failed = SettleRecord("r1", "admission", "failed", None, ErrorInfo(message="no"), 10.0)
        [settled] = await store.apply([failed])
        assert settled == _decision(
            kind="admission",
            status="failed",
            error=ErrorInfo(message="no"),
            finished_at=10.0,
            mark=None,
        )


async def check_records_are_deleted_by_kind(factory: StoreFactory | OpenStore) -> None:
    """`DeleteRecords` deletes the named kinds a run has (a kind it lacks is
    no error) and leaves the rest."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        kept = RunRecord(run_id="r1", kind="b")
        await store.apply([PutRecord(RunRecord(run_id="r1", kind="a")), PutRecord(kept)])
        assert await store.apply([DeleteRecords("r1", ("a", "c"))]) == [None]
        assert await store.get_records("r1") == [kept]


async def check_a_turn_reads_the_records_of_its_run(factory: StoreFactory | OpenStore) -> None:
    """`Store.begin_turn` returns the run's records with its checkpoints."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        await store.create_run(make_run("r2"))
        record = RunRecord(run_id="r1", kind="cancelled_at", output="4")
        await store.apply([PutRecord(record), PutRecord(attrs.evolve(record, run_id="r2"))])
        state = await store.begin_turn("r1", "engine-a", 30.0, 1.0)
        assert state is not None
        assert state.records == (record,)


async def check_record_writes_roll_back_with_their_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """A batch that fails writes none of its records."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        await store.apply([PutRecord(_decision())])
        with raises(WriteConflict):
            await store.apply(
                [
                    PutRecord(RunRecord(run_id="r1", kind="new")),
                    DeleteRecords("r1", ("decision",)),
                    ClaimRecord(_decision(attempts=3)),
                    UpdateRun("r1", {"wake_at": 5.0}, expect_status=frozenset({"running"})),
                ]
            )
        assert await store.get_records("r1") == [_decision()]


async def check_records_are_pruned_with_their_run(factory: StoreFactory | OpenStore) -> None:
    """`Store.prune_runs` deletes a pruned run's records, and only its."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run("old", status="completed", updated_at=1.0))
        await store.create_run(make_run("old1", status="suspended", updated_at=1.0))
        for run_id in ("old", "old1"):
            await store.apply([PutRecord(RunRecord(run_id=run_id, kind="forked_from"))])
        assert await store.prune_runs({"completed": 5.0}, 10) == ["old"]
        assert await store.get_records("old") == []
        assert len(await store.get_records("old1")) == 1


async def check_a_create_writes_its_records_only_if_it_inserts_the_run(
    factory: StoreFactory | OpenStore,
) -> None:
    """`CreateRun`'s ``records`` are written with the run it inserts, and
    not at all by a create that finds the id taken."""
    async with fresh_store(factory) as store:
        deadline = RunRecord(run_id="r1", kind="deadline", status="pending", wake_at=60.0)
        [(_, created)] = await store.apply([CreateRun(make_run(), records=(deadline,))])
        assert created
        assert await store.get_records("r1") == [deadline]
        later = attrs.evolve(deadline, wake_at=90.0)
        [(_, created)] = await store.apply([CreateRun(make_run(), records=(later,))])
        assert not created
        assert await store.get_records("r1") == [deadline]


RECORDS_CHECKS = (
    check_a_create_writes_its_records_only_if_it_inserts_the_run,
    check_records_are_kept_by_run_and_kind,
    check_a_claim_writes_a_record_only_while_it_is_pending,
    check_a_settle_ends_a_pending_record_under_its_conditions,
    check_records_are_deleted_by_kind,
    check_a_turn_reads_the_records_of_its_run,
    check_record_writes_roll_back_with_their_batch,
    check_records_are_pruned_with_their_run,
)
