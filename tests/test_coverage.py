"""An engine whose app sends tasks to a group no live worker serves says so
(`_kernel._coverage`): once at WARNING, 15 s of Trio's clock after it
opened (never sooner: workers announce within their heartbeat), again if
the group loses all its workers, at INFO when one comes; and
``/readyz`` stays 200 with the group named in its ``warnings``.

Under the autojump clock, with the memory broker (whose announcements go
with the process) and with `CountingBroker`, which announces as a server
does (heartbeats, no event when a worker dies)."""

from __future__ import annotations

import logging

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from counting_broker import CountingBroker
from trio_durable._front._health import Readiness, engine_readiness, http_face
from trio_durable._kernel._coverage import GRACE, LOOK_EVERY
from trio_durable._kernel._definitions import remote_groups

app = td.App("coverage")


@app.step(group="payments")
async def charge(amount: int) -> int:
    return amount


@app.step(group="mail")
async def notify(who: str) -> str:
    return who


@app.step()
async def local(x: int) -> int:
    return x


@app.workflow(group="deciders")
async def decided(ctx: td.Context, x: int) -> int:
    return x


@app.workflow()
async def checkout(ctx: td.Context, amount: int) -> int:
    return await ctx.step(charge, amount)


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [
        (record.levelname, record.getMessage())
        for record in caplog.records
        if "live worker serves the group" in record.getMessage()
    ]


def _no_worker(group: str, more: str = "") -> tuple[str, str]:
    return (
        "WARNING",
        f"no live worker serves the group {group!r}{more}: its tasks wait on the broker until"
        " a worker of it starts",
    )


def test_the_groups_are_the_remote_steps_and_remote_workflows_not_served() -> None:
    assert remote_groups(app, ()) == ("deciders", "mail", "payments")
    assert remote_groups(app, ("mail", "payments@tenant")) == ("deciders",)


async def test_a_group_without_workers_is_said_once_then_its_worker_is_seen(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_durable")
    broker = td.MemoryBroker()
    async with td.open_engine(app, broker=broker, serve=["deciders"]) as engine:
        start = trio.current_time()
        # Before the grace nothing is said: live workers may not have
        # announced themselves yet.
        assert await engine.groups_without_workers() == []
        await trio.sleep(GRACE - 1)
        assert await engine.groups_without_workers() == []
        assert _lines(caplog) == []
        await trio.sleep(1)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() - start == GRACE
        # The engine's own look, at the grace's end: one line per group.
        assert _lines(caplog) == [_no_worker("mail"), _no_worker("payments")]
        # Asked again and again (a probe every few seconds): no more lines.
        for _ in range(5):
            assert await engine.groups_without_workers() == ["mail", "payments"]
            await trio.sleep(10)
        assert len(_lines(caplog)) == 2
        # A worker of the group in a namespace serves it too.
        async with td.open_worker(app, broker=broker, groups=["payments@acme"]):
            assert await engine.groups_without_workers() == ["mail"]
            assert _lines(caplog)[2:] == [("INFO", "a live worker serves the group 'payments' now")]
        await trio.sleep(1)  # the dispatcher's cache of the announcements
        assert await engine.groups_without_workers() == ["mail", "payments"]
        assert _lines(caplog)[3:] == [_no_worker("payments", " any more")]


async def test_readyz_stays_ready_and_names_the_groups_without_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with td.open_engine(app, broker=broker, serve=["deciders", "mail"]) as engine:
        readiness = engine_readiness(engine)
        face = http_face(readiness, engine.metrics)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=face), base_url="http://engine"
        ) as http:
            answer = await http.get("/readyz")
            assert (answer.status_code, answer.json()) == (200, {"status": "ready"})
            await trio.sleep(GRACE)
            answer = await http.get("/readyz")
            assert (answer.status_code, answer.json()) == (
                200,
                {
                    "status": "ready",
                    "warnings": [
                        "no live worker serves the group 'payments': its tasks wait on the"
                        " broker until one starts"
                    ],
                },
            )
            async with td.open_worker(app, broker=broker, groups=["payments"]):
                await trio.sleep(1)  # the dispatcher's cache of the announcements
                answer = await http.get("/readyz")
                assert (answer.status_code, answer.json()) == (200, {"status": "ready"})
            # Draining wins over everything.
            readiness.draining = True
            answer = await http.get("/readyz")
            assert answer.status_code == 503
            assert answer.json()["reason"] == "draining: the process stops taking work"


async def test_an_engine_that_serves_every_group_watches_nothing(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = CountingBroker()
    async with td.open_engine(app, broker=broker, serve=["deciders", "mail", "payments"]) as engine:
        # (Opening, the engine reads them once, for its on-error routes.)
        reads = broker.reads
        await trio.sleep(10 * GRACE)
        assert await engine.groups_without_workers() == []
        assert broker.reads == reads
    assert _lines(caplog) == []


async def test_with_heartbeats_the_engine_looks_again_and_sees_a_worker_lapse(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # CountingBroker says nothing of heartbeats: as a server's, its
    # announcements lapse unless renewed, and nothing says a worker died.
    caplog.set_level(logging.INFO, logger="trio_durable")
    broker = CountingBroker()
    async with td.open_engine(app, broker=broker, serve=["deciders", "mail"]):
        start = trio.current_time()
        # A worker that announced once and died: its announcement lapses
        # 40 s on, and no event says so.
        await broker.announce(
            td.WorkerDescriptor(instance_id="gone", app="coverage", groups=("payments",)), 40.0
        )
        reads = broker.reads
        await trio.sleep(GRACE + 1)
        # Served at the first look: nothing to say.
        assert _lines(caplog) == []
        # Looks at 30 s (still served) and at 45 s (lapsed), asked by nobody.
        await trio.sleep(start + GRACE + 2 * LOOK_EVERY - trio.current_time())
        await trio.testing.wait_all_tasks_blocked()
        assert _lines(caplog) == [_no_worker("payments", " any more")]
        # One read of the announcements per look, no more.
        assert broker.reads - reads == 3
        await trio.sleep(10 * LOOK_EVERY)
        assert len(_lines(caplog)) == 1


async def test_a_broker_away_at_a_look_is_left_to_the_next(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    broker = CountingBroker()
    broker.down = True
    async with td.open_engine(app, broker=broker, serve=["deciders", "mail"]) as engine:
        await trio.sleep(GRACE + 1)
        assert _lines(caplog) == []
        with pytest.raises(td.BrokerUnavailable):
            await engine.groups_without_workers()
        broker.down = False
        await trio.sleep(LOOK_EVERY)
        assert _lines(caplog) == [_no_worker("payments")]


async def test_a_probe_that_fails_is_not_ready_and_warnings_are_not_asked() -> None:
    asked: list[str] = []

    async def probe() -> None:
        await trio.lowlevel.checkpoint()
        raise td.BrokerUnavailable("RabbitMQ: not connected; reconnecting")

    async def warnings() -> list[str]:
        asked.append("warnings")
        await trio.lowlevel.checkpoint()
        return ["never said"]

    assert await Readiness(probe, warnings).answer() == (
        503,
        {"status": "not ready", "reason": "RabbitMQ: not connected; reconnecting"},
    )
    assert asked == []
