"""Namespaces: run ids are unique across the store, and no call made for one
namespace reads or changes a run of another by its id."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory

app = td.App("namespaces")


@app.workflow()
async def kid(ctx: td.Context, word: str) -> str:
    return f"{ctx.namespace}:{word}"


@app.workflow()
async def secret_job(ctx: td.Context, secret: str) -> list[str]:
    """Waits for a signal, then runs a child and a fan of two."""
    go = await ctx.wait_signal("go", type=str)
    one = await ctx.child(kid, go)
    return [one, *await ctx.all(kid, [secret, secret])]


@app.workflow()
async def other_job(ctx: td.Context) -> None:
    pass


@app.workflow()
async def doomed(ctx: td.Context) -> None:
    raise td.FatalError("no", code="doomed")


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    """Virtual time that jumps as soon as every task waits, on both stores:
    SQLite keeps its queries on the Trio thread under a mock clock."""
    return trio.testing.MockClock(autojump_threshold=0)


@asynccontextmanager
async def _engine(
    kind: str, tmp_path: Path, open_test_engine: EngineFactory
) -> AsyncIterator[td.Engine]:
    store = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_test_engine(app, store=store) as engine:
        yield engine


async def _snapshot(engine: td.Engine, run_id: str) -> tuple[Any, ...]:
    """Everything the store holds about a run, to show that nothing changed."""
    return (
        await engine.store.get_run(run_id),
        await engine.store.get_checkpoints(run_id),
        await engine.store.buffered_signals('["r1","go"]'),
        await engine.store.signal_waiter('["r1","go"]'),
    )


def _says_nothing_of_alpha(exc: BaseException) -> None:
    text = str(exc)
    for word in ("alpha", "secret_job", "s3cret"):
        assert word not in text


async def test_no_call_for_one_namespace_reaches_a_run_of_another(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    async with _engine(kind, tmp_path, open_test_engine) as engine:
        started = await engine.start(secret_job, "s3cret", run_id="r1", namespace="alpha")
        await engine.drain()
        before = await _snapshot(engine, "r1")
        assert before[0].status == "suspended"

        # start: the id is taken; the error tells nothing of the run.
        for workflow in (secret_job, other_job):
            args = ("mine",) if workflow is secret_job else ()
            with pytest.raises(td.RunConflictError) as conflict:
                await engine.start(workflow, *args, run_id="r1", namespace="beta")
            _says_nothing_of_alpha(conflict.value)
        # get, result, signal, cancel, retry: as if there were no such run.
        calls = [
            engine.get("r1", namespace="beta"),
            engine.result("r1", namespace="beta"),
            engine.signal("r1", "go", "forged", namespace="beta"),
            engine.cancel("r1", namespace="beta"),
            engine.cancel("r1", compensate=True, namespace="beta"),
            engine.retry("r1", namespace="beta"),
        ]
        for call in calls:
            with pytest.raises(td.RunNotFoundError) as missing:
                await call
            _says_nothing_of_alpha(missing.value)
        await engine.drain()
        assert await _snapshot(engine, "r1") == before

        # Its own namespace reaches it, and so does no namespace at all.
        again = await engine.start(secret_job, "x", run_id="r1", namespace="alpha")
        assert (again.input, again.created_at) == (started.input, started.created_at)
        assert await engine.get("r1", namespace="alpha") == await engine.get("r1")
        await engine.signal("r1", "go", "hi", namespace="alpha")
        assert await engine.result("r1", namespace="alpha") == [
            "alpha:hi",
            "alpha:s3cret",
            "alpha:s3cret",
        ]
        # Children and fan members live in their parent's namespace.
        family = ["r1.child.2", "r1.all.3.0", "r1.all.3.1"]
        for run_id in family:
            assert (await engine.get(run_id, namespace="alpha")).namespace == "alpha"
            with pytest.raises(td.RunNotFoundError):
                await engine.get(run_id, namespace="beta")
            with pytest.raises(td.RunNotFoundError):
                await engine.result(run_id, namespace="beta")


async def test_retry_and_cancel_for_another_namespace_change_nothing(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    async with _engine(kind, tmp_path, open_test_engine) as engine:
        await engine.start(doomed, run_id="d", namespace="alpha")
        with pytest.raises(td.RunFailed):
            await engine.result("d", namespace="alpha")
        failed = await engine.get("d")
        with pytest.raises(td.RunNotFoundError):
            await engine.retry("d", namespace="beta")
        assert await engine.get("d") == failed
        assert (await engine.retry("d", namespace="alpha")).status == "pending"
        with pytest.raises(td.RunFailed):
            await engine.result("d")

        await engine.start(secret_job, "s", run_id="r1", namespace="alpha")
        await engine.drain()
        with pytest.raises(td.RunNotFoundError):
            await engine.cancel("r1", namespace="default")
        assert (await engine.get("r1")).status == "suspended"
        await engine.cancel("r1", namespace="alpha")
        with pytest.raises(td.RunCancelled):
            await engine.result("r1", namespace="alpha")


async def test_the_default_namespace_is_a_namespace_like_any_other(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(other_job, run_id="plain")
        assert await engine.result("plain", namespace="default") is None
        with pytest.raises(td.RunConflictError):
            await engine.start(other_job, run_id="plain", namespace="alpha")
        with pytest.raises(td.RunNotFoundError):
            await engine.get("plain", namespace="alpha")
        for bad in ("", "a b", 7):
            with pytest.raises(td.UsageError):
                await engine.get("plain", namespace=bad)  # type: ignore[arg-type]
