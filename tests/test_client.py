"""The client (`open_client`): starting, reading, waiting for, signalling,
cancelling and retrying runs from outside the engine that runs them, and
the bad input it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
from conftest import fixed_wall

app = td.App("client")


@attrs.define(frozen=True)
class Order:
    sku: str
    qty: int


@app.workflow()
async def total(ctx: td.Context, order: Order, price: float) -> dict[str, Any]:
    await ctx.sleep(1)
    return {"sku": order.sku, "total": order.qty * price}


@app.workflow()
async def wait_go(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


@app.workflow()
async def boom(ctx: td.Context) -> None:
    raise td.FatalError("no", code="nope")


@app.workflow(name="versioned", version="1")
async def versioned_1(ctx: td.Context) -> str:
    return "v1"


@app.workflow(name="versioned", version="2")
async def versioned_2(ctx: td.Context) -> str:
    return "v2"


async def test_client_starts_by_name_without_app(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall),
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        handle = await client.start("total", {"sku": "a", "qty": 2}, 1.5, run_id="t1")
        assert handle.status == "pending"
        assert handle.lease_owner is None
        assert await handle.result() == {"sku": "a", "total": 3.0}
        assert (await client.get("t1")).status == "completed"
        # By name, the engine runs the version registered last and pins it.
        assert await (await client.start("versioned", run_id="v")).result() == "v2"
        assert (await client.get("v")).version == "2"


async def test_a_run_cancelled_before_it_ran_ends_as_the_version_it_would_have_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = td.MemoryStore()
    async with td.open_client(store, wall_clock=fixed_wall) as client:
        # Started by name and cancelled while no engine runs: pending, with
        # no version yet.
        await client.start("versioned", run_id="early")
        await client.cancel("early")
        assert (await client.get("early")).version == ""
    async with td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine:
        with pytest.raises(td.RunCancelled):
            await engine.result("early")
        ended = await engine.get("early")
        assert (ended.status, ended.version) == ("cancelled", "2")


async def test_client_with_app_checks_and_types(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall),
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        with pytest.raises(td.InvalidArgumentsError):
            await client.start(total, Order("a", 2))  # type: ignore[arg-type]
        with pytest.raises(td.UnknownWorkflowError):
            await client.start("nope")
        handle = await client.start(total, Order("a", 2), 2.0, run_id="t2")
        assert await handle.result() == {"sku": "a", "total": 4.0}
        assert await store.list_runs() == [await client.get("t2")]
        # Idempotent by run id.
        assert (await client.start(total, Order("a", 2), 2.0, run_id="t2")).id == "t2"
        with pytest.raises(td.RunConflictError):
            await client.start(wait_go, run_id="t2")


async def test_client_bad_input(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall),
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        for call in (
            client.get("missing"),
            client.result("missing"),
            client.signal("missing", "go"),
            client.cancel("missing"),
            client.retry("missing"),
        ):
            with pytest.raises(td.RunNotFoundError):
                await call
        done = await client.start("versioned", run_id="done")
        await done.result()
        with pytest.raises(td.InvalidRunStateError, match="takes no signals"):
            await client.signal("done", "go")
        with pytest.raises(td.InvalidRunStateError, match="cannot be cancelled"):
            await client.cancel("done")
        with pytest.raises(td.InvalidRunStateError, match="only failed or dead"):
            await client.retry("done")
        with pytest.raises(td.UsageError, match="broker"):
            await client.fleet()
        with pytest.raises(td.UsageError, match="broker"):
            await client.unserved_on_error_routes()
        with pytest.raises(td.RunNotFoundError):
            await client.get("done", namespace="other")
    with pytest.raises(trio.ClosedResourceError):
        await client.get("done")


async def test_client_retries_a_failed_run(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall),
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        handle = await client.start("boom", run_id="b")
        with pytest.raises(td.RunFailed) as failed:
            await handle.result()
        assert failed.value.code == "nope"
        run = await client.retry("b")
        assert run.status == "pending"
        with pytest.raises(td.RunFailed):
            await client.result("b")


async def test_client_fleet_with_a_broker() -> None:
    async with td.open_client("memory://", broker="memory://") as client:
        assert (await client.fleet()).workflows == {}
        assert await client.unserved_on_error_routes() == []


async def test_unreachable_store(tmp_path: Path) -> None:
    with pytest.raises(td.StoreError):
        async with td.open_client(f"sqlite:///{tmp_path}/missing/dir/x.db"):
            pass  # pragma: no cover
    url = "postgresql://someone:s3cret-pw@127.0.0.1:1/db?connect_timeout=2"
    with pytest.raises(td.StoreError) as failed:
        async with td.open_client(url):
            pass  # pragma: no cover
    assert "s3cret-pw" not in str(failed.value)
    assert "***" in str(failed.value)
    with pytest.raises(td.InvalidURLError):
        async with td.open_client("nope://x"):
            pass  # pragma: no cover
    with pytest.raises(td.UsageError):
        async with td.open_client("memory://", app="app"):  # type: ignore[arg-type]
            pass  # pragma: no cover


@app.step()
async def held(key: str) -> str:
    entered.set()
    await trio.sleep_forever()
    return key  # pragma: no cover


entered = trio.Event()


@app.workflow()
async def holding(ctx: td.Context) -> str:
    return await ctx.step(held, "k")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_client_signal_wakes_the_run_at_once_in_virtual_time(
    autojump_clock: trio.abc.Clock, kind: str, tmp_path: Path
) -> None:
    # Without the announcement the run would sleep until a reconcile pass
    # (60 s of virtual time) found it stalled.
    store: str | td.Store = (
        td.MemoryStore() if kind == "memory" else f"sqlite:///{tmp_path / 'w.db'}"
    )
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine,
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        await engine.start(wait_go, run_id="w")
        await engine.drain()
        await client.signal("w", "go", "now")
        assert await client.result("w") == "now"
        assert trio.current_time() == 0.0


async def test_a_client_cancel_cuts_the_turn_in_flight_short(
    autojump_clock: trio.abc.Clock,
) -> None:
    global entered
    entered = trio.Event()
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine,
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        await engine.start(holding, run_id="h")
        # The step holds the turn (and the lease) for good.
        await entered.wait()
        await client.cancel("h")
        with pytest.raises(td.RunCancelled):
            await client.result("h")
        assert trio.current_time() == 0.0


async def test_errors_in_the_block_come_out_unwrapped(tmp_path: Path) -> None:
    with pytest.raises(td.RunNotFoundError):
        async with td.open_client(f"sqlite:///{tmp_path / 'e.db'}") as client:
            await client.get("missing")


async def test_a_start_whose_id_exists_writes_nothing(tmp_path: Path) -> None:
    # The client announces each run it creates, for an engine to take at
    # once; a start that finds its id taken creates nothing, so it
    # announces nothing either, and the file stays byte-identical.
    path = tmp_path / "runs.db"
    async with td.open_client(f"sqlite:///{path}", wall_clock=fixed_wall) as client:
        first = await client.start("wait_go", run_id="once")
    before = path.read_bytes()
    async with td.open_client(f"sqlite:///{path}", wall_clock=fixed_wall) as client:
        again = await client.start("wait_go", run_id="once")
    assert path.read_bytes() == before
    assert (again.id, again.created_at) == ("once", first.created_at)
