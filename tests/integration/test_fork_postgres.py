"""Fork and retry from a seq on PostgreSQL, with two engines sharing one
database: one runs the original, the other forks it and runs the fork, a
client retries the original in place, and refused calls write nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._features.fork._fork import forked_from_of

app = td.App("fork_pg")

calls: list[str] = []
broken: set[str] = set()


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    calls.clear()
    broken.clear()
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


@app.step()
async def fetch(source: str) -> str:
    calls.append("fetch")
    return f"data of {source}"


@app.step()
async def transform(data: str) -> str:
    calls.append("transform")
    if "transform" in broken:
        raise td.FatalError("transform is broken", code="bug")
    return data.upper()


@app.workflow()
async def pipeline(ctx: td.Context, source: str) -> str:
    data = await ctx.step(fetch, source)  # seq 1
    await ctx.sleep(0.01)  # seq 2
    return await ctx.step(transform, data)  # seq 3


async def test_one_engine_forks_what_the_other_ran(url: str) -> None:
    broken.add("transform")
    with trio.fail_after(60):
        async with (
            td.open_engine(app, store=url, seed=1) as first,
            td.open_engine(app, store=url, seed=2) as second,
        ):
            await first.start(pipeline, "pg", run_id="p")
            with pytest.raises(td.RunFailed, match="broken"):
                await second.result("p")
            before = (await first.store.get_run("p"), await first.store.get_checkpoints("p"))
            broken.clear()
            calls.clear()
            fork = await second.fork("p", from_seq=3)
            assert fork.id == "p.fork.1"
            assert await first.result(fork.id) == "DATA OF PG"
            assert calls == ["transform"]
            assert await forked_from_of(first.store, fork.id) == ("p", 3)
            after = (await first.store.get_run("p"), await first.store.get_checkpoints("p"))
            assert after == before
            # Counted once both engines are idle: the ops of the forks
            # refused below are the only ones that could follow.
            await first.drain()
            await second.drain()
            ops = second.store.statistics().ops
            with pytest.raises(td.ForkPointError, match="out of range"):
                await second.fork("p", from_seq=5)
            with pytest.raises(td.RunConflictError):
                await second.fork("p", from_seq=1, new_run_id=fork.id)
            assert second.store.statistics().ops == ops
            async with td.open_client(url, app=app) as client:
                calls.clear()
                retried = await client.retry("p", from_seq=2)
                assert retried.status == "pending"
                assert await client.result("p") == "DATA OF PG"
                assert calls == ["transform"]
                with pytest.raises(td.InvalidRunStateError):
                    await client.retry(fork.id)
