"""Event triggers: `Engine.send_event` and `Client.send_event` start the
runs of the workflows that subscribe to an event, durably (the event is
stored in the write that starts them) and idempotently by event id; an event
no workflow subscribes to is kept, with a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall


@attrs.define(frozen=True)
class Order:
    sku: str
    quantity: int


def shop() -> tuple[td.App, dict[str, list[Any]]]:
    """Two subscribers of ``order.placed``, one of ``order.cancelled``, and
    a workflow that subscribes to nothing; ``seen`` records each body's
    input by workflow."""
    app = td.App("shop")
    seen: dict[str, list[Any]] = {}

    @app.workflow(events=["order.placed"])
    async def reserve(ctx: td.Context, order: Order) -> str:
        seen.setdefault("reserve", []).append(order)
        return f"reserved {order.quantity} {order.sku}"

    @app.workflow(events=["order.placed", "order.cancelled"])
    async def audit(ctx: td.Context, order: Order) -> str:
        seen.setdefault("audit", []).append(order)
        return f"audited {order.sku}"

    @app.workflow()
    async def unrelated(ctx: td.Context, order: Order) -> str:
        seen.setdefault("unrelated", []).append(order)
        return "never"

    return app, seen


async def test_an_event_starts_every_subscriber_with_its_payload(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, seen = shop()
    async with open_test_engine(app) as engine:
        receipt = await engine.send_event("order.placed", Order("apple", 3), event_id="o-1")
        assert receipt == td.EventReceipt(
            event_id="o-1",
            name="order.placed",
            key=None,
            run_ids=("o-1.reserve", "o-1.audit"),
        )
        assert await engine.result("o-1.reserve") == "reserved 3 apple"
        assert await engine.result("o-1.audit") == "audited apple"
        cancelled = await engine.send_event("order.cancelled", Order("pear", 1), event_id="o-2")
        assert cancelled.run_ids == ("o-2.audit",)
        assert await engine.result("o-2.audit") == "audited pear"
        await engine.drain()
        assert seen == {
            "reserve": [Order("apple", 3)],
            "audit": [Order("apple", 3), Order("pear", 1)],
        }
        runs = await engine.list_runs()
        assert sorted(run.id for run in runs.runs) == ["o-1.audit", "o-1.reserve", "o-2.audit"]
        # The event is kept, with what it reached.
        record = await engine.get_event_record("o-1")
        assert record is not None
        assert record.receipt == receipt
        assert record.payload == {"sku": "apple", "quantity": 3}
        assert record.sent_at == WALL_START


async def test_an_event_id_sent_again_starts_nothing_new(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, seen = shop()
    async with open_test_engine(app) as engine:
        first = await engine.send_event("order.placed", Order("apple", 3), event_id="o-1")
        await engine.drain()
        await trio.sleep(10)
        # Another payload or key changes nothing: the id names the event.
        again = await engine.send_event("order.placed", Order("kiwi", 9), event_id="o-1", key="k")
        assert again == first
        await engine.drain()
        assert seen == {"reserve": [Order("apple", 3)], "audit": [Order("apple", 3)]}
        assert len((await engine.list_runs()).runs) == 2
        events = await engine.list_events()
        assert [e.event_id for e in events] == ["o-1"]
        assert events[0].sent_at == WALL_START
        with pytest.raises(td.EventConflictError, match=r"named 'order\.placed'"):
            await engine.send_event("order.cancelled", Order("apple", 1), event_id="o-1")


async def test_the_same_event_id_sent_at_once_through_two_engines_is_one_event(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, seen = shop()
    store = td.MemoryStore()
    receipts: list[td.EventReceipt] = []
    async with (
        open_test_engine(app, store=store, engine_id="one") as one,
        open_test_engine(app, store=store, engine_id="two") as two,
    ):

        async def send(engine: td.Engine) -> None:
            receipts.append(await engine.send_event("order.placed", Order("fig", 1), event_id="x"))

        async with trio.open_nursery() as nursery:
            for engine in [one, two] * 5:
                nursery.start_soon(send, engine)
        assert {r.run_ids for r in receipts} == {("x.reserve", "x.audit")}
        assert await one.result("x.reserve") == "reserved 1 fig"
        await one.drain()
        await two.drain()
    assert seen == {"reserve": [Order("fig", 1)], "audit": [Order("fig", 1)]}


async def test_derived_event_ids_come_from_the_seed_and_name_new_events(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, _ = shop()
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, seed=7) as engine:
        first = await engine.send_event("order.placed", Order("a", 1))
        assert first.event_id.startswith("event-")
        assert first.run_ids == (f"{first.event_id}.reserve", f"{first.event_id}.audit")
        await engine.drain()
    async with open_test_engine(app, store=td.MemoryStore(), seed=7) as fresh:
        assert (await fresh.send_event("order.placed", Order("a", 1))).event_id == first.event_id
    # Restarted with the same seed on the same store, the engine derives
    # the same id again, which is taken: the event gets a new one.
    async with open_test_engine(app, store=store, seed=7) as restarted:
        second = await restarted.send_event("order.placed", Order("b", 2))
        assert second.event_id != first.event_id
        assert await restarted.result(second.run_ids[0]) == "reserved 2 b"
        assert len(await restarted.list_events()) == 2


async def test_an_event_nobody_subscribes_to_warns_and_is_kept(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, seen = shop()
    async with open_test_engine(app) as engine:
        with pytest.warns(td.UnsubscribedEventWarning, match="order.shipped") as caught:
            receipt = await engine.send_event("order.shipped", {"tracking": "T1"}, event_id="s-1")
        # The warning points at the caller's line.
        assert caught[0].filename == __file__
        assert receipt.run_ids == ()
        await engine.drain()
        assert seen == {}
        assert (await engine.list_runs()).runs == ()
        record = await engine.get_event_record("s-1")
        assert record is not None
        assert (record.name, record.payload, record.run_ids) == (
            "order.shipped",
            {"tracking": "T1"},
            (),
        )
        assert [e.event_id for e in await engine.list_events()] == ["s-1"]
        assert await engine.get_event_record("s-2") is None


def test_a_subscriber_must_take_the_payload_as_its_one_input() -> None:
    app = td.App("bad")

    async def two(ctx: td.Context, a: int, b: int) -> None: ...

    async def none(ctx: td.Context) -> None: ...

    with pytest.raises(td.RegistrationError, match=r"one input after the context, but it needs 2"):
        app.workflow(events=["e"])(two)
    with pytest.raises(td.RegistrationError, match="takes no input"):
        app.workflow(events=["e"])(none)
    with pytest.raises(td.RegistrationError, match="list of a window's payloads"):
        app.workflow(events=["e"], debounce=1.0, debounce_collect="all")(none)
    assert app.workflows == []

    # One input, optional inputs past it, or *args all take a payload.
    async def one(ctx: td.Context, a: int, b: int = 0) -> None: ...

    async def variadic(ctx: td.Context, *items: int) -> None: ...

    app.workflow(events=["e"])(one)
    app.workflow(events=["e"])(variadic)
    # Without events, a workflow takes what it likes.
    app.workflow()(two)
    assert [wf.name for wf in app.workflows] == ["one", "variadic", "two"]


async def test_bad_input_raises_before_anything_is_written(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app, seen = shop()
    async with open_test_engine(app) as engine:
        for name in ["", 3, "x" * 201]:
            with pytest.raises(td.UsageError, match="event name"):
                await engine.send_event(name, Order("a", 1))  # type: ignore[arg-type]
        with pytest.raises(td.UsageError, match="event key"):
            await engine.send_event("order.placed", Order("a", 1), key=7)  # type: ignore[arg-type]
        with pytest.raises(td.UsageError, match="event_id"):
            await engine.send_event("order.placed", Order("a", 1), event_id="no spaces")
        with pytest.raises(td.UsageError, match="run_id"):
            await engine.send_event("order.placed", Order("a", 1), event_id="e" * 250)
        with pytest.raises(td.InvalidArgumentsError, match="does not fit Order"):
            await engine.send_event("order.placed", {"sku": "a"})
        with pytest.raises(td.SerializationError):
            await engine.send_event("order.placed", object())
        with pytest.raises(td.UsageError, match="limit"):
            await engine.list_events(limit=0)
        await engine.drain()
        assert await engine.list_events() == []
        assert (await engine.list_runs()).runs == ()
        assert seen == {}


async def test_a_client_sends_events_that_an_engine_runs_at_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    app, seen = shop()
    url = f"sqlite:///{tmp_path / 'events.db'}"
    async with (
        open_test_engine(app, store=url) as engine,
        td.open_client(url, app=app, wall_clock=fixed_wall) as client,
    ):
        await trio.sleep(5)
        receipt = await client.send_event("order.placed", Order("plum", 2), event_id="c-1")
        assert receipt.run_ids == ("c-1.reserve", "c-1.audit")
        assert await client.result("c-1.reserve") == "reserved 2 plum"
        assert await client.result("c-1.audit") == "audited plum"
        # Taken at once, not at the engine's next scan.
        for run_id in receipt.run_ids:
            detail = await client.get(run_id)
            assert detail.updated_at - detail.created_at < 1.0
        assert (await client.send_event("order.placed", Order("x", 1), event_id="c-1")) == receipt
        record = await engine.get_event_record("c-1")
        assert record is not None
        assert record.sent_at == WALL_START + 5
        await engine.drain()
    assert seen == {"reserve": [Order("plum", 2)], "audit": [Order("plum", 2)]}


async def test_a_client_without_an_app_cannot_send_events(tmp_path: Path) -> None:
    async with td.open_client(f"sqlite:///{tmp_path / 'c.db'}") as client:
        with pytest.raises(td.UsageError, match="open_client\\(app="):
            await client.send_event("order.placed", 1)


async def test_runs_an_event_starts_wait_for_their_concurrency_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    app = td.App("keyed")
    ends: list[tuple[str, float]] = []

    @app.workflow(
        events=["order.placed"], concurrency_key=lambda order: order.sku, max_concurrent=1
    )
    async def pack(ctx: td.Context, order: Order) -> None:
        await ctx.sleep(10)
        ends.append((order.sku, trio.current_time()))

    async with open_test_engine(app) as engine:
        for index, sku in enumerate(["apple", "apple", "pear"]):
            await engine.send_event("order.placed", Order(sku, 1), event_id=f"o-{index}")
        for index in range(3):
            await engine.result(f"o-{index}.pack")
    # One apple at a time (each takes 10 s); the pear beside them.
    assert sorted(ends) == [("apple", 10.0), ("apple", 20.0), ("pear", 10.0)]
