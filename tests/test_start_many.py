"""Starts written together: `start_many` (one durable write for many runs)
and the group commit of concurrent starts (`_start_batch`)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
from cli_processes import WITHIN
from conftest import EngineFactory
from trio_durable._stores._ops import CreateRun, Op, UpdateRun
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable._stores._wrapping import StoreWrapper

app = td.App("start-many")


@app.step()
async def double(x: int) -> int:
    return 2 * x


@app.workflow()
async def doubled(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, x)


@app.workflow()
async def waits(ctx: td.Context, x: int) -> int:
    return x + int(await ctx.wait_signal("go"))


@app.workflow(concurrency_key=lambda key, x: key, max_concurrent=1)
async def keyed(ctx: td.Context, key: str, x: int) -> int:
    return x


@app.workflow(concurrency_key=lambda key: key, singleton=True)
async def single(ctx: td.Context, key: str) -> str:
    await ctx.wait_signal("go")
    return key


class RecordingStore(StoreWrapper):
    """Passes everything to a store; records the batches that create runs,
    with the transactions the store committed while each was written, and
    can fail them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.creations: list[tuple[int, int]] = []
        self.fail_creations = False

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        created = sum(isinstance(op, CreateRun) for op in ops)
        if not created:
            return await self.inner.apply(ops)
        if self.fail_creations:
            # A write that refuses the batch after its runs were inserted:
            # the store must roll all of it back.
            ops = [*ops, UpdateRun("no-such-run", {"status": "failed"})]
        before = self.inner.statistics().transactions
        try:
            return await self.inner.apply(ops)
        finally:
            self.creations.append((created, self.inner.statistics().transactions - before))


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def test_start_many_returns_handles_in_input_order(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        before = engine.store.statistics().transactions
        handles = await engine.start_many(doubled, [(i,) for i in range(50)])
        # One transaction created them all (the turns write later).
        assert [h.input for h in handles] == [f"[{i}]" for i in range(50)]
        assert len({h.id for h in handles}) == 50
        assert [await h.result() for h in handles] == [2 * i for i in range(50)]
        assert engine.store.statistics().transactions - before >= 1


async def test_start_many_writes_one_batch(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'runs.db'}") as sqlite:
        store = RecordingStore(sqlite)
        async with open_test_engine(app, store=store) as engine:
            handles = await engine.start_many(waits, [(i,) for i in range(300)])
            assert store.creations == [(300, 1)]
            for handle in handles:
                await engine.signal(handle.id, "go", 1)
            assert [await h.result() for h in handles] == [i + 1 for i in range(300)]


async def test_concurrent_starts_share_one_transaction(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'runs.db'}") as sqlite:
        store = RecordingStore(sqlite)
        async with open_test_engine(app, store=store) as engine:
            handles: list[td.RunHandle[int]] = []

            async def start(i: int) -> None:
                handles.append(await engine.start(waits, i))

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(start, i)
            # Twenty starts, one batch, one commit.
            assert store.creations == [(20, 1)]
            assert len(handles) == 20


async def test_a_failed_batch_fails_every_start_in_it_and_writes_none(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'runs.db'}") as sqlite:
        store = RecordingStore(sqlite)
        async with open_test_engine(app, store=store) as engine:
            store.fail_creations = True
            failures: list[BaseException] = []

            async def start(i: int) -> None:
                try:
                    await engine.start(waits, i, run_id=f"r{i}")
                except td.StoreError as exc:
                    failures.append(exc)

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(start, i)
            assert len(failures) == 5
            assert len({id(exc) for exc in failures}) == 5
            with pytest.raises(td.StoreError):
                await engine.start_many(waits, [(1,), (2,)], run_ids=["m1", "m2"])
            assert await sqlite.list_runs() == []
            store.fail_creations = False
            # Nothing half written: the same ids start afresh.
            handle = await engine.start(waits, 7, run_id="r0")
            assert handle.input == "[7]"


async def test_start_many_checks_every_input_before_writing(
    open_test_engine: EngineFactory, store_url: str
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        with pytest.raises(td.InvalidArgumentsError):
            await engine.start_many(doubled, [(1,), ("two",)])
        with pytest.raises(td.UsageError, match="tuple"):
            await engine.start_many(doubled, [1, 2])  # type: ignore[list-item]
        with pytest.raises(td.UsageError, match="one id per input"):
            await engine.start_many(doubled, [(1,), (2,)], run_ids=["a"])
        with pytest.raises(td.UsageError):
            await engine.start_many(doubled, [(1,), (2,)], run_ids=["ok", "not ok/"])
        await engine.start(waits, 1, run_id="taken")
        with pytest.raises(td.RunConflictError):
            await engine.start_many(doubled, [(1,), (2,)], run_ids=["fresh", "taken"])
        assert [run.id for run in await engine.store.list_runs()] == ["taken"]
        assert await engine.start_many(doubled, []) == []


async def test_start_many_is_idempotent_by_id(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        first = await engine.start(doubled, 5, run_id="a")
        handles = await engine.start_many(doubled, [(1,), (2,), (3,)], run_ids=["a", "b", "b"])
        assert [h.id for h in handles] == ["a", "b", "b"]
        assert handles[0].input == first.input == "[5]"
        assert handles[2].input == handles[1].input == "[2]"
        assert [await h.result() for h in handles] == [10, 4, 4]


async def test_one_start_by_id_reads_nothing_first(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # A start by id writes its run at once: the write finds a run that
    # exists and changes nothing, so no read goes before it.
    reads: list[str] = []

    class CountingStore(RecordingStore):
        async def get_run(self, run_id: str) -> Any:
            reads.append(run_id)
            return await self.inner.get_run(run_id)

    async with open_sqlite_store(f"sqlite:///{tmp_path / 'runs.db'}") as sqlite:
        store = CountingStore(sqlite)
        async with open_test_engine(app, store=store) as engine:
            first = await engine.start(waits, 1, run_id="a")
            assert (reads, store.creations) == ([], [(1, 1)])
            # Again by the same id: the stored run, unchanged, and no turn.
            again = await engine.start(waits, 2, run_id="a")
            assert (again.id, again.input, again.created_at) == ("a", "[1]", first.created_at)
            # Another workflow's id is refused; the run stays as it was.
            with pytest.raises(td.RunConflictError):
                await engine.start(doubled, 3, run_id="a")
            assert reads == []
            assert (await engine.get("a")).input == "[1]"
            assert [cp.seq for cp in await engine.store.get_checkpoints("a")] == [1]
            await engine.signal("a", "go", 10)
            assert await engine.result("a") == 11


async def test_start_many_under_run_controls_starts_as_start_does(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        handles = await engine.start_many(keyed, [("k", 1), ("k", 2), ("j", 3)])
        assert [await h.result() for h in handles] == [1, 2, 3]
        # One open run per key: the second start of "x" returns the first.
        singles = await engine.start_many(single, [("x",), ("x",), ("y",)])
        assert singles[0].id == singles[1].id != singles[2].id
        for handle in (singles[0], singles[2]):
            await engine.signal(handle.id, "go", None)
        assert await singles[1].result() == "x"


async def test_client_start_many(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with td.open_client(url, app=app) as client:
        handles = await client.start_many(doubled, [(i,) for i in range(10)])
        assert all(h.status == "pending" for h in handles)
        async with td.open_engine(app, store=url, seed=0):
            assert [await h.result() for h in handles] == [2 * i for i in range(10)]


_CRASH = """
import os, sys, trio
import trio_durable as td
from trio_durable._stores import _sqlite_ops

app = td.App("crash")

@app.workflow()
async def wf(ctx: td.Context, x: int) -> int:
    return x

made = 0
create = _sqlite_ops._OPS[_sqlite_ops._ops.CreateRun]

def dying_create(cur, op):
    global made
    made += 1
    if made == int(sys.argv[2]):
        os._exit(9)  # the process dies mid-batch, before its commit
    return create(cur, op)

_sqlite_ops._OPS[_sqlite_ops._ops.CreateRun] = dying_create

async def main():
    async with td.open_engine(app, store=sys.argv[1], seed=0) as engine:
        await engine.start_many(wf, [(i,) for i in range(100)])
        print("started", flush=True)

trio.run(main)
"""


@pytest.mark.parametrize("die_at", [50, 0])
async def test_a_crash_before_the_commit_leaves_no_partial_batch(
    tmp_path: Path, die_at: int
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(_CRASH))
    with trio.fail_after(WITHIN):
        done = await trio.run_process(
            [sys.executable, str(script), url, str(die_at)],
            capture_stdout=True,
            check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    async with open_sqlite_store(url) as store:
        runs = await store.list_runs()
    if die_at:
        assert done.returncode == 9
        assert runs == []
    else:
        assert done.returncode == 0, done
        assert len(runs) == 100
