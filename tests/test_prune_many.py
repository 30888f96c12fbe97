"""`prune_many`: it deletes the ended runs a `RunSelection` matches, with
their rows, keyed values and the blobs only they referred to, and keeps
the runs that have not ended and those whose parent has not; a dry run
writes nothing; interrupted, the same call deletes what is left; a store
without `delete_runs` is refused before anything is written. On the
memory and SQLite stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store
from test_writing_a_store import open_counting_store
from trio_durable._features.messages._published import event_scope
from trio_durable._front import _front_bulk, _front_prune
from trio_durable._front._front_bulk import select_runs
from trio_durable._stores._blob_store import SCOPE

app = td.App("prune")


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@app.step(retry=td.Retry(attempts=1))
async def charge(order: str, code: str) -> str:
    raise td.FatalError("no", code=code)


@app.workflow()
async def checkout(ctx: td.Context, order: str, code: str) -> str:
    return await ctx.step(charge, order, code)


@app.workflow()
async def echo(ctx: td.Context, text: str) -> str:
    await ctx.set_event("seen", len(text))
    return text


@app.workflow()
async def waits(ctx: td.Context, child: str) -> str:
    await ctx.child(echo, child)
    return str(await ctx.wait_signal("go"))


async def _runs(engine: td.Engine) -> None:
    """Ten failed runs (8 of code "declined"), three completed ones, a run
    waiting for its signal whose child completed."""
    for i in range(8):
        await engine.start(checkout, f"o{i}", "declined", run_id=f"o{i}")
    for i in range(2):
        await engine.start(checkout, f"x{i}", "other", run_id=f"x{i}")
    for i in range(3):
        await engine.start(echo, f"e{i}", run_id=f"e{i}")
    await engine.start(waits, "kid", run_id="w")
    await engine.drain()


async def _ids(engine: td.Engine) -> list[str]:
    return sorted(run.id for run in (await engine.list_runs(limit=500)).runs)


async def test_prune_many_deletes_the_ended_runs_it_matches(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    async with shared_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        await _runs(engine)
        assert await store.get_value(event_scope("e0"), "seen") is not None
        child = "w.child.1"
        assert (await engine.get(child)).status == "completed"
        # Ended runs only, and not a child whose parent is waiting.
        everything = td.RunSelection()
        preview = await engine.prune_many(everything, dry_run=True)
        assert (preview.matched, preview.skipped, preview.acted, preview.dry_run) == (
            13,
            1,
            0,
            True,
        )
        assert preview.operation == everything.key("prune")
        assert len(await _ids(engine)) == 15
        assert await store.get_value("bulk", everything.key("prune")) is None

        progress: list[tuple[int, int]] = []
        report = await engine.prune_many(
            td.RunSelection(code="declined"),
            batch_size=3,
            on_progress=lambda p: progress.append((p.done, p.total)),
        )
        assert (report.action, report.matched, report.acted, report.refused) == ("prune", 8, 8, 0)
        assert (report.finished, report.dry_run) == (True, False)
        assert progress == [(3, 8), (6, 8), (8, 8)]
        assert await _ids(engine) == ["e0", "e1", "e2", "w", child, "x0", "x1"]

        report = await engine.prune_many(everything)
        assert (report.matched, report.acted, report.skipped) == (5, 5, 1)
        assert await _ids(engine) == ["w", child]
        # What went with them went too; the waiting run and its child stay.
        assert await store.get_value(event_scope("e0"), "seen") is None
        assert await store.get_value(event_scope(child), "seen") is not None
        with pytest.raises(td.RunNotFoundError):
            await engine.history("e0")

        # Once the parent ended, its child goes with it.
        await engine.signal("w", "go", "now")
        await engine.drain()
        report = await engine.prune_many(td.RunSelection(workflow="echo"), dry_run=True)
        assert (report.matched, report.first_ids) == (1, (child,))
        report = await engine.prune_many(everything, batch_size=1000)
        assert (report.matched, report.acted, report.skipped) == (2, 2, 0)
        assert await _ids(engine) == []


async def test_an_interrupted_prune_deletes_what_is_left_when_called_again(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    class Interrupt(Exception):
        pass

    def interrupt(progress: td.BulkProgress) -> None:
        raise Interrupt

    async with shared_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        await _runs(engine)
        selection = td.RunSelection(status="failed")
        with pytest.raises(Interrupt):
            await engine.prune_many(selection, batch_size=4, on_progress=interrupt)
        assert len(await _ids(engine)) == 15 - 4
        report = await engine.prune_many(selection, batch_size=4)
        assert (report.matched, report.acted, report.refused) == (6, 6, 0)
        assert [run.status for run in (await engine.list_runs(status="failed")).runs] == []


async def test_a_run_that_changed_since_the_selection_is_left_alone(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with shared_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        await _runs(engine)

        async def then_changed(*args: Any) -> tuple[list[str], int]:
            selected = await select_runs(*args)
            # Between the selection and the deletes: one is retried (it has
            # not ended now), one deleted by another call.
            await engine.retry("x1")
            assert await store.delete_runs(["x0"]) == ["x0"]  # type: ignore[attr-defined]
            return selected

        monkeypatch.setattr(_front_prune, "select_runs", then_changed)
        report = await engine.prune_many(td.RunSelection(code="other"), batch_size=1)
        assert (report.matched, report.acted, report.refused) == (2, 0, 2)
        # Retried, it runs again (and fails again later): it is still there.
        assert (await engine.get("x1")).status in ("pending", "running")


async def test_retry_many_counts_a_run_deleted_meanwhile_as_refused(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with shared_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        await _runs(engine)

        async def then_pruned(*args: Any) -> tuple[list[str], int]:
            selected = await select_runs(*args)
            report = await engine.prune_many(td.RunSelection(id_prefix="o3"))
            assert report.acted == 1
            return selected

        monkeypatch.setattr(_front_bulk, "select_runs", then_pruned)
        report = await engine.retry_many(td.RunSelection(code="declined"), batch_size=3)
        assert (report.matched, report.acted, report.refused) == (8, 7, 1)


async def test_a_store_without_delete_runs_cannot_prune_selected_runs(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    # docs/writing-a-store.md's worked example has no delete_runs.
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with (
        open_counting_store() as store,
        open_test_engine(app, store=store, blobs=blobs) as engine,
    ):
        await engine.start(echo, "x", run_id="e")
        await engine.drain()
        for dry_run in (True, False):
            with pytest.raises(td.UsageError, match="cannot prune selected runs: it has no"):
                await engine.prune_many(td.RunSelection(), dry_run=dry_run)
        # Pruning by age works as before.
        await trio.sleep(1)
        assert await engine.prune(td.Retention(completed=0)) == 1


async def test_prune_many_deletes_the_blobs_only_deleted_runs_referred_to(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "p" * 100_000
    async with (
        shared_store(kind, tmp_path) as store,
        open_test_engine(app, store=store, blobs=blobs, blob_grace=60) as engine,
    ):
        for run_id in ("first", "second"):
            await engine.start(echo, text, run_id=run_id)
        await engine.drain()
        # Both runs' inputs are one blob, and so are their outputs.
        assert len(await blobs.list()) == 2
        await trio.sleep(61)
        assert (await engine.prune_many(td.RunSelection(id_prefix="first"))).acted == 1
        # "second" still refers to both: nothing is deleted.
        assert len(await blobs.list()) == 2
        assert await engine.result("second") == text
        # Blobs within their grace outlive the runs deleted.
        old = {info.key for info in await blobs.list()}
        third = await engine.start(echo, "q" * 100_000, run_id="third")
        await engine.result(third.id)
        assert (await engine.prune_many(td.RunSelection(workflow="echo"))).acted == 2
        left = {info.key for info in await blobs.list()}
        assert len(left) == 2
        assert not left & old
        # No run refers to a blob any more.
        assert await engine.store.list_values(SCOPE) == []
