"""Singletons and dedup keys: a start returns the open (or queued) run of
its key instead of starting another, atomically across engines (see
`_start_controls`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall

app = td.App("singletons")

bodies: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    bodies.clear()


@app.step()
async def mark(text: str) -> None:
    bodies.append(text)


@app.workflow(concurrency_key=lambda account, note="", seconds=10.0: account, singleton=True)
async def sync_account(ctx: td.Context, account: str, note: str = "", seconds: float = 10.0) -> str:
    await ctx.step(mark, f"{account}{note}")
    await ctx.sleep(seconds)
    return f"synced {account}{note}"


@app.workflow(
    concurrency_key=lambda user, n, seconds=10.0: "mail",
    dedup_key=lambda user, n, seconds=10.0: user,
)
async def send_digest(ctx: td.Context, user: str, n: int, seconds: float = 10.0) -> str:
    await ctx.step(mark, f"{user}{n}")
    await ctx.sleep(seconds)
    return f"digest {user}{n}"


@app.workflow(concurrency_key=lambda account: account, singleton=True)
async def sync_until_told(ctx: td.Context, account: str) -> str:
    """`sync_account`, open until it is signalled ``go``."""
    await ctx.step(mark, account)
    await ctx.wait_signal("go")
    return f"synced {account}"


@app.workflow(concurrency_key=lambda user, n: "mail", dedup_key=lambda user, n: user)
async def digest_until_told(ctx: td.Context, user: str, n: int) -> str:
    """`send_digest`, holding the mail slot until it is signalled ``go``."""
    await ctx.step(mark, f"{user}{n}")
    await ctx.wait_signal("go")
    return f"digest {user}{n}"


@app.workflow(singleton=True, concurrency_key=lambda x: str(x))
async def one_per_value(ctx: td.Context, x: int) -> int:
    return x


def refuse(account: str) -> str:
    raise LookupError(account)


@app.workflow(concurrency_key=refuse, singleton=True)
async def refused(ctx: td.Context, account: str) -> None:
    return None


@app.workflow(dedup_key=refuse)
async def refused_dedup(ctx: td.Context, account: str) -> None:
    return None


async def test_a_start_returns_the_open_run_of_its_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with (
        open_test_engine(app, store=store) as engine,
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        first = await engine.start(sync_account, "acme", "-1")
        again = await engine.start(sync_account, "acme", "-2")
        from_client = await client.start(sync_account, "acme", "-3")
        other = await engine.start(sync_account, "globex")
        assert again.id == first.id == from_client.id
        assert other.id != first.id
        assert await again.result() == "synced acme-1"
        # Once it ended, a start starts a new one.
        later = await engine.start(sync_account, "acme", "-4")
        assert later.id != first.id
        assert await later.result() == "synced acme-4"
        assert await other.result() == "synced globex"
        # Namespaces keep their singletons apart (their runs still share
        # the key's fleet-wide limit: one after the other).
        a = await engine.start(sync_account, "acme", namespace="tenant-a")
        b = await engine.start(sync_account, "acme", namespace="tenant-b")
        assert a.id != b.id
        assert await a.result() == await b.result() == "synced acme"
    assert sorted(bodies) == ["acme", "acme", "acme-1", "acme-4", "globex"]
    held = await store.list_values("singleton:sync_account")
    assert [value.key for value in held] == [
        "default:acme",
        "default:globex",
        "tenant-a:acme",
        "tenant-b:acme",
    ]


async def test_a_bad_key_refuses_the_start_and_writes_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        with pytest.raises(td.InvalidArgumentsError, match="LookupError"):
            await engine.start(refused, "x")
        with pytest.raises(td.InvalidArgumentsError, match="LookupError"):
            await engine.start(refused_dedup, "x")
    assert await store.list_runs() == []
    assert await store.list_values("singleton:refused") == []
    assert await store.list_values("dedup:refused_dedup") == []


async def test_a_start_returns_the_queued_run_of_its_dedup_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        running = await engine.start(send_digest, "ann", 1)
        await trio.sleep(1)
        # ann's first run runs (it is not queued): a second one queues.
        queued = await engine.start(send_digest, "ann", 2)
        assert queued.id != running.id
        # While it waits for the slot, starts with ann's key return it.
        assert (await engine.start(send_digest, "ann", 3)).id == queued.id
        bob = await engine.start(send_digest, "bob", 4)
        assert bob.id != queued.id
        assert await running.result() == "digest ann1"
        await trio.sleep(1)
        # Admitted now: ann's next start queues a new run.
        newer = await engine.start(send_digest, "ann", 5)
        assert newer.id not in (running.id, queued.id)
        assert await queued.result() == "digest ann2"
        assert await newer.result() == "digest ann5"
        assert await bob.result() == "digest bob4"
    assert bodies == ["ann1", "ann2", "bob4", "ann5"]


async def singleton_race(url: str, *, starts: int = 40) -> None:
    """Two engines start one key's singleton ``starts`` times at once: one
    run is created and every start returns it; the same for a dedup key.
    The runs stay open (and the dedup key's slot taken) until every start
    returned, whatever the clock: they end when signalled."""
    async with (
        td.open_store(url) as store,
        td.open_engine(app, store=store, engine_id="a", seed=1, wall_clock=fixed_wall) as a,
        td.open_engine(app, store=store, engine_id="b", seed=2, wall_clock=fixed_wall) as b,
    ):
        blocker = await a.start(digest_until_told, "blocker", 0)
        ids: dict[str, set[str]] = {"singleton": set(), "dedup": set()}

        async def start(i: int) -> None:
            engine = (a, b)[i % 2]
            ids["singleton"].add((await engine.start(sync_until_told, "race")).id)
            ids["dedup"].add((await engine.start(digest_until_told, "carl", i)).id)

        async with trio.open_nursery() as nursery:
            for i in range(starts):
                nursery.start_soon(start, i)
        assert len(ids["singleton"]) == 1
        assert len(ids["dedup"]) == 1
        [winner] = ids["singleton"]
        [queued] = ids["dedup"]
        # Signals wait for a run that does not wait yet (the queued one).
        for run_id in (winner, blocker.id, queued):
            await b.signal(run_id, "go")
        assert await a.result(winner) == "synced race"
        assert await b.result(blocker.id) == "digest blocker0"
        assert (await b.result(queued)).startswith("digest carl")
        runs = await store.list_runs()
    assert sorted(run.workflow for run in runs) == [
        "digest_until_told",
        "digest_until_told",
        "sync_until_told",
    ]


async def test_two_engines_racing_start_one_run_per_key(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    await singleton_race(f"sqlite:///{tmp_path / 'race.db'}")


async def test_a_run_id_given_to_a_singleton_start_is_kept(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        first = await engine.start(one_per_value, 7, run_id="seven")
        assert first.id == "seven"
        assert (await engine.start(one_per_value, 7, run_id="seven")).id == "seven"
        assert await first.result() == 7
        second = await engine.start(one_per_value, 7, run_id="seven-again")
        assert await second.result() == 7
