"""The console's fleet and queues, with load and backlog: ``GET /api/fleet``
and ``GET /api/queues`` and their pages, over workers that heartbeat (a
memory broker whose announcements need heartbeats, as a server's do) and
a group no worker serves."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from test_console_api import api
from test_fleet import HEARTBEAT, ServerLikeBroker, running_worker
from trio_durable._brokers._memory import MemoryBroker

app = td.App("busy")
gate = {"open": trio.Event()}


@app.step(group="payments")
async def charge(amount: int) -> int:
    await gate["open"].wait()
    return amount


@app.step(group="ghost")
async def haunt(amount: int) -> int:
    return amount


@app.workflow()
async def pay(ctx: td.Context, amount: int) -> int:
    return await ctx.step(charge, amount)


@app.workflow()
async def spook(ctx: td.Context, amount: int) -> int:
    return await ctx.step(haunt, amount)


class CountingBroker(ServerLikeBroker):
    """Needs heartbeats, as a server's broker does, and counts backlogs."""

    async def backlog(self, queue: str) -> int:
        return await self.inner.backlog(queue)


@asynccontextmanager
async def busy_fleet(
    open_test_engine: EngineFactory,
) -> AsyncIterator[tuple[td.Engine, httpx.AsyncClient]]:
    """Worker w-1 serves payments two tasks at a time, both held in their
    step; three more wait at the broker, and one of group ghost, which no
    worker serves. Read after w-1's first heartbeat."""
    gate["open"] = trio.Event()
    broker = CountingBroker(MemoryBroker())
    async with (
        running_worker(app, broker, groups=["payments"], instance_id="w-1", concurrency=2),
        open_test_engine(app, broker=broker) as engine,
        api(engine) as client,
    ):
        for i in range(5):
            await engine.start(pay, i, run_id=f"pay-{i}")
        await engine.start(spook, 1, run_id="spook")
        await trio.sleep_until(HEARTBEAT + 1.0)
        yield engine, client
        gate["open"].set()
        for i in range(5):
            assert await engine.result(f"pay-{i}") == i


async def test_the_fleet_api_shows_load_and_backlog_per_group(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with busy_fleet(open_test_engine) as (_, client):
        body = (await client.get("/api/fleet")).json()
        [worker] = body["workers"]
        assert worker["instance_id"] == "w-1"
        assert worker["held"] is False
        # From its last heartbeat to when the report was read (the
        # worker's wall clock here is fixed in the past).
        assert worker["heartbeat_age"] == max(0.0, body["read_at"] - worker["announced_at"])
        assert worker["load"] == {
            "in_flight": 2,
            "completed": 0,
            "failed": 0,
            "completed_per_minute": 0.0,
            "window": HEARTBEAT,
        }
        assert body["group_loads"] == [
            {
                "route": "ghost",
                "workers": [],
                "reporting": [],
                "in_flight": None,
                "completed_per_minute": None,
                "backlog": 1,
                "queues": ["ghost"],
            },
            {
                "route": "payments",
                "workers": ["w-1"],
                "reporting": ["w-1"],
                "in_flight": 2,
                "completed_per_minute": 0.0,
                "backlog": 3,
                "queues": ["payments"],
            },
        ]
        # Kept as it was: route -> live workers.
        assert body["groups"] == {"payments": ["w-1"]}


async def test_the_queues_api_shows_the_brokers_backlog(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with busy_fleet(open_test_engine) as (_, client):
        body = (await client.get("/api/queues")).json()
        assert body == {
            "queues": [],
            "group_backlogs": [
                {"route": "ghost", "backlog": 1, "queues": ["ghost"]},
                {"route": "payments", "backlog": 3, "queues": ["payments"]},
            ],
        }


async def test_the_fleet_and_queues_pages_show_load_and_backlog(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with busy_fleet(open_test_engine) as (_, client):
        text = (await client.get("/fleet")).text
        payments = text[text.index('data-group="payments"') :]
        assert re.search(
            r'1 <small>w-1</small></td>\s*<td class="num in-flight">2</td>\s*'
            r'<td class="num rate">0.0</td>\s*<td class="num backlog">3</td>',
            payments,
        )
        ghost = text[text.index('data-group="ghost"') : text.index('data-group="payments"')]
        assert '<span class="status status-failed">none</span>' in ghost
        assert '<td class="num backlog">1</td>' in ghost
        assert re.search(r'heartbeat <time class="ago" datetime="[^"]+"', text)
        assert '<span class="in-flight">2 in flight</span>' in text
        # Each workflow with the parameters its worker announces.
        assert '<td class="signature"><code>pay(amount: integer)</code></td>' in text
        queues = (await client.get("/queues")).text
        assert "Broker backlog" in queues
        assert re.search(r'data-group="payments">.*?<td class="num backlog">3</td>', queues, re.S)


async def test_without_a_backlog_the_pages_say_the_broker_cannot_tell(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    """A broker without the optional ``backlog`` shows "—" (and null)."""
    gate["open"] = trio.Event()
    gate["open"].set()
    broker = ServerLikeBroker(MemoryBroker())
    async with (
        running_worker(app, broker, groups=["payments"], instance_id="w-1"),
        open_test_engine(app, broker=broker) as engine,
        api(engine) as client,
    ):
        body = (await client.get("/api/queues")).json()
        assert [b["backlog"] for b in body["group_backlogs"]] == [None, None]
        assert '<td class="num backlog">—</td>' in (await client.get("/fleet")).text
