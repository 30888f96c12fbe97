"""Retention of the records runs and features leave besides the runs' own
rows: the keyed values that go with a run are pruned with it, and event
records and bulk operations' states go by age (`Retention.events`), on the
memory and SQLite stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store
from trio_durable._kernel._views import EVENTS_KEPT

app = td.App("retention-records")


@app.workflow()
async def target(ctx: td.Context) -> int:
    bumped = [0]

    @ctx.update("bump")
    def bump(by: int) -> int:
        bumped[0] += by
        return bumped[0]

    ctx.set_event("ready", True)
    ctx.emit("one")
    got: int = await ctx.wait_signal("go")
    return got + bumped[0]


@app.workflow()
async def sender(ctx: td.Context, to: str) -> None:
    await ctx.signal(to, "go", 1, idempotency_key=f"key-{to}")


@app.workflow(concurrency_key=lambda n: f"k{n}", singleton=True)
async def single(ctx: td.Context, n: int) -> int:
    return n


@app.workflow(events=["order"])
async def on_order(ctx: td.Context, n: int) -> int:
    return n


@app.workflow(events=["burst"], debounce=5.0)
async def on_burst(ctx: td.Context, n: int) -> int:
    return n


@app.workflow()
async def refuses(ctx: td.Context) -> None:
    raise td.FatalError("refused", code="refused")


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[td.Store]:
    async with shared_store(request.param, tmp_path) as opened:
        yield opened


async def _scopes(store: td.Store, run_ids: list[str]) -> dict[str, int]:
    """How many values each scope that names one of ``run_ids``, or that a
    feature keeps claims and windows in, holds."""
    found: dict[str, int] = {}
    scopes = [
        f"{family}:{run_id}" for family in ("run-event", "stream", "update") for run_id in run_ids
    ]
    scopes += ["signal-key", "singleton:single", "debounce:on_burst", "event"]
    for scope in scopes:
        found[scope] = len(await store.list_values(scope, limit=1000))
    return found


async def test_the_values_of_a_run_go_with_it(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        await engine.start(target, run_id="t")
        assert await engine.get_event("t", "ready") is True
        assert await engine.update("t", "bump", 2) == 2
        await engine.start(sender, "t", run_id="s")
        await engine.result("s")
        assert await engine.result("t") == 3
        await engine.start(single, 7, run_id="one")
        await engine.result("one")
        receipt = await engine.send_event("burst", 1, key="k")
        await engine.result(receipt.run_ids[0])
        ran = ["t", "s", "one", receipt.run_ids[0]]
        before = await _scopes(store, ran)
        assert (
            before
            == {
                "run-event:t": 1,
                "stream:t": 1,
                "update:t": 1,  # the update's record; its inbox entry went once applied
                **{
                    f"{family}:{run_id}": 0
                    for family in ("run-event", "stream", "update")
                    for run_id in ran[1:]
                },
                "signal-key": 1,
                "singleton:single": 1,
                "debounce:on_burst": 1,
                "event": 1,
            }
        )
        await trio.sleep(1)  # ages count strictly: every run ended before now
        # The event record is younger than its age: it stays.
        assert await engine.prune(td.Retention(completed=0)) == 4
        after = await _scopes(store, ran)
        assert after == {**dict.fromkeys(before, 0), "event": 1}


async def test_event_records_go_by_age(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    assert td.Retention().events == EVENTS_KEPT == 7 * 86400
    retention = td.Retention(events=100, interval=10)
    async with open_test_engine(app, store=store, retention=retention) as engine:
        await engine.send_event("order", 1, event_id="e1")
        with pytest.warns(td.UnsubscribedEventWarning):
            await engine.send_event("nobody", 2, event_id="e2")
        await trio.sleep(50)
        await engine.send_event("order", 3, event_id="e3")
        assert [e.event_id for e in await engine.list_events()] == ["e1", "e2", "e3"]
        # The pass at 100 s keeps what is 100 s old; the one at 110 s
        # prunes e1 and e2 (sent at 0), and keeps e3 (sent at 50).
        await trio.sleep(55)
        assert [e.event_id for e in await engine.list_events()] == ["e1", "e2", "e3"]
        await trio.sleep(10)
        assert [e.event_id for e in await engine.list_events()] == ["e3"]
        # Runs are kept (no age for their status): the run e1 started
        # is there, and sending e1 again now starts nothing new.
        assert (await engine.get("e1.on_order")).status == "completed"
        again = await engine.send_event("order", 1, event_id="e1")
        assert again.run_ids == ("e1.on_order",)
        await trio.sleep(60)
        assert [e.event_id for e in await engine.list_events()] == ["e1"]
    # events=None keeps them.
    async with open_test_engine(
        app, store=store, retention=td.Retention(events=None, interval=10)
    ) as engine:
        await trio.sleep(1000)
        assert [e.event_id for e in await engine.list_events()] == ["e1"]


async def test_a_bulk_operations_state_goes_by_age(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    retention = td.Retention(events=100, interval=10)
    selection = td.RunSelection(workflow="refuses")
    async with open_test_engine(app, store=store, retention=retention) as engine:
        handle = await engine.start(refuses, run_id="r1")
        with pytest.raises(td.RunFailed):
            await handle.result()
        first = await engine.retry_many(selection)
        assert (first.operation, first.acted) == (f"{selection.key('retry')}.1", 1)
        with pytest.raises(td.RunFailed):
            await handle.result()
        assert len(await store.list_values("bulk")) == 1
        # Its state, last written at 0, goes at the pass after 100 s.
        await trio.sleep(115)
        assert await store.list_values("bulk") == []
        # Started again, the operation counts from generation 1 again:
        # the run's mark of the first generation 1 is older than this
        # one's start, so the run (which failed again) is retried.
        again = await engine.retry_many(selection)
        assert (again.operation, again.acted, again.skipped) == (first.operation, 1, 0)
