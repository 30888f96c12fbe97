"""Fork and retry from a seq (`Engine.fork`, `Engine.retry(from_seq=)`, and
the same on the client), on the memory store and on SQLite, where a second
engine sharing the file runs what the first forked: the fork reuses the
original's results before the seq and runs the rest, the original is never
written, a retry in place runs again from the seq, and each refused seq or
id raises its own error before anything is written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from trio_durable._features.fork._fork import FORKED_FROM, forked_from_of
from trio_durable._stores._ops import DeleteCheckpoints, PutValue

app = td.App("forks")

calls: list[str] = []
broken: set[str] = set()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    broken.clear()
    yield
    calls.clear()
    broken.clear()


@app.step()
async def fetch(source: str) -> str:
    calls.append(f"fetch {source}")
    return f"data of {source}"


@app.step()
async def transform(data: str) -> str:
    calls.append("transform")
    if "transform" in broken:
        raise td.FatalError("transform is broken", code="bug")
    return data.upper()


@app.step()
async def publish(value: str) -> str:
    calls.append("publish")
    return f"published {value}"


@app.workflow()
async def pipeline(ctx: td.Context, source: str) -> str:
    data = await ctx.step(fetch, source)  # seq 1
    await ctx.sleep(60)  # seq 2
    value = await ctx.step(transform, data)  # seq 3
    return await ctx.step(publish, value)  # seq 4


@app.workflow()
async def approval(ctx: td.Context) -> list[Any]:
    data = await ctx.step(fetch, "form")  # seq 1
    answer = await ctx.wait_signal("answer")  # seq 2
    return [data, answer, await ctx.step(publish, str(answer))]  # seq 3


@app.workflow()
async def double(ctx: td.Context, n: int) -> int:
    calls.append(f"double {n}")
    return 2 * n


@app.workflow()
async def family(ctx: td.Context) -> list[Any]:
    first = await ctx.step(fetch, "family")  # seq 1
    child = await ctx.child(double, 21)  # seq 2
    members = await ctx.all(double, [1, 2, 3])  # seqs 3 to 5
    return [first, child, members, await ctx.step(publish, "family")]  # seq 6


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(kind: str, tmp_path: Path) -> str:
    return "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'forks.db'}"


@asynccontextmanager
async def _engine(
    store: str | td.Store, open_test_engine: EngineFactory, **kwargs: Any
) -> AsyncIterator[td.Engine]:
    async with open_test_engine(app, store=store, **kwargs) as engine:
        yield engine


async def _snapshot(engine: td.Engine, run_id: str) -> tuple[Any, ...]:
    return await engine.store.get_run(run_id), await engine.store.get_checkpoints(run_id)


async def test_a_fork_reuses_the_results_before_the_seq_and_runs_the_rest(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    broken.add("transform")
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(pipeline, "s3", run_id="p", tags=["nightly"])
        with pytest.raises(td.RunFailed, match="broken"):
            await engine.result("p")
        assert trio.current_time() == 60.0
        before = await _snapshot(engine, "p")
        broken.clear()
        calls.clear()
        fork = await engine.fork("p", from_seq=3)
        assert (fork.id, fork.status, fork.workflow, fork.version) == (
            "p.fork.1",
            "pending",
            "pipeline",
            "1",
        )
        assert (fork.input, fork.tags, fork.namespace) == ('["s3"]', ("nightly",), "default")
        assert await fork.result() == "published DATA OF S3"
        # Neither the fetch nor the minute's sleep ran again.
        assert calls == ["transform", "publish"]
        assert trio.current_time() == 60.0
        assert await _snapshot(engine, "p") == before
        assert await forked_from_of(engine.store, "p.fork.1") == ("p", 3)
        cps = await engine.store.get_checkpoints("p.fork.1")
        assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
            (1, "fetch", "completed"),
            (2, "sleep", "completed"),
            (3, "transform", "completed"),
            (4, "publish", "completed"),
        ]
        assert [(r.kind, r.status) for r in await engine.store.get_records("p.fork.1")] == [
            (FORKED_FROM, "completed")
        ]
        # The copies are the original's records, under the fork's id.
        original = {cp.seq: cp for cp in before[1]}
        assert cps[0].output == original[1].output
        assert cps[1].finished_at == original[2].finished_at
        # Another fork of the same run takes the next derived id.
        again = await engine.fork("p", from_seq=1)
        assert again.id == "p.fork.2"
        assert await again.result() == "published DATA OF S3"
        assert trio.current_time() == 120.0


async def test_a_fork_from_one_past_the_end_replays_everything_and_runs_nothing(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(pipeline, "a", run_id="p")
        assert await engine.result("p") == "published DATA OF A"
        calls.clear()
        fork = await engine.fork("p", from_seq=5, new_run_id="replica")
        assert fork.id == "replica"
        assert await fork.result() == "published DATA OF A"
        assert calls == []


async def test_a_fork_of_a_run_still_waiting_waits_for_its_own_signal(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(approval, run_id="a")
        await engine.drain()
        before = await _snapshot(engine, "a")
        # The wait at seq 2 has not settled: nothing after it can be reused.
        with pytest.raises(td.ForkPointError, match=r"seq 2 .* has not settled"):
            await engine.fork("a", from_seq=3)
        fork = await engine.fork("a", from_seq=2)
        await engine.drain()
        assert (await engine.get(fork.id)).status == "suspended"
        await engine.signal(fork.id, "answer", "yes")
        assert await fork.result() == ["data of form", "yes", "published yes"]
        assert calls == ["fetch form", "publish"]
        # The original still waits, unchanged.
        assert await _snapshot(engine, "a") == before
        await engine.signal("a", "answer", "no")
        assert await engine.result("a") == ["data of form", "no", "published no"]


async def test_a_fork_starts_children_anew_under_its_own_ids(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(family, run_id="f")
        assert await engine.result("f") == ["data of family", 42, [2, 4, 6], "published family"]
        calls.clear()
        # From the child on: the child and the fan run again, as the fork's.
        fork = await engine.fork("f", from_seq=2)
        assert await fork.result() == ["data of family", 42, [2, 4, 6], "published family"]
        # (The fan's members run at once, in any order.)
        assert sorted(calls) == ["double 1", "double 2", "double 21", "double 3", "publish"]
        assert (await engine.get("f.fork.1.child.2")).parent_id == "f.fork.1"
        assert (await engine.get("f.fork.1.all.3.0")).status == "completed"
        calls.clear()
        # From after the fan: the child and the fan members stay the original's.
        fork = await engine.fork("f", from_seq=6)
        assert await fork.result() == ["data of family", 42, [2, 4, 6], "published family"]
        assert calls == ["publish"]
        cps = await engine.store.get_checkpoints(fork.id, 2, 2)
        assert cps[0].child_id == "f.child.2"
        # A child run forks into a run of its own, which no parent awaits.
        calls.clear()
        orphan = await engine.fork("f.child.2", from_seq=1)
        assert (orphan.id, orphan.parent_id, orphan.parent_seq) == ("f.child.2.fork.1", None, None)
        assert await orphan.result() == 42
        assert calls == ["double 21"]


async def test_refused_seqs_and_ids_raise_their_own_errors_and_write_nothing(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(family, run_id="f")
        await engine.result("f")
        await engine.start(pipeline, "x", run_id="other")
        await engine.result("other")
        ops = engine.store.statistics().ops
        runs = await engine.store.list_runs()
        for bad in (0, -1, 8, 999_999_950):
            with pytest.raises(td.ForkPointError, match=r"out of range.*1 to 7"):
                await engine.fork("f", from_seq=bad)
            with pytest.raises(td.ForkPointError, match="out of range"):
                await engine.retry("f", from_seq=bad)
        for wrong in (True, 2.0, "3", None):
            with pytest.raises(td.ForkPointError, match="whole number"):
                await engine.fork("f", from_seq=wrong)  # type: ignore[arg-type]
        for inside in (4, 5):
            with pytest.raises(td.ForkPointError, match=r"inside the fan .* seqs 3 to 5"):
                await engine.fork("f", from_seq=inside)
        # In place, a child would start again under the id its first run holds.
        with pytest.raises(td.ForkPointError, match=r"child run 'f\.child\.2' at seq 2"):
            await engine.retry("f", from_seq=1)
        with pytest.raises(td.ForkPointError, match=r"child run 'f\.all\.3\.0'"):
            await engine.retry("f", from_seq=3)
        with pytest.raises(td.RunConflictError, match="'other' is taken"):
            await engine.fork("f", from_seq=1, new_run_id="other")
        with pytest.raises(td.UsageError):
            await engine.fork("f", from_seq=1, new_run_id="")
        with pytest.raises(td.RunNotFoundError):
            await engine.fork("missing", from_seq=1)
        with pytest.raises(td.RunNotFoundError):
            await engine.retry("missing", from_seq=1)
        with pytest.raises(td.RunNotFoundError):
            await engine.fork("f", from_seq=1, namespace="elsewhere")
        assert engine.store.statistics().ops == ops
        assert await engine.store.list_runs() == runs
        # From after the last child, a retry in place is fine.
        calls.clear()
        await engine.retry("f", from_seq=6)
        assert await engine.result("f") == ["data of family", 42, [2, 4, 6], "published family"]
        assert calls == ["publish"]


async def test_retry_in_place_runs_an_ended_run_again_from_the_seq(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(pipeline, "a", run_id="p")
        assert await engine.result("p") == "published DATA OF A"
        calls.clear()
        retried = await engine.retry("p", from_seq=2)
        assert retried.status == "pending"
        assert retried.output is None
        assert await engine.result("p") == "published DATA OF A"
        # The sleep runs again in full from the retry: 60 s more.
        assert trio.current_time() == 120.0
        assert calls == ["transform", "publish"]
        cps = await engine.store.get_checkpoints("p")
        assert [cp.seq for cp in cps] == [1, 2, 3, 4]
        assert cps[1].finished_at == fixed_wall()


async def test_retry_in_place_is_refused_for_a_run_that_has_not_ended(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(approval, run_id="a")
        await engine.drain()
        before = await _snapshot(engine, "a")
        with pytest.raises(td.InvalidRunStateError, match="suspended; only a run that ended"):
            await engine.retry("a", from_seq=1)
        assert await _snapshot(engine, "a") == before


async def test_retry_in_place_of_a_cancelled_run_waits_again_for_a_new_signal(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(approval, run_id="a")
        await engine.drain()
        await engine.cancel("a")
        with pytest.raises(td.RunCancelled):
            await engine.result("a")
        await engine.retry("a", from_seq=2)
        await engine.drain()
        assert (await engine.get("a")).status == "suspended"
        await engine.signal("a", "answer", 7)
        assert await engine.result("a") == ["data of form", 7, "published 7"]
        assert calls == ["fetch form", "publish"]


async def test_a_client_forks_and_retries_for_another_engine_on_the_same_file(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    # Two engines share one SQLite file: the first runs the original, a
    # client forks and retries it, and the second engine runs what it wrote.
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    broken.add("transform")
    async with _engine(store, open_test_engine, engine_id="first") as first:
        await first.start(pipeline, "b", run_id="p")
        with pytest.raises(td.RunFailed):
            await first.result("p")
    broken.clear()
    calls.clear()
    async with (
        _engine(store, open_test_engine, engine_id="second") as second,
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        fork = await client.fork("p", from_seq=3, new_run_id="p-fixed")
        assert await fork.result() == "published DATA OF B"
        assert await client.result("p-fixed") == "published DATA OF B"
        with pytest.raises(td.RunFailed):
            await client.result("p")
        retried = await client.retry("p", from_seq=3)
        assert retried.status == "pending"
        assert await client.result("p") == "published DATA OF B"
        assert calls == ["transform", "publish", "transform", "publish"]
        # The second engine ran both; the first was gone.
        assert second.statistics().turns >= 2
        with pytest.raises(td.ForkPointError):
            await client.fork("p", from_seq=99)
        with pytest.raises(td.RunConflictError):
            await client.fork("p", from_seq=1, new_run_id="p-fixed")


async def test_engines_fork_each_others_runs_on_one_sqlite_file(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    store = f"sqlite:///{tmp_path / 'two.db'}"
    async with (
        _engine(store, open_test_engine, engine_id="one", seed=1) as one,
        _engine(store, open_test_engine, engine_id="two", seed=2) as two,
    ):
        await one.start(pipeline, "c", run_id="p")
        assert await two.result("p") == "published DATA OF C"
        calls.clear()
        fork = await two.fork("p", from_seq=3)
        assert await one.result(fork.id) == "published DATA OF C"
        assert calls == ["transform", "publish"]
        [provenance] = await one.store.get_records(fork.id)
        assert provenance.kind == FORKED_FROM
        assert json.loads(provenance.input or "") == {"run_id": "p", "from_seq": 3}


@app.workflow(concurrency_key=lambda account: account, max_concurrent=1)
async def keyed(ctx: td.Context, account: str) -> Any:
    return await ctx.wait_signal("go")


async def test_a_fork_waits_for_admission_under_its_workflows_concurrency_key(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(keyed, "acme", run_id="k")
        await engine.drain()
        fork = await engine.fork("k", from_seq=1)
        await engine.drain()
        # The original holds the key's one slot: the fork waits in line.
        records = {record.kind: record for record in await engine.store.get_records(fork.id)}
        assert records["admission"].status == "pending"
        assert [cp.seq for cp in await engine.store.get_checkpoints(fork.id, 1, 100)] == []
        await engine.signal("k", "go", "first")
        assert await engine.result("k") == "first"
        await engine.drain()
        assert (await engine.store.get_checkpoints(fork.id, 1, 1))[0].kind == "signal"
        await engine.signal(fork.id, "go", "second")
        assert await fork.result() == "second"


@app.step()
async def reserve(item: str) -> str:
    calls.append(f"reserve {item}")
    return f"held {item}"


@app.step()
async def release(item: str) -> None:
    calls.append(f"release {item}")


@app.workflow()
async def hold(ctx: td.Context, item: str) -> list[Any]:
    held = await ctx.step(reserve, item, compensate=release)  # seq 1
    return [held, await ctx.wait_signal("go")]  # seq 2


async def test_steps_whose_undo_ran_run_again_in_a_fork_and_in_a_retry(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(hold, "seat", run_id="h")
        await engine.drain()
        await engine.cancel("h", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("h")
        assert calls == ["reserve seat", "release seat"]
        calls.clear()
        fork = await engine.fork("h", from_seq=2)
        await engine.drain()
        await engine.signal(fork.id, "go", 1)
        assert await fork.result() == ["held seat", 1]
        # Its effect was undone in the original: the fork reserves again.
        assert calls == ["reserve seat"]
        assert [cp.seq for cp in await engine.store.get_checkpoints(fork.id, -10, 10)] == [1, 2]
        calls.clear()
        await engine.retry("h", from_seq=2)
        await engine.drain()
        await engine.signal("h", "go", 2)
        assert await engine.result("h") == ["held seat", 2]
        assert calls == ["reserve seat"]
        assert [cp.seq for cp in await engine.store.get_checkpoints("h", -10, 10)] == [1, 2]


@app.workflow()
async def rounds(ctx: td.Context, n: int) -> int:
    await ctx.step(fetch, f"round {n}")
    if n < 2:
        ctx.continue_as_new(n + 1)
    return n


async def test_a_chain_continued_as_new_forks_into_a_chain_of_its_own(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(rounds, 1, run_id="c")
        assert await engine.result("c") == 2
        with pytest.raises(td.InvalidRunStateError, match="continued as new"):
            await engine.retry("c", from_seq=1)
        fork = await engine.fork("c", from_seq=1)
        assert await fork.result() == 2
        assert (await engine.get(f"{fork.id}.gen.2")).status == "completed"
        # A later generation forks as a run of its own: no link back to "c".
        last = await engine.fork("c.gen.2", from_seq=2, new_run_id="last")
        assert await last.result() == 2
        links = await engine.store.get_checkpoints("last", 999_999_993, 999_999_993)
        assert links == []
        await engine.retry("c.gen.2", from_seq=1)
        assert await engine.result("c") == 2


# -- what a run records besides its body checkpoints ------------------------------------


@app.workflow()
async def tally(ctx: td.Context) -> int:
    total = {"n": 0}

    @ctx.update("add")
    def add(n: int) -> int:
        total["n"] += n
        return total["n"]

    @ctx.query("total")
    def get_total() -> int:
        return total["n"]

    ctx.emit("start")
    await ctx.wait_signal("go1")  # seq 1 (an update applied while it waits)
    ctx.set_event("stage", "first")  # seq 2
    ctx.emit(f"first {total['n']}")
    await ctx.wait_signal("go2")  # seq 3 (another update)
    ctx.set_event("stage", "second")  # seq 4
    ctx.set_event("late", total["n"])  # seq 5
    ctx.emit(f"second {total['n']}")
    return total["n"]


async def _tally(engine: td.Engine) -> None:
    """A tally that applied 5 at seq 1 and 10 at seq 3, and ended with 15."""
    await engine.start(tally, run_id="t")
    await engine.drain()
    assert await engine.update("t", "add", 5) == 5
    await engine.signal("t", "go1")
    await engine.drain()
    assert await engine.update("t", "add", 10) == 15
    await engine.signal("t", "go2")
    assert await engine.result("t") == 15


async def _stream(engine: td.Engine, run_id: str) -> list[tuple[int, Any]]:
    return [item async for item in engine.stream(run_id)]


async def _events(engine: td.Engine, run_id: str) -> tuple[Any, Any]:
    stage = await engine.get_event(run_id, "stage", timeout=0)
    return stage, await engine.get_event(run_id, "late", timeout=0)


async def test_a_fork_replays_the_updates_and_publishes_the_values_before_the_seq(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await _tally(engine)
        fork = await engine.fork("t", from_seq=3, new_run_id="t2")
        await engine.drain()
        # The update at seq 1 is applied again, the one at seq 3 is not.
        assert await engine.query("t2", "total") == 5
        # The value published before seq 3 is the fork's from its creation.
        assert await _events(engine, "t2") == ("first", None)
        await engine.signal("t2", "go2")
        assert await fork.result() == 5
        assert await _events(engine, "t2") == ("second", 5)
        # The replay emitted the values before seq 3 into the fork's own
        # stream, once each; the original's stream is left as it was.
        assert await _stream(engine, "t2") == [(0, "start"), (1, "first 5"), (2, "second 5")]
        assert await _stream(engine, "t") == [(0, "start"), (1, "first 5"), (2, "second 15")]
        assert await _events(engine, "t") == ("second", 15)


async def test_a_retry_in_place_keeps_what_came_before_the_seq_and_drops_the_rest(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await _tally(engine)
        await engine.retry("t", from_seq=3)
        await engine.drain()
        assert await engine.query("t", "total") == 5
        assert await _events(engine, "t") == ("first", None)
        assert await _stream_so_far(engine, "t") == ["start", "first 5"]
        await engine.signal("t", "go2")
        assert await engine.result("t") == 5
        assert await _events(engine, "t") == ("second", 5)
        assert await _stream(engine, "t") == [(0, "start"), (1, "first 5"), (2, "second 5")]
        # From seq 1, nothing of the updates is left.
        await engine.retry("t", from_seq=1)
        await engine.drain()
        assert await engine.query("t", "total") == 0
        assert await _events(engine, "t") == (None, None)
        assert await _stream_so_far(engine, "t") == ["start"]


async def _stream_so_far(engine: td.Engine, run_id: str) -> list[Any]:
    rows = await engine.store.list_values(f"stream:{run_id}", limit=100)
    return [json.loads(row.value) for row in rows if row.value is not None]


@app.workflow(check_arguments=True)
async def guarded(ctx: td.Context) -> str:
    data = await ctx.step(fetch, "guarded")  # seq 1
    try:
        await ctx.wait_signal("answer")  # seq 2
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(publish, "cleanup")  # seq 3
        raise
    return data


async def test_reserved_records_a_fork_copies_and_a_retry_keeps(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(guarded, run_id="g")
        await engine.drain()
        await engine.cancel("g")
        with pytest.raises(td.RunCancelled):
            await engine.result("g")
        seqs = [cp.seq for cp in await engine.store.get_checkpoints("g")]
        assert seqs == [1, 2, 3]
        assert await _kinds(engine, "g") == ["cancelled_at", "checked_from"]
        with pytest.raises(td.ForkPointError):
            await engine.fork("g", from_seq=4)
        # The argument check's start (seq 1) is copied, the cancellation's
        # delivery point is not: the fork is not cancelled.
        fork = await engine.fork("g", from_seq=2, new_run_id="g2")
        await engine.drain()
        seqs = [cp.seq for cp in await engine.store.get_checkpoints("g2")]
        assert seqs == [1, 2]
        assert await _kinds(engine, "g2") == ["checked_from", "forked_from"]
        await engine.signal("g2", "answer", "yes")
        assert await fork.result() == "data of guarded"
        # In place: the delivery point goes with the cleanup after it.
        await engine.retry("g", from_seq=2)
        await engine.drain()
        assert (await engine.get("g")).status == "suspended"
        seqs = [cp.seq for cp in await engine.store.get_checkpoints("g")]
        assert seqs == [1, 2]
        assert await _kinds(engine, "g") == ["checked_from"]
        await engine.cancel("g")
        with pytest.raises(td.RunCancelled):
            await engine.result("g")
        cps = {cp.seq: cp for cp in await engine.store.get_checkpoints("g")}
        records = {r.kind: r for r in await engine.store.get_records("g")}
        assert (records["cancelled_at"].output, cps[3].name) == ("2", "publish")
        assert await _events(engine, "g") == (None, None)


async def test_a_fork_past_a_cancellations_delivery_point_is_refused(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await engine.start(guarded, run_id="g")
        await engine.drain()
        await engine.cancel("g")
        with pytest.raises(td.RunCancelled):
            await engine.result("g")
        # Settle the wait the cancellation cut, as a run with nothing
        # recorded where it got it would hold.
        await engine.store.apply([DeleteCheckpoints("g", (2,))])
        before = await _snapshot(engine, "g")
        for call in (engine.fork, engine.retry):
            with pytest.raises(td.ForkPointError, match="cancellation at seq 2"):
                await call("g", from_seq=3)
        assert await _snapshot(engine, "g") == before


async def test_an_update_left_in_the_inbox_is_applied_by_the_retry_not_by_a_fork(
    autojump_clock: trio.testing.MockClock, store_url: str, open_test_engine: EngineFactory
) -> None:
    async with _engine(store_url, open_test_engine) as engine:
        await _tally(engine)
        # Accepted as the run ended, never applied: it stays in the inbox.
        accepted = json.dumps({"name": "add", "args": "[100]", "at": 0.0})
        await engine.store.apply(
            [
                PutValue("update:t", "record/late", accepted, 0.0),
                PutValue("update:t", "inbox/late", accepted, 0.0),
            ]
        )
        await engine.fork("t", from_seq=3, new_run_id="t2")
        await engine.drain()
        assert await engine.query("t2", "total") == 5
        await engine.retry("t", from_seq=3)
        await engine.drain()
        assert await engine.query("t", "total") == 105
        record = await engine.store.get_value("update:t", "record/late")
        assert record is not None
        assert json.loads(record.value or "{}")["status"] == "completed"


async def _kinds(engine: td.Engine, run_id: str) -> list[str]:
    """The kinds of the run's records."""
    return [record.kind for record in await engine.store.get_records(run_id)]
