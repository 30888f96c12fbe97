"""Served by convention: an engine that registers nothing runs the
workflows live workers announce, and takes their on-error routes from the
announcements (docs/remote-workflows.md). Memory broker and store, under
the autojump clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from counting_broker import CountingBroker

greeter = td.App("greeter")


@greeter.step()
async def shout(name: str) -> str:
    return name.upper()


@greeter.workflow()
async def greet(ctx: td.Context, name: str) -> str:
    """No group: served under its own name."""
    shouted = await ctx.step(shout, name)
    return f"hello {shouted}"


@greeter.workflow(group="orders")
async def order(ctx: td.Context, item: str) -> str:
    await ctx.sleep(1)
    return f"ordered {item}"


def failing_app(routes: Sequence[td.OnError], version: str = "1") -> td.App:
    """An app whose workflow ``pay`` always fails with code ``declined``,
    routed as ``routes`` say, and the handlers it may route to."""
    app = td.App("payments")

    @app.workflow(group="pay", version=version, on_error=routes)
    async def pay(ctx: td.Context, amount: int) -> int:
        raise td.FatalError(f"declined {amount}", code="declined")

    @app.workflow(group="pay")
    async def refund(ctx: td.Context, failed: dict[str, Any]) -> str:
        return f"refunded {failed['run_id']}"

    @app.workflow(group="pay")
    async def alert(ctx: td.Context, failed: dict[str, Any]) -> str:
        return f"alerted {failed['run_id']}"

    return app


bare = td.App("bare")


async def test_a_workflow_no_engine_registers_runs_when_workers_announce_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    store = td.MemoryStore()
    async with td.open_engine(bare, store=store, broker=broker) as engine:
        with pytest.raises(td.UnknownWorkflowError):
            await engine.start("greet", "ann")
        async with td.open_worker(greeter, broker=broker, groups=["greet", "orders"]):
            assert await (await engine.start("greet", "ann")).result() == "hello ANN"
            assert await (await engine.start("order", "tea")).result() == "ordered tea"
        # The client starts by name too; the engine serves the run.
        async with (
            td.open_client(store=store, broker=broker) as client,
            td.open_worker(greeter, broker=broker, groups=["greet"]),
        ):
            handle = await client.start("greet", "bo")
            assert await engine.result(handle.id) == "hello BO"


async def test_on_error_routes_come_from_the_announcements(
    autojump_clock: trio.testing.MockClock,
) -> None:
    routes = [td.OnError("declined", workflow="refund")]
    broker = td.MemoryBroker()
    async with (
        td.open_engine(bare, store=td.MemoryStore(), broker=broker) as engine,
        td.open_worker(failing_app(routes), broker=broker, groups=["pay"], instance_id="a"),
        td.open_worker(failing_app(routes), broker=broker, groups=["pay"], instance_id="b"),
    ):
        handle = await engine.start("pay", 5)
        assert await handle.result() == f"refunded {handle.id}"
        run = await engine.get(handle.id)
        assert run.tags == ("onError:declined",)


async def test_workers_that_disagree_route_nothing_and_say_so(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    to_refund = failing_app([td.OnError("declined", workflow="refund")])
    to_alert = failing_app([td.OnError("declined", workflow="alert")])
    async with (
        td.open_engine(bare, store=td.MemoryStore(), broker=broker) as engine,
        td.open_worker(to_refund, broker=broker, groups=["pay"], instance_id="a"),
        td.open_worker(to_alert, broker=broker, groups=["pay"], instance_id="b"),
    ):
        with engine.subscribe() as events:
            handle = await engine.start("pay", 5)
            with pytest.raises(td.RunFailed) as failed:
                await handle.result()
            assert failed.value.code == "declined"
            async for event in events:
                if event.kind == "run.unrouted":
                    assert event.run_id == handle.id
                    assert "different on-error routes" in event.data["reason"]
                    break
                assert event.kind != "run.routed"


async def test_announcers_of_another_version_are_ignored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    store = td.MemoryStore()
    current = failing_app([td.OnError("declined", workflow="refund")], version="1")
    # A worker of the next deploy routes version 2 elsewhere: it has no say
    # over runs pinned to version 1, and does not serve them.
    next_deploy = failing_app([td.OnError("declined", workflow="alert")], version="2")
    async with (
        td.open_engine(bare, store=store, broker=broker) as engine,
        td.open_worker(current, broker=broker, groups=["pay"], instance_id="v1"),
    ):
        handle = await engine.start("pay", 1)
        assert await handle.result() == f"refunded {handle.id}"
        async with td.open_worker(next_deploy, broker=broker, groups=["pay"], instance_id="v2"):
            # Both announce "pay"; the v1 workers' routes still hold for
            # runs pinned to version 1.
            await trio.sleep(10)
            again = await engine.start("pay", 2)
            outcome = await again.result()
            assert outcome in (f"refunded {again.id}", f"alerted {again.id}")
            run = await engine.get(again.id)
            if run.version == "1":
                assert outcome == f"refunded {again.id}"
            else:
                assert outcome == f"alerted {again.id}"


async def test_a_burst_of_failures_reads_the_announcements_once_per_five_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = CountingBroker()
    routes = [td.OnError("declined", workflow="refund")]
    async with (
        td.open_engine(bare, store=td.MemoryStore(), broker=broker) as engine,
        td.open_worker(failing_app(routes), broker=broker, groups=["pay"]),
    ):
        first = await engine.start("pay", 0)
        await first.result()
        # Twenty runs fail at once, within five seconds: one read serves
        # their dispatch and their routes.
        reads = broker.reads
        started = trio.current_time()
        handles = [await engine.start("pay", i, run_id=f"burst-{i}") for i in range(20)]
        for handle in handles:
            assert await handle.result() == f"refunded {handle.id}"
        assert trio.current_time() - started < 5
        assert broker.reads - reads <= 1
        # Past five seconds, the next failure reads them again.
        await trio.sleep(5)
        reads = broker.reads
        late = await engine.start("pay", 99)
        assert await late.result() == f"refunded {late.id}"
        assert broker.reads - reads == 1
