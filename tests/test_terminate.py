"""`terminate` ends a run now: it ends ``terminated`` without compensation
or cleanup (unlike cancel), a turn of it in flight cannot bring it back, a
remote step's result that comes later changes nothing, a parent
awaiting it sees it failed with code ``terminated``, and the children a
cancel would cancel are cancelled, on the memory and SQLite stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, StoreEngineFactory, fixed_wall
from trio_durable._base._records import signal_token
from trio_durable._front._control import terminate_run

app = td.App("terminate")

done: list[str] = []
hold: list[trio.Event] = []
entered: list[trio.Event] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    for items in (done, hold, entered):
        items.clear()
    yield
    done.clear()


@app.step()
async def unreserve(x: int) -> None:
    done.append("unreserve")


@app.step()
async def reserve(x: int) -> str:
    done.append("reserve")
    return f"hold-{x}"


@app.step()
async def release(x: int) -> None:
    done.append("release")


@app.step()
async def slow_local(x: int) -> int:
    entered[0].set()
    await hold[0].wait()
    done.append("slow_local")
    return x


@app.step(group="far", retry=td.Retry(attempts=1))
async def far(x: int) -> int:
    entered[0].set()
    await hold[0].wait()
    done.append("far")
    return x


@app.workflow()
async def booking(ctx: td.Context, x: int) -> str:
    await ctx.step(reserve, x, compensate=unreserve)
    try:
        await ctx.wait_signal("confirm")
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(release, x)
        raise
    return "confirmed"


@app.workflow()
async def cleanup_waits(ctx: td.Context, x: int) -> str:
    try:
        await ctx.wait_signal("confirm")
    except td.Cancelled:
        with ctx.shield():
            await ctx.sleep(3600)
            await ctx.step(release, x)
        raise
    return "confirmed"


@app.workflow()
async def two_steps(ctx: td.Context, x: int) -> str:
    await ctx.step(slow_local, x)
    await ctx.step(release, x)
    return "both"


@app.workflow()
async def remote(ctx: td.Context, x: int) -> int:
    return await ctx.step(far, x)


@app.workflow()
async def parent(ctx: td.Context, x: int) -> str:
    try:
        await ctx.child(booking, x)
    except td.RunFailed as exc:
        return f"child {exc.code}: {exc.message}"
    return "child completed"


async def test_terminate_runs_no_cleanup_and_no_compensation(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (store, engine):
        await engine.start(booking, 7, run_id="b")
        await engine.drain()
        await engine.terminate("b", reason="stuck for a week")
        with pytest.raises(td.RunTerminated) as raised:
            await engine.result("b")
        run = await engine.get("b")
        signal_waiters = await store.signal_waiter(signal_token("b", "confirm"))
    assert (raised.value.code, raised.value.message) == ("terminated", "stuck for a week")
    assert run.status == "terminated"
    assert run.error is not None
    assert run.error.code == "terminated"
    # Neither the body's cleanup nor the undo of its completed step ran.
    assert done == ["reserve"]
    assert signal_waiters is None


async def test_terminate_ends_a_cleanup_that_a_cancel_began(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (_, engine):
        await engine.start(cleanup_waits, 7, run_id="c")
        await engine.drain()
        await engine.cancel("c")
        await engine.drain()
        assert (await engine.get("c")).status == "suspended"
        await engine.terminate("c")
        with pytest.raises(td.RunTerminated, match="terminated"):
            await engine.result("c")
        await trio.sleep(7200)
        await engine.drain()
    assert done == []


async def test_an_ended_run_or_one_terminated_already_is_refused(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(booking, 7, run_id="b")
        await engine.drain()
        async with td.open_client(engine.store) as client:
            # Written without an announcement: no engine ends it yet.
            await terminate_run(engine.store, fixed_wall(), "b", None, None)
            with pytest.raises(td.InvalidRunStateError, match="being terminated already"):
                await client.terminate("b")
        with pytest.raises(td.RunTerminated):
            await engine.result("b")
        with pytest.raises(td.InvalidRunStateError, match="is terminated"):
            await engine.terminate("b")
        with pytest.raises(td.RunNotFoundError):
            await engine.terminate("nobody")
        with pytest.raises(td.UsageError, match="reason is a string"):
            await engine.terminate("b", reason=3)  # type: ignore[arg-type]


async def test_a_turn_in_flight_elsewhere_cannot_bring_the_run_back(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    hold.append(trio.Event())
    entered.append(trio.Event())
    async with open_store_engine(app) as (store, engine):
        await engine.start(two_steps, 1, run_id="t")
        await entered[0].wait()
        # Written as another process would, without telling this engine:
        # its turn goes on, and its step ends after the terminate.
        await terminate_run(store, fixed_wall(), "t", "from elsewhere", None)
        hold[0].set()
        with pytest.raises(td.RunTerminated, match="from elsewhere"):
            await engine.result("t")
        await engine.drain()
        run = await engine.get("t")
        history = await engine.history("t")
    # Unwarned, the turn ran its body to the end; its write, which would
    # have completed the run, found it being terminated: it recorded the
    # steps that ran (as history) and nothing more.
    assert run.status == "terminated"
    assert run.output is None
    assert done == ["slow_local", "release"]
    assert [(e.name, e.status) for e in history.entries] == [
        ("slow_local", "completed"),
        ("release", "completed"),
    ]


async def test_a_remote_result_that_comes_later_changes_nothing(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    hold.append(trio.Event())
    entered.append(trio.Event())
    async with open_store_engine(app, broker=td.MemoryBroker(), serve=["far"]) as (store, engine):
        await engine.start(remote, 1, run_id="r")
        await entered[0].wait()
        await engine.terminate("r")
        with pytest.raises(td.RunTerminated):
            await engine.result("r")
        hold[0].set()
        await trio.testing.wait_all_tasks_blocked()
        await engine.drain()
        [step] = await store.get_checkpoints("r")
        run = await engine.get("r")
    # The result came, and changed nothing (as one for a cancelled run).
    assert done == ["far"]
    assert step.status == "pending"
    assert run.status == "terminated"


async def test_a_parent_sees_its_child_terminated_and_a_terminated_parent_cancels_it(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (_, engine):
        await engine.start(parent, 1, run_id="p")
        await engine.drain()
        await engine.terminate("p.child.1", reason="bad data")
        assert await engine.result("p") == "child terminated: bad data"

        await engine.start(parent, 2, run_id="q")
        await engine.drain()
        await engine.terminate("q")
        with pytest.raises(td.RunTerminated):
            await engine.result("q")
        # The awaited child is cancelled, and runs its own cleanup.
        with pytest.raises(td.RunCancelled):
            await engine.result("q.child.1")
    assert done == ["reserve", "reserve", "release"]


async def test_a_terminated_run_runs_again_from_a_seq(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(booking, 7, run_id="b")
        await engine.drain()
        await engine.terminate("b")
        with pytest.raises(td.RunTerminated):
            await engine.result("b")
        await engine.retry("b", from_seq=2)
        await engine.drain()
        assert (await engine.get("b")).status == "suspended"
        await engine.signal("b", "confirm")
        assert await engine.result("b") == "confirmed"
