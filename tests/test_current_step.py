"""`td.current_step()`: which run, seq and attempt the calling step runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory

app = td.App("current")

failures: Counter[str] = Counter()
"""How many more attempts of a step (by name) fail before one succeeds."""

undone: list[td.StepInfo] = []
"""What each run of the undo step read."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    failures.clear()
    undone.clear()
    yield
    failures.clear()
    undone.clear()


def _attempt(name: str) -> td.StepInfo:
    info = td.current_step()
    if failures[name] > 0:
        failures[name] -= 1
        raise RuntimeError(f"{name} fails attempt {info.attempt}")
    return info


@app.step(retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0))
async def local(x: int) -> td.StepInfo:
    return _attempt("local")


@app.step(group="far", retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0))
async def remote(x: int) -> td.StepInfo:
    return _attempt("remote")


@app.step
async def in_a_child_task() -> td.StepInfo:
    """Reads it from a task the step starts: Trio copies the context."""
    seen: list[td.StepInfo] = []

    async def child() -> None:
        seen.append(td.current_step())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)
    return seen[0]


@app.step
async def undo(x: int) -> None:
    undone.append(td.current_step())


@app.workflow
async def flow(ctx: td.Context) -> list[td.StepInfo]:
    try:
        td.current_step()
    except td.UsageError:
        pass
    else:  # pragma: no cover - the test fails on it
        raise AssertionError("a workflow body is not a step")
    first = await ctx.step(local, 1, compensate=undo)
    second = await ctx.step(remote, 2)
    third = await ctx.step(in_a_child_task)
    return [first, second, third]


@app.workflow
async def failing(ctx: td.Context) -> None:
    await ctx.step(local, 1, compensate=undo)
    raise td.FatalError("undo the step", code="undo")


@pytest.mark.parametrize("namespace", ["default", "acme"])
async def test_steps_read_their_run_seq_and_attempt(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, namespace: str
) -> None:
    failures["local"] = 2
    failures["remote"] = 1
    route = "far" if namespace == "default" else f"far@{namespace}"
    async with open_test_engine(app, serve=[route]) as engine:
        run = await engine.start(flow, run_id="r", namespace=namespace)
        first, second, third = await run.result()
    common = {"run_id": "r", "workflow": "flow", "namespace": namespace}
    # The local step ran in the engine, its third attempt succeeded.
    assert first == td.StepInfo(**common, step="local", seq=1, attempt=3)
    # The remote one ran on the (embedded) worker, on its second attempt.
    assert second == td.StepInfo(**common, step="remote", seq=2, attempt=2)
    assert third == td.StepInfo(**common, step="in_a_child_task", seq=3, attempt=1)


async def test_an_undo_reads_the_seq_it_sits_at(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(failing, run_id="f")
        with pytest.raises(td.RunFailed):
            await run.result()
    assert undone == [
        td.StepInfo(
            run_id="f", workflow="failing", namespace="default", step="undo", seq=-1, attempt=1
        )
    ]


async def test_outside_a_step_it_is_an_error() -> None:
    with pytest.raises(td.UsageError, match=r"current_step\(\) was called outside a step"):
        td.current_step()


def test_the_record_is_frozen() -> None:
    info = td.StepInfo(run_id="r", workflow="w", namespace="n", step="s", seq=1, attempt=1)
    with pytest.raises(AttributeError):
        info.attempt = 2  # type: ignore[misc]
