"""A KeyboardInterrupt or SystemExit inside a step or a workflow body ends
`open_engine`, which still gives back the leases of the runs it was
executing: another engine resumes them at once, and that is no recovery."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory

app = td.App("interrupts")

# What to raise, once, and where: "step" or "body".
interrupt: dict[str, type[BaseException]] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    interrupt.clear()


@app.step()
async def work(n: int) -> int:
    if "step" in interrupt:
        raise interrupt.pop("step")()
    return n + 1


@app.workflow()
async def job(ctx: td.Context, n: int) -> int:
    if "body" in interrupt:
        raise interrupt.pop("body")()
    return await ctx.step(work, n)


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    """Virtual time that jumps as soon as every task waits, on both stores:
    SQLite keeps its queries on the Trio thread under a mock clock."""
    return trio.testing.MockClock(autojump_threshold=0)


@asynccontextmanager
async def _store(kind: str, tmp_path: Path) -> AsyncIterator[td.Store]:
    if kind == "memory":
        yield td.MemoryStore()
    else:
        async with td.open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
            yield store


@pytest.mark.parametrize("where", ["step", "body"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
async def test_an_interrupt_in_a_turn_gives_its_lease_back(
    where: str,
    exc: type[BaseException],
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    interrupt[where] = exc
    async with _store(kind, tmp_path) as store:
        with pytest.RaisesGroup(exc, flatten_subgroups=True):
            async with open_test_engine(app, store=store, engine_id="first") as first:
                await first.start(job, 1, run_id="j")
                await first.result("j")
        run = await store.get_run("j")
        assert run is not None
        assert (run.status, run.lease_owner) == ("running", None)
        stopped = trio.current_time()
        async with open_test_engine(app, store=store, engine_id="second") as second:
            assert await second.result("j") == 2
            # Resumed at once, not after the first engine's lease_ttl.
            assert trio.current_time() == stopped
            run = await second.get("j")
    assert run.recoveries == 0
