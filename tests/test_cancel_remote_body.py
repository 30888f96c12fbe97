"""A remote workflow's body (decided on workers) gets its cancellation too:
a worker replays it to deliver ``td.Cancelled``, runs its cleanup in
``ctx.shield()`` (local steps there, waits carried out by the engine), then
the undos if asked, and the run ends ``cancelled``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall, shared_store

app = td.App("cancel-remote-body")

done: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    done.clear()
    yield
    done.clear()


@app.step()
async def reserve(x: int) -> int:
    done.append(f"reserve {x}")
    return x


@app.step()
async def unreserve(x: int) -> None:
    done.append(f"unreserve {x}")


@app.step()
async def release(x: int) -> None:
    done.append(f"release {x}")


@app.step()
async def notify(x: int) -> None:
    done.append(f"notify {x}")


@app.step(group="payments")
async def charge(x: int) -> int:
    done.append(f"charge {x}")
    return x


@app.workflow(group="deciders")
async def booking(ctx: td.Context, x: int) -> str:
    await ctx.step(reserve, x, compensate=unreserve)
    try:
        await ctx.wait_signal("confirm")
    except td.Cancelled as exc:
        done.append(f"cancelled at {exc.seq}")
        with ctx.shield():
            await ctx.step(release, x)
            await ctx.sleep(30)
            await ctx.step(notify, x)
        raise
    return "confirmed"


@app.workflow(group="deciders")
async def asks(ctx: td.Context, x: int) -> str:
    try:
        await ctx.step(charge, x)
    except td.Cancelled:
        with ctx.shield():
            if await ctx.wait_signal("refund?") == "yes":
                await ctx.step(charge, -x)
        raise
    return "charged"


@app.workflow(group="deciders")
async def careless(ctx: td.Context, x: int) -> str:
    await ctx.step(reserve, x, compensate=unreserve)
    await ctx.sleep(3600)
    return "slept"


@asynccontextmanager
async def fleet(
    store: td.Store | str = "memory://",
    *,
    broker: td.MemoryBroker | None = None,
    groups: tuple[str, ...] = ("deciders", "payments"),
    engine_id: str = "engine",
) -> AsyncIterator[td.Engine]:
    """An engine and, unless ``groups`` is empty, a worker of ``groups``."""
    broker = td.MemoryBroker() if broker is None else broker
    async with td.open_engine(
        app, store=store, broker=broker, seed=0, wall_clock=fixed_wall, engine_id=engine_id
    ) as engine:
        if not groups:
            yield engine
            return
        async with worker(broker, *groups):
            yield engine


def worker(broker: td.MemoryBroker, *groups: str) -> AbstractAsyncContextManager[td.Worker]:
    return td.open_worker(app, broker=broker, groups=list(groups), seed=1, wall_clock=fixed_wall)


async def _markers(engine: td.Engine, run_id: str) -> list[tuple[str, str | None]]:
    return [
        (r.kind, r.output)
        for r in await engine.store.get_records(run_id)
        if r.kind == "cancelled_at"
    ]


async def test_the_workers_run_the_cleanup_and_the_engine_its_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fleet() as engine:
        await engine.start(booking, 1, run_id="b")
        await engine.drain()
        await engine.cancel("b", compensate=True)
        await engine.drain()
        # Released on a worker, now waiting for the cleanup's timer.
        assert done == ["reserve 1", "cancelled at 2", "release 1"]
        assert (await engine.get("b")).status == "suspended"
        with pytest.raises(td.RunCancelled):
            await engine.result("b")
        markers = await _markers(engine, "b")
        names = [(cp.seq, cp.name, cp.status) for cp in await engine.store.get_checkpoints("b")]
    # Each decision replays the body, which sees its cancellation again.
    assert [d for d in done if not d.startswith("cancelled at")] == [
        "reserve 1",
        "release 1",
        "notify 1",
        "unreserve 1",
    ]
    assert markers == [("cancelled_at", "2")]
    assert names[:5] == [
        (-1, "unreserve", "completed"),
        (1, "reserve", "completed"),
        (2, "confirm", "pending"),
        (3, "release", "completed"),
        (4, "sleep", "completed"),
    ]


async def test_a_cleanup_waiting_for_a_signal_runs_a_remote_step_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    # No worker of the payments group yet: the charge stays out.
    async with fleet(broker=broker, groups=("deciders",)) as engine:
        await engine.start(asks, 5, run_id="a")
        await engine.drain()
        await engine.cancel("a")
        await engine.drain()
        # Cancelled at the charge, the cleanup waits for the signal.
        assert (await engine.get("a")).status == "suspended"
        await engine.signal("a", "refund?", "yes")
        await engine.drain()
        assert done == []
        async with worker(broker, "payments"):
            with pytest.raises(td.RunCancelled):
                await engine.result("a")
            await engine.drain()
    # The first charge ran once its worker came, and so did the refund.
    assert sorted(done) == ["charge -5", "charge 5"]


async def test_a_cancelled_run_waiting_for_a_worker_takes_no_turns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with fleet(broker=broker, groups=()) as engine:
        async with worker(broker, "deciders"):
            await engine.start(careless, 6, run_id="w")
            await engine.drain()
        # The workers are gone: the cancel's task waits for one.
        await engine.cancel("w", compensate=True)
        await engine.drain()
        assert (await engine.get("w")).status == "suspended"
        turns = engine.statistics().turns
        await trio.sleep(600)
        assert engine.statistics().turns == turns
        async with worker(broker, "deciders"):
            with pytest.raises(td.RunCancelled):
                await engine.result("w")
    assert done == ["reserve 6", "unreserve 6"]


async def test_a_body_that_does_not_catch_it_ends_with_its_undos(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fleet() as engine:
        await engine.start(careless, 2, run_id="c")
        await engine.drain()
        await engine.cancel("c", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("c")
        kinds = [(record.kind, record.output) for record in await engine.store.get_records("c")]
    assert done == ["reserve 2", "unreserve 2"]
    # The record that kept it cancelling while a worker answered; the body
    # never cleaned up, so no delivery seq was recorded.
    assert ("cancel_sent", None) in kinds
    assert not any(kind == "cancelled_at" for kind, _ in kinds)


async def test_a_run_cancelled_without_compensation_before_its_body_ran_ends_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fleet(groups=()) as engine:
        await engine.start(careless, 3, run_id="n")
        await engine.cancel("n")
        with pytest.raises(td.RunCancelled):
            await engine.result("n")
    assert done == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_another_engine_finishes_the_cleanup_after_the_first_closed(
    kind: str, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with shared_store(kind, tmp_path) as store:
        async with fleet(store, engine_id="first") as first:
            await first.start(booking, 4, run_id="x")
            await first.drain()
            await first.cancel("x")
            await first.drain()
            assert (await first.get("x")).status == "suspended"
        async with fleet(store, engine_id="second") as second:
            with pytest.raises(td.RunCancelled):
                await second.result("x")
    assert [d for d in done if not d.startswith("cancelled at")] == [
        "reserve 4",
        "release 4",
        "notify 4",
    ]


async def test_a_retry_of_a_remote_run_that_was_cancelled_runs_it_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Retrying a remote workflow's run that ended cancelled (its cancel sent
    to a worker) from a seq runs its body again to its end: the record that
    kept it cancelling goes with the retry, or the retried run would be
    cancelled again at its first turn."""
    async with fleet() as engine:
        await engine.start(careless, 3, run_id="again")
        await engine.drain()
        await engine.cancel("again", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("again")
        assert ("cancel_sent", None) in [
            (record.kind, record.output) for record in await engine.store.get_records("again")
        ]
        await engine.retry("again", from_seq=1)
        assert await engine.result("again") == "slept"
        records = await engine.store.get_records("again")
        assert [record.kind for record in records] == ["decision"]
    assert done == ["reserve 3", "unreserve 3", "reserve 3"]
