"""Several engines on one store, each with its own connection, as separate
processes would have: a run id started on all of them at once is one run."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import trio_durable as td

app = td.App("many-engines")


@app.step()
async def add_one(x: int) -> int:
    return x + 1


@app.workflow()
async def counter(ctx: td.Context, x: int) -> int:
    return await ctx.step(add_one, x)


@app.workflow()
async def other(ctx: td.Context, x: int) -> int:
    return x


@asynccontextmanager
async def _store_url(
    kind: str, real_server: Callable[[str], str], tmp_path: Path
) -> AsyncIterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'many.db'}"
        return
    from servers.postgres import scratch_schema

    async with scratch_schema(real_server("postgres")) as url:
        yield url


@pytest.mark.parametrize("kind", ["postgres", "sqlite"])
async def test_one_run_id_started_on_every_engine_at_once_is_one_run(
    kind: str, real_server: Callable[[str], str], tmp_path: Path
) -> None:
    async with (
        _store_url(kind, real_server, tmp_path) as url,
        td.open_engine(app, store=url, engine_id="e1") as e1,
        td.open_engine(app, store=url, engine_id="e2") as e2,
        td.open_engine(app, store=url, engine_id="e3") as e3,
    ):
        engines = [e1, e2, e3]
        started: list[td.Run] = []

        async def start(engine: td.Engine) -> None:
            started.append(await engine.start(counter, 41, run_id="same"))

        async with trio.open_nursery() as nursery:
            for engine in engines * 5:
                nursery.start_soon(start, engine)
        assert {run.id for run in started} == {"same"}
        assert {run.created_at for run in started} == {started[0].created_at}
        for engine in engines:
            assert await engine.result("same") == 42
        runs = await e1.store.list_runs()
        assert [run.id for run in runs] == ["same"]
        # The id is taken: another workflow cannot have it, on any engine.
        with pytest.raises(td.RunConflictError):
            await e2.start(other, 1, run_id="same")
