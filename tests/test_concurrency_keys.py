"""Concurrency keys: at most ``max_concurrent`` runs per key execute at once,
fleet-wide; the others wait in start order and are admitted the moment a
slot frees (see `_admission`)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from trio_durable._base._records import QueueDepth
from trio_durable._features.flow_control import _admission as admission
from trio_durable._stores._base import Store
from trio_durable._stores._ops import UpdateRun
from trio_durable.stores import QUEUE_SLOT, RunRecord

app = td.App("keys")

inside: dict[str, int] = defaultdict(int)
peak: dict[str, int] = defaultdict(int)
entered: dict[str, list[int]] = defaultdict(list)
entered_at: dict[int, float] = {}
HOLD = 10.0


def reset_counts() -> None:
    """Forget what `hold` counted (module state, shared with every test
    that imports this module's scenarios)."""
    inside.clear()
    peak.clear()
    entered.clear()
    entered_at.clear()


@pytest.fixture(autouse=True)
def _reset() -> None:
    reset_counts()


@app.step()
async def hold(key: str, i: int, seconds: float) -> int:
    """Counts in and out: the most runs of one key inside at once."""
    inside[key] += 1
    peak[key] = max(peak[key], inside[key])
    entered[key].append(i)
    entered_at[i] = trio.current_time()
    try:
        await trio.sleep(seconds)
    finally:
        inside[key] -= 1
    return i


@app.workflow(concurrency_key=lambda key, i, seconds=HOLD: key, max_concurrent=2)
async def limited(ctx: td.Context, key: str, i: int, seconds: float = HOLD) -> int:
    return await ctx.step(hold, key, i, seconds)


@app.workflow(concurrency_key=lambda key, i, seconds=HOLD: key)
async def limited_one(ctx: td.Context, key: str, i: int, seconds: float = HOLD) -> int:
    return await ctx.step(hold, key, i, seconds)


@app.workflow(concurrency_key=lambda key, i: key)
async def failing(ctx: td.Context, key: str, i: int) -> int:
    await ctx.step(hold, key, i, HOLD)
    raise td.FatalError("boom", code="boom")


@app.workflow(concurrency_key=lambda key: key)
async def napper(ctx: td.Context, key: str) -> str:
    await ctx.sleep(HOLD)
    return "rested"


@app.workflow()
async def slow_handler(ctx: td.Context, failure: dict[str, Any]) -> str:
    await ctx.sleep(100)
    return "handled"


@app.workflow(concurrency_key=lambda key, i: key, on_error=[td.OnError(workflow="slow_handler")])
async def routed(ctx: td.Context, key: str, i: int) -> int:
    await ctx.step(hold, key, i, HOLD)
    raise td.FatalError("boom", code="boom")


@app.workflow()
async def parent(ctx: td.Context, key: str, n: int) -> list[int]:
    started = [await ctx.start_child(limited, key, 100 + i) for i in range(2)]
    one = await ctx.child(limited, key, 200)
    fan = await ctx.all(pair, [[key, 300 + i] for i in range(3)])
    assert len(started) == 2
    return [one, *fan]


@app.workflow()
async def fan_parent(ctx: td.Context, key: str) -> list[int]:
    return await ctx.all(pair, [[key, 300 + i] for i in range(5)])


@app.workflow(concurrency_key=lambda pair: pair[0], max_concurrent=2)
async def pair(ctx: td.Context, pair: list[Any]) -> int:
    return await ctx.step(hold, pair[0], pair[1], HOLD)


def bad_key(key: str) -> str:
    raise ValueError("no key for " + key)


@app.workflow(concurrency_key=bad_key)
async def badly_keyed(ctx: td.Context, key: str) -> None:
    return None


@app.workflow(concurrency_key=lambda key: 42)  # type: ignore[arg-type,return-value]
async def not_a_str(ctx: td.Context, key: str) -> None:
    return None


@app.workflow()
async def starts_badly(ctx: td.Context) -> str:
    try:
        await ctx.child(badly_keyed, "x")
    except td.InvalidArgumentsError as exc:
        return type(exc).__name__
    return "started"


async def admission_of(store: Store, run_id: str) -> RunRecord | None:
    found = [record for record in await store.get_records(run_id) if record.kind == "admission"]
    return found[0] if found else None


async def holds_slot(store: Store, run_id: str) -> bool:
    """Whether the run holds a slot as a whole run (the store's record)."""
    kinds = [record.kind for record in await store.get_records(run_id)]
    return QUEUE_SLOT in kinds


async def test_at_most_max_concurrent_runs_per_key_in_start_order(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        handles = [await engine.start(limited, "k", i) for i in range(6)]
        other = await engine.start(limited, "other", 99)
        assert [await h.result() for h in handles] == list(range(6))
        assert await other.result() == 99
    assert peak == {"k": 2, "other": 1}
    assert sorted(entered["k"]) == list(range(6))
    # Two at a time, each admitted the moment a slot frees.
    assert [entered_at[i] for i in range(6)] == [0.0, 0.0, HOLD, HOLD, 2 * HOLD, 2 * HOLD]
    assert entered_at[99] == 0.0
    assert await store.queue_depths() == []


async def test_a_waiting_run_is_visible_and_its_queue_counted(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        handles = [await engine.start(limited, "k", i) for i in range(3)]
        await trio.sleep(1)
        waiting = await engine.get(handles[2].id)
        assert waiting.status == "suspended"
        cp = await admission_of(store, handles[2].id)
        assert cp is not None
        assert cp.status == "pending"
        assert cp.error is None
        assert not await holds_slot(store, handles[2].id)
        held = await admission_of(store, handles[0].id)
        assert held is not None
        assert held.status == "pending"
        assert await holds_slot(store, handles[0].id)
        assert await store.queue_depths() == [
            QueueDepth(queue="wf:limited:k", admitted=2, waiting=1)
        ]
        await engine.drain()
        done = await admission_of(store, handles[0].id)
        assert done is not None
        assert done.status == "completed"
        assert await store.queue_depths() == []


async def test_cancelling_a_waiting_run_frees_nothing_it_does_not_hold(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        handles = [await engine.start(limited, "k", i) for i in range(4)]
        await trio.sleep(1)
        await engine.cancel(handles[2].id)
        with pytest.raises(td.RunCancelled):
            await handles[2].result()
        cp = await admission_of(store, handles[2].id)
        assert cp is not None
        assert cp.status == "failed"
        assert cp.error is not None
        assert cp.error.code == "not_admitted"
        # The two holders still hold: the cancel let nobody in early.
        await trio.sleep(1)
        assert inside["k"] == 2
        assert entered["k"] == [0, 1]
        assert await handles[3].result() == 3
    assert entered["k"] == [0, 1, 3]
    assert entered_at[3] == HOLD
    assert peak["k"] == 2


async def test_every_end_gives_the_slot_back(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        first = await engine.start(failing, "f", 1)
        second = await engine.start(failing, "f", 2)
        with pytest.raises(td.RunFailed):
            await first.result()
        with pytest.raises(td.RunFailed):
            await second.result()
        assert entered_at == {1: 0.0, 2: HOLD}

        # A holder cancelled mid-body gives its slot to the next in line.
        t0 = trio.current_time()
        held = await engine.start(limited, "c", 10, 100.0)
        held2 = await engine.start(limited, "c", 11, 100.0)
        queued = await engine.start(limited, "c", 12)
        await trio.sleep(5)
        await engine.cancel(held.id)
        assert await queued.result() == 12
        assert entered_at[12] == t0 + 5.0
        await engine.cancel(held2.id)
        await engine.drain()
    assert await store.queue_depths() == []


async def test_a_dead_run_gives_the_slot_back(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, max_recoveries=3) as engine:
        holder = await engine.start(napper, "d")
        waiter = await engine.start(napper, "d")
        await trio.sleep(1)
        # As if taken over from dead engines too often: its next turn ends it dead.
        await store.apply([UpdateRun(holder.id, {"recoveries": 4})])
        with pytest.raises(td.RunFailed, match="taken over"):
            await holder.result()
        assert await waiter.result() == "rested"
        assert trio.current_time() == 2 * HOLD
        assert await store.queue_depths() == []


async def test_a_run_handed_to_its_on_error_handler_gives_the_slot_back(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        first = await engine.start(routed, "h", 1)
        second = await engine.start(routed, "h", 2)
        assert await engine.result(first.id) == "handled"
        assert await engine.result(second.id) == "handled"
    # The second ran as soon as the first handed off, not once its
    # handler ended.
    assert entered_at == {1: 0.0, 2: HOLD}


async def test_a_retried_run_asks_for_a_slot_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        failed = await engine.start(failing, "r", 1)
        with pytest.raises(td.RunFailed):
            await failed.result()
        blocker = await engine.start(failing, "r", 2)
        await trio.sleep(1)
        await engine.retry(failed.id)
        await trio.sleep(1)
        cp = await admission_of(store, failed.id)
        assert cp is not None
        assert cp.status == "pending"
        assert not await holds_slot(store, failed.id)
        with pytest.raises(td.RunFailed):
            await blocker.result()
        with pytest.raises(td.RunFailed):
            await failed.result()
        # The retry's body (its step recorded, so not run again) ran only
        # once the blocker ended.
        ended = {run.id: run.updated_at for run in await store.list_runs()}
        assert ended[failed.id] == ended[blocker.id] == WALL_START + 2 * HOLD
    assert entered["r"] == [1, 2]


async def test_children_and_fans_wait_for_their_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        assert await (await engine.start(parent, "p", 0)).result() == [200, 300, 301, 302]
        await engine.drain()
        assert await (await engine.start(fan_parent, "q")).result() == [300 + i for i in range(5)]
    assert peak == {"p": 2, "q": 2}
    assert sorted(entered["p"]) == [100, 101, 200, 300, 301, 302]


async def test_a_client_start_waits_too_with_and_without_the_app(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with (
        open_test_engine(app, store=store) as engine,
        td.open_client(store, app=app, wall_clock=fixed_wall) as typed,
        td.open_client(store, wall_clock=fixed_wall) as untyped,
    ):
        # One every 10 ms: started by name, a run takes its place in line
        # at its first turn, by the time it was started.
        a = await typed.start(limited, "c", 1)
        await trio.sleep(0.01)
        b = await untyped.start("limited", "c", 2)
        await trio.sleep(0.01)
        c = await typed.start(limited, "c", 3)
        await trio.sleep(0.01)
        d = await untyped.start("limited", "c", 4)
        assert [await engine.result(h.id) for h in (a, b, c, d)] == [1, 2, 3, 4]
        cp = await admission_of(store, b.id)
        assert cp is not None
        assert cp.status == "completed"
    assert peak["c"] == 2
    assert entered_at[1] <= entered_at[2] < entered_at[3] <= entered_at[4]


async def test_a_bad_key_function_refuses_the_start_and_writes_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with (
        open_test_engine(app, store=store) as engine,
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        with pytest.raises(td.InvalidArgumentsError, match="raised ValueError"):
            await engine.start(badly_keyed, "x")
        with pytest.raises(td.InvalidArgumentsError, match="not a str"):
            await engine.start(not_a_str, "x")
        with pytest.raises(td.InvalidArgumentsError):
            await client.start(badly_keyed, "x")
        assert await store.list_runs() == []
        # In a body, the child is refused where it is started.
        assert await (await engine.start(starts_badly)).result() == "InvalidArgumentsError"
        assert [run.workflow for run in await store.list_runs()] == ["starts_badly"]
        # Started by name, the engine computes the key: the run fails.
        async with td.open_client(store, wall_clock=fixed_wall) as untyped:
            run = await untyped.start("badly_keyed", "x")
        with pytest.raises(td.RunFailed, match="raised ValueError"):
            await engine.result(run.id)


async def test_a_lost_wake_is_recovered_by_the_next_look(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    # The release's write applies, but nobody is woken for it.
    monkeypatch.setattr(admission, "let_in", lambda rt, ops, results: None)
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, blocked_recheck=4.0) as engine:
        handles = [await engine.start(limited, "k", i, 12.0) for i in range(3)]
        assert [await h.result() for h in handles] == [0, 1, 2]
    # Its first look (5 s after its start) found no slot; its next look,
    # after as long as it had waited (5 s, more than blocked_recheck), at
    # 10 s, neither; the slot freed at 12 s; the look at 20 s let it in.
    assert entered_at[2] == 20.0


async def test_a_key_limit_holds_with_100_starts_on_two_engines(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    await key_limit_across_engines(f"sqlite:///{tmp_path / 'keys.db'}")


async def key_limit_across_engines(
    url: str,
    *,
    workflow: td.Workflow[[str, int, float], int] = limited,
    runs: int = 100,
    limit: int = 2,
    hold: float = 1.0,
) -> None:
    """``runs`` starts of ``workflow`` (``limit`` per key) over two keys and
    two engines: per key, each start awaited before the next (from engines a
    and b in turn), the two keys' starts side by side, while the first runs
    hold their slots (``hold`` seconds each). Per key, never more than
    ``limit`` inside at once, all complete, admitted in start order: the
    promise holds for starts that do not overlap (docs/concurrency-keys.md),
    and of two overlapping starts either may stand first in line."""
    # An autouse fixture of this module does not reach the modules that
    # import this scenario.
    reset_counts()
    async with (
        td.open_store(url) as store,
        td.open_engine(app, store=store, engine_id="a", seed=1, wall_clock=fixed_wall) as a,
        td.open_engine(app, store=store, engine_id="b", seed=2, wall_clock=fixed_wall) as b,
    ):
        ids: list[str] = [""] * runs

        async def start_key(key: int) -> None:
            for i in range(key, runs, 2):
                engine = (a, b)[i // 2 % 2]
                ids[i] = (await engine.start(workflow, f"key{key}", i, hold)).id

        async with trio.open_nursery() as nursery:
            for key in (0, 1):
                nursery.start_soon(start_key, key)
        results = [await (a, b)[i % 3 % 2].result(ids[i]) for i in range(runs)]
        assert results == list(range(runs))
        assert await store.queue_depths() == []
        created = {run.id: run.created_at for run in await store.list_runs()}
    assert peak == {"key0": limit, "key1": limit}
    for key in (0, 1):
        starts = list(range(key, runs, 2))
        order = entered[f"key{key}"]
        assert sorted(order) == starts
        if limit == 1:
            assert order == starts
        # Admitted in start order (runs let in at one instant enter their
        # bodies in either order).
        times = [entered_at[i] for i in starts]
        assert times == sorted(times)
    assert min(created.values()) >= WALL_START
