"""Run streams: `Context.emit` appends to a run's durable stream, written
with the turn's checkpoints; `Engine.stream` and `Client.stream` give its
values in order, once per offset, wait for more without polling, and end
when the run ends. A replay, on this engine or another after a crash, does
not write an offset again; pruning a run deletes its stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from trio_durable._base._records import StoredValue
from trio_durable._features.messages._streams import STREAM_HEAD, stream_scope
from trio_durable._front._engine import crash

app = td.App("streams")


@attrs.define(frozen=True)
class Progress:
    done: int
    of: int


@app.step()
async def work(item: int) -> int:
    return item * 10


@app.workflow()
async def progress(ctx: td.Context, count: int) -> str:
    for item in range(count):
        result = await ctx.step(work, item)
        ctx.emit(Progress(result, count))
        await ctx.sleep(1)  # each emit commits with this turn
    return "done"


@app.workflow()
async def tokens(ctx: td.Context, count: int) -> int:
    for i in range(count):
        ctx.emit(f"t{i}")
        if i == count // 2:
            await ctx.sleep(5)  # half in the first turn, half in the second
    return count


@app.workflow()
async def chatty(ctx: td.Context) -> str:
    ctx.emit("hello")
    reply = await ctx.wait_signal("reply")
    ctx.emit(reply)
    return "bye"


async def collect(stream: AsyncIterator[tuple[int, Any]]) -> list[tuple[int, Any]]:
    return [item async for item in stream]


@asynccontextmanager
async def one_store(kind: str, tmp_path: Path) -> AsyncIterator[str | td.Store]:
    if kind == "memory":
        yield td.MemoryStore()
    else:
        yield f"sqlite:///{tmp_path / 'streams.db'}"


STORES = ["memory", "sqlite"]


@pytest.mark.parametrize("kind", STORES)
async def test_a_reader_gets_every_value_in_order_and_ends_with_the_run(
    kind: str,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    async with one_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        run = await engine.start(progress, 3, run_id="p-1")
        items = await collect(engine.stream(run.id))
        assert items == [
            (0, {"done": 0, "of": 3}),
            (1, {"done": 10, "of": 3}),
            (2, {"done": 20, "of": 3}),
        ]
        assert (await engine.get(run.id)).status == "completed"
        # Read again after the end: the whole stream, then the end at once.
        assert await collect(engine.stream(run.id)) == items
        assert await collect(engine.stream(run.id, from_offset=2)) == items[2:]
        assert await collect(engine.stream(run.id, from_offset=7)) == []
        # Each value was written once, by the turn that emitted it.
        rows = await engine.store.list_values(stream_scope(run.id))
        assert [(row.key, row.version) for row in rows] == [
            ("000000000000", 1),
            ("000000000001", 1),
            ("000000000002", 1),
        ]
        [head] = [r for r in await engine.store.get_records(run.id) if r.kind == STREAM_HEAD]
        assert (head.kind, head.status, head.output) == ("stream", "completed", "3")


@pytest.mark.parametrize("kind", STORES)
async def test_values_are_read_as_each_turn_commits_them(
    kind: str,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    async with (
        one_store(kind, tmp_path) as store,
        open_test_engine(app, store=store) as engine,
        td.open_client(engine.store, wall_clock=fixed_wall) as client,
    ):
        run = await engine.start(chatty, run_id="c-1")
        seen: list[tuple[int, Any, float]] = []
        async with trio.open_nursery() as nursery:

            async def read(reader: td.Engine | td.Client) -> None:
                async for offset, value in reader.stream(run.id):
                    seen.append((offset, value, trio.current_time()))

            nursery.start_soon(read, engine)
            nursery.start_soon(read, client)
            await trio.testing.wait_all_tasks_blocked()
            # The first value arrived while the run waits for its signal.
            assert sorted(seen) == [(0, "hello", 0.0), (0, "hello", 0.0)]
            await trio.sleep(60)
            await client.signal(run.id, "reply", "hi")
        assert sorted(seen) == [
            (0, "hello", 0.0),
            (0, "hello", 0.0),
            (1, "hi", 60.0),
            (1, "hi", 60.0),
        ]
        assert await client.result(run.id) == "bye"


@pytest.mark.parametrize("kind", STORES)
async def test_a_thousand_small_emits_arrive_once_each(
    kind: str,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    async with one_store(kind, tmp_path) as store, open_test_engine(app, store=store) as engine:
        run = await engine.start(tokens, 1000, run_id="t-1")
        items = await collect(engine.stream(run.id))
        assert items == [(i, f"t{i}") for i in range(1000)]
        assert await engine.result(run.id) == 1000
        rows: list[StoredValue] = []
        while page := await engine.store.list_values(
            stream_scope(run.id), after=rows[-1].key if rows else None, limit=1000
        ):
            rows.extend(page)
        # The second turn replayed the first 501 emits and wrote none again.
        assert len(rows) == 1000
        assert {row.version for row in rows} == {1}


async def test_a_reader_that_stops_resumes_from_its_last_offset(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with td.open_client(td.MemoryStore(), wall_clock=fixed_wall) as client:
        async with open_test_engine(app, store=client.store) as engine:
            run = await engine.start(progress, 5, run_id="p-2")
            first: list[tuple[int, Any]] = []
            async for offset, value in client.stream(run.id):
                first.append((offset, value["done"]))
                if offset == 1:
                    break  # the reader goes away mid-run
            rest = [(o, v["done"]) async for o, v in client.stream(run.id, from_offset=2)]
        assert first + rest == [(i, i * 10) for i in range(5)]


async def test_a_crashed_engine_s_replacement_writes_no_offset_twice(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    """Two engines on one SQLite file: the first dies in the middle of a turn
    that emitted; the second replays the run and each offset is written once."""
    crash_app = td.App("crashing")
    entered = trio.Event()
    hang = trio.Event()

    @crash_app.step()
    async def slow(i: int) -> int:
        if i == 1 and not hang.is_set():
            entered.set()
            await trio.sleep_forever()  # the process dies here
        return i

    @crash_app.workflow()
    async def emitter(ctx: td.Context) -> str:
        ctx.emit("a")
        ctx.emit("b")
        await ctx.sleep(1)
        ctx.emit("c")
        await ctx.step(slow, 1)  # the first engine's turn never commits
        ctx.emit("d")
        return "ok"

    store = f"sqlite:///{tmp_path / 'crash.db'}"
    async with td.open_client(store, wall_clock=fixed_wall) as client:
        seen: list[tuple[int, Any]] = []
        async with trio.open_nursery() as nursery:
            async with open_test_engine(crash_app, store=store, seed=1) as first:
                run = await first.start(emitter, run_id="e-1")

                async def read() -> None:
                    seen.extend([item async for item in client.stream(run.id)])

                nursery.start_soon(read)
                await entered.wait()
                crash(first)
                hang.set()
            async with open_test_engine(crash_app, store=store, seed=2) as second:
                assert await second.result(run.id) == "ok"
        assert seen == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
        rows = await client.store.list_values(stream_scope(run.id))
        assert [(row.value, row.version) for row in rows] == [
            ('"a"', 1),
            ('"b"', 1),
            ('"c"', 1),
            ('"d"', 1),
        ]


async def test_pruning_a_run_deletes_its_stream(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, store=td.MemoryStore()) as engine:
        done = await engine.start(progress, 2, run_id="p-3")
        await engine.result(done.id)
        kept = await engine.start(chatty, run_id="c-3")
        await trio.sleep(1)
        assert await engine.prune(td.Retention(completed=0)) == 1
        assert await engine.store.list_values(stream_scope(done.id)) == []
        assert len(await engine.store.list_values(stream_scope(kept.id))) == 1
        with pytest.raises(td.RunNotFoundError):
            await collect(engine.stream(done.id))


async def test_bad_input_is_refused_before_anything_is_read_or_written(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    bad = td.App("bad")

    @bad.step()
    async def inner() -> None:
        td.current_step()
        context.emit("from a step")

    @bad.workflow()
    async def in_step(ctx: td.Context) -> None:
        global context
        context = ctx
        await ctx.step(inner)

    @bad.workflow()
    async def unserializable(ctx: td.Context) -> None:
        ctx.emit(object())

    async with open_test_engine(bad, store=td.MemoryStore()) as engine:
        for offset in (-1, 1.5, True, "0"):
            with pytest.raises(td.UsageError, match="from_offset"):
                engine.stream("nobody", from_offset=offset)  # type: ignore[arg-type]
        with pytest.raises(td.RunNotFoundError):
            await collect(engine.stream("nobody"))
        run = await engine.start(unserializable)
        with pytest.raises(td.RunFailed) as failed:
            await engine.result(run.id)
        assert "serializ" in str(failed.value).lower()
        run = await engine.start(in_step)
        with pytest.raises(td.RunFailed, match="inside step"):
            await engine.result(run.id)
        assert await engine.store.list_values(stream_scope(run.id)) == []


context: td.Context


async def test_a_waiting_reader_reads_the_store_only_when_told(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    """A reader waiting for a run that emits once an hour reads the store
    once per emit and once at the end, not every so often meanwhile."""
    hourly = td.App("hourly")

    @hourly.workflow()
    async def slow(ctx: td.Context) -> None:
        for hour in range(3):
            await ctx.sleep(3600)
            ctx.emit(hour)

    store = f"sqlite:///{tmp_path / 'hourly.db'}"
    async with (
        open_test_engine(hourly, store=store) as engine,
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        reads: list[float] = []
        list_values = client.store.list_values

        async def counted(*args: Any, **kwargs: Any) -> list[StoredValue]:
            reads.append(trio.current_time())
            return await list_values(*args, **kwargs)

        client.store.list_values = counted  # type: ignore[method-assign]
        run = await engine.start(slow, run_id="h-1")
        items = await collect(client.stream(run.id))
    assert items == [(0, 0), (1, 1), (2, 2)]
    # At the start, then once per emit (the run's end is the third emit's
    # turn): never while nothing changed.
    assert reads == [0.0, 3600.0, 7200.0, 10800.0]


async def test_a_retried_run_goes_on_with_its_stream(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky = td.App("flaky")
    broken = [True]

    @flaky.step()
    async def check() -> None:
        if broken[0]:
            raise td.FatalError("broken")

    @flaky.workflow()
    async def steps(ctx: td.Context) -> str:
        ctx.emit("before")
        await ctx.step(check)
        ctx.emit("after")
        return "ok"

    async with open_test_engine(flaky, store=td.MemoryStore()) as engine:
        run = await engine.start(steps, run_id="f-1")
        assert await collect(engine.stream(run.id)) == [(0, "before")]
        broken[0] = False
        await engine.retry(run.id)
        assert await collect(engine.stream(run.id, from_offset=1)) == [(1, "after")]
        assert await engine.result(run.id) == "ok"


workers = td.App("stream-workers")


@workers.workflow(group="deciders")
async def remote_emitter(ctx: td.Context, n: int) -> int:
    for i in range(n):
        ctx.emit({"i": i})
        if i % 2:
            # Each sleep is a decision: the values before it are written
            # with it, and replays re-emit nothing stored.
            await ctx.sleep(1)
    ctx.emit("end")
    return n


service = td.App("stream-service")
service.remote_workflow("remote_emitter", group="deciders")


async def test_a_remote_workflow_emits_each_value_once_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        await engine.start("remote_emitter", 5, run_id="r")
        read = await collect(engine.stream("r"))
        assert await engine.result("r") == 5
        assert read == [*[(i, {"i": i}) for i in range(5)], (5, "end")]
        # Read again from an offset: the stored values, each once.
        assert await collect(engine.stream("r", from_offset=4)) == [(4, {"i": 4}), (5, "end")]


async def test_a_failed_run_keeps_what_it_emitted_and_each_generation_has_its_own_stream(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    lives = td.App("lives")

    @lives.workflow()
    async def doomed(ctx: td.Context) -> None:
        ctx.emit("last words")
        raise td.FatalError("gone")

    @lives.workflow()
    async def loop(ctx: td.Context, round: int) -> int:
        ctx.emit(f"round {round}")
        if round < 2:
            ctx.continue_as_new(round + 1)
        return round

    async with open_test_engine(lives, store=td.MemoryStore()) as engine:
        run = await engine.start(doomed, run_id="d-1")
        assert await collect(engine.stream(run.id)) == [(0, "last words")]
        assert (await engine.get(run.id)).status == "failed"
        looped = await engine.start(loop, 0, run_id="l")
        assert await engine.result(looped.id) == 2
        assert await collect(engine.stream("l")) == [(0, "round 0")]
        assert await collect(engine.stream("l.gen.2")) == [(0, "round 1")]
        assert await collect(engine.stream("l.gen.3")) == [(0, "round 2")]
