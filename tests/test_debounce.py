"""Debounce: events for one key within a workflow's window start one run of
it, with the last payload or every one, once the window (trailing: pushed
on by each event) has passed; the window lives in the store, so it holds
across engines, and every event lands in exactly one run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from trio_durable._features.events._debounce import debounce_scope, window_key

DEBOUNCE = 5.0


def debounced() -> tuple[td.App, list[tuple[str, float, Any]]]:
    """``latest`` keeps the last payload of a window, ``collect`` all of
    them; ``ran`` records (workflow, Trio time, input) as each body runs."""
    app = td.App("debounced")
    ran: list[tuple[str, float, Any]] = []

    @app.workflow(events=["typed"], debounce=DEBOUNCE)
    async def latest(ctx: td.Context, text: str) -> str:
        ran.append(("latest", trio.current_time(), text))
        return text

    @app.workflow(events=["typed"], debounce=DEBOUNCE, debounce_collect="all")
    async def collect(ctx: td.Context, texts: list[str]) -> list[str]:
        ran.append(("collect", trio.current_time(), texts))
        return texts

    return app, ran


async def test_a_burst_starts_one_run_with_the_last_payload_or_all_of_them(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, ran = debounced()
    async with open_test_engine(app) as engine:
        receipts = []
        for text in ["h", "he", "hel"]:
            receipts.append(await engine.send_event("typed", text, key="doc-1"))
            await trio.sleep(1)
        first = receipts[0].event_id
        windows = (f"{first}.latest", f"{first}.collect")
        # Each event reaches the runs of the window the first one opened.
        assert {r.run_ids for r in receipts} == {windows}
        run = await engine.get(windows[0])
        assert (run.status, run.wake_at) == ("suspended", WALL_START + 2 + DEBOUNCE)
        assert await engine.result(windows[0]) == "hel"
        assert await engine.result(windows[1]) == ["h", "he", "hel"]
        # Trailing: the window ends DEBOUNCE after the last event (at 2).
        assert sorted(ran) == [("collect", 7.0, ["h", "he", "hel"]), ("latest", 7.0, "hel")]
        # Every event is kept, with the run it landed in.
        assert [e.run_ids for e in await engine.list_events()] == [windows] * 3


async def test_each_key_has_its_own_window_and_none_is_a_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, ran = debounced()
    async with open_test_engine(app) as engine:
        sent = [
            await engine.send_event("typed", text, key=key)
            for text, key in [("a1", "a"), ("b1", "b"), ("n1", None), ("a2", "a"), ("n2", None)]
        ]
        latest = {r.key: r.run_ids[0] for r in sent}
        assert len(set(latest.values())) == 3
        assert await engine.result(latest["a"]) == "a2"
        assert await engine.result(latest["b"]) == "b1"
        assert await engine.result(latest[None]) == "n2"
        await engine.drain()
        assert sorted(text for wf, _, text in ran if wf == "latest") == ["a2", "b1", "n2"]
        # The windows are kept in the store by key, None apart from "null".
        rows = await engine.store.list_values(debounce_scope("latest"))
        assert [row.key for row in rows] == sorted([window_key("a"), window_key("b"), "null"])


async def test_a_window_closes_and_the_next_event_opens_another(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, ran = debounced()
    async with open_test_engine(app) as engine:
        one = await engine.send_event("typed", "one", event_id="e1")
        await trio.sleep(DEBOUNCE - 1)
        two = await engine.send_event("typed", "two", event_id="e2")
        assert two.run_ids == one.run_ids == ("e1.latest", "e1.collect")
        # The window now ends at 4 + DEBOUNCE = 9; at exactly 9 it is closed.
        await trio.sleep(DEBOUNCE)
        assert trio.current_time() == 9.0
        three = await engine.send_event("typed", "three", event_id="e3")
        assert three.run_ids == ("e3.latest", "e3.collect")
        assert await engine.result("e1.collect") == ["one", "two"]
        assert await engine.result("e3.collect") == ["three"]
        assert await engine.result("e3.latest") == "three"
        await engine.drain()
        assert sorted((wf, at) for wf, at, _ in ran) == [
            ("collect", 9.0),
            ("collect", 14.0),
            ("latest", 9.0),
            ("latest", 14.0),
        ]


async def test_a_run_changed_outside_its_window_is_never_joined(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, ran = debounced()
    async with open_test_engine(app) as engine:
        await engine.send_event("typed", "one", event_id="e1")
        await engine.cancel("e1.latest")
        with pytest.raises(td.RunCancelled):
            await engine.result("e1.latest")
        # Still within the window, but its run is no longer waiting to
        # start: the event opens a new window.
        two = await engine.send_event("typed", "two", event_id="e2")
        assert two.run_ids == ("e2.latest", "e1.collect")
        assert await engine.result("e2.latest") == "two"
        assert await engine.result("e1.collect") == ["one", "two"]
        await engine.drain()
        assert sorted((wf, at, payload) for wf, at, payload in ran) == [
            ("collect", 5.0, ["one", "two"]),
            ("latest", 5.0, "two"),
        ]


async def test_events_sent_at_once_all_land_in_one_run(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, _ = debounced()
    async with open_test_engine(app) as engine:
        receipts: list[td.EventReceipt] = []

        async def send(text: str) -> None:
            receipts.append(await engine.send_event("typed", text, key="k"))

        async with trio.open_nursery() as nursery:
            for index in range(20):
                nursery.start_soon(send, f"t{index}")
        assert len({r.run_ids for r in receipts}) == 1
        [(latest, collect)] = {r.run_ids for r in receipts}
        collected = await engine.result(collect)
        assert sorted(collected) == sorted(f"t{index}" for index in range(20))
        assert await engine.result(latest) in collected
        assert len((await engine.list_runs()).runs) == 2


async def test_a_window_outlives_the_engine_that_opened_it(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    app, ran = debounced()
    url = f"sqlite:///{tmp_path / 'debounce.db'}"
    async with open_test_engine(app, store=url, engine_id="first") as first:
        receipt = await first.send_event("typed", "kept", event_id="e1")
    await trio.sleep(1)
    async with open_test_engine(app, store=url, engine_id="second") as second:
        await second.send_event("typed", "also kept", event_id="e2")
        assert await second.result(receipt.run_ids[1]) == ["kept", "also kept"]
    assert sorted((wf, at) for wf, at, _ in ran) == [("collect", 6.0), ("latest", 6.0)]


async def test_a_client_opens_a_window_that_an_engine_starts_on_time(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    app, ran = debounced()
    url = f"sqlite:///{tmp_path / 'debounce.db'}"
    async with (
        open_test_engine(app, store=url) as engine,
        td.open_client(url, app=app, wall_clock=fixed_wall) as client,
    ):
        await engine.drain()
        await client.send_event("typed", "a", event_id="c1")
        await trio.sleep(2)
        await client.send_event("typed", "b", event_id="c2")
        assert await client.result("c1.collect") == ["a", "b"]
        assert await client.result("c1.latest") == "b"
    # The window ended at 2 + DEBOUNCE; the engine started the runs then,
    # told by the client's write, not at its next scan a minute on.
    assert sorted((wf, at) for wf, at, _ in ran) == [("collect", 7.0), ("latest", 7.0)]


@asynccontextmanager
async def two_engines(
    app: td.App, open_test_engine: EngineFactory, url: str
) -> AsyncIterator[tuple[td.Engine, td.Engine]]:
    async with (
        td.open_store(url) as store,
        open_test_engine(app, store=store, engine_id="one", seed=1) as one,
        open_test_engine(app, store=store, engine_id="two", seed=2) as two,
    ):
        yield one, two


async def test_two_engines_coalesce_a_burst_of_fifty_events_into_one_run(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    app, ran = debounced()
    texts = [f"t{index:02}" for index in range(50)]
    async with two_engines(app, open_test_engine, f"sqlite:///{tmp_path / 'two.db'}") as engines:
        receipts = []
        for index, text in enumerate(texts):
            receipts.append(await engines[index % 2].send_event("typed", text, key="doc"))
            await trio.sleep(0.1)
        assert len({r.run_ids for r in receipts}) == 1
        latest, collect = receipts[0].run_ids
        assert await engines[1].result(latest) == "t49"
        assert await engines[0].result(collect) == texts
        for engine in engines:
            await engine.drain()
        runs = await engines[0].list_runs()
        assert sorted(run.id for run in runs.runs) == [collect, latest]
    # One run each, started once the window after the last event (at 4.9) passed.
    assert sorted((wf, round(at, 6)) for wf, at, _ in ran) == [("collect", 9.9), ("latest", 9.9)]


async def test_two_engines_coalesce_fifty_events_sent_at_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    app, ran = debounced()
    texts = [f"t{index:02}" for index in range(50)]
    async with two_engines(app, open_test_engine, f"sqlite:///{tmp_path / 'two.db'}") as engines:
        receipts: list[td.EventReceipt] = []

        async def send(engine: td.Engine, text: str) -> None:
            receipts.append(await engine.send_event("typed", text, key="doc"))

        async with trio.open_nursery() as nursery:
            for index, text in enumerate(texts):
                nursery.start_soon(send, engines[index % 2], text)
        assert len({r.run_ids for r in receipts}) == 1
        latest, collect = receipts[0].run_ids
        collected = await engines[0].result(collect)
        assert sorted(collected) == texts
        # The last payload is the one the last write put in.
        assert await engines[1].result(latest) == collected[-1]
        for engine in engines:
            await engine.drain()
        assert len((await engines[0].list_runs()).runs) == 2
    assert len(ran) == 2
