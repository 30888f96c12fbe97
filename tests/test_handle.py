"""`td.RunHandle`: what `Engine.start` returns."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import trio_durable as td
from conftest import EngineFactory

app = td.App("handles")


@attrs.define(frozen=True)
class Total:
    amount: int


@app.workflow
async def add(ctx: td.Context, a: int, b: int) -> Total:
    return Total(a + b)


@app.workflow
async def refuse(ctx: td.Context) -> None:
    raise td.FatalError("no", code="refused")


async def test_a_handle_is_the_run_as_stored_and_waits_for_its_result(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(add, 2, 3, run_id="a", tags=["t"])
        # Every Run field reads as before: it is a Run.
        assert isinstance(run, td.Run)
        assert (run.id, run.workflow, run.version, run.status, run.tags) == (
            "a",
            "add",
            "1",
            "running",
            ("t",),
        )
        assert run.input == "[2,3]"
        assert run.done is False
        # Its result is structured as the workflow's return annotation.
        assert await run.result() == Total(5)
        assert await engine.result("a") == Total(5)
        # The handle keeps the row as it was at start; get() reads it now.
        assert run.status == "running"
        assert (await engine.get("a")).status == "completed"
        # Starting the same id again hands back the existing run, completed.
        again = await engine.start(add, 2, 3, run_id="a")
        assert again.status == "completed"
        assert again.output == '{"amount":5}'
        assert await again.result() == Total(5)


def test_handles_compare_by_their_run_fields() -> None:
    run = td.Run(id="r", workflow="w", status="running")
    one: td.RunHandle[Any] = td.RunHandle.of(run, Results())
    other: td.RunHandle[Any] = td.RunHandle.of(run, Results())
    # What the result is read from is no part of the value...
    assert one == other
    assert hash(one) == hash(other)
    assert "Results" not in repr(one)
    assert one != attrs.evolve(other, status="completed")
    # ...and a handle is not a plain Run, so never equal to one.
    assert one != run


async def test_result_raises_what_engine_result_raises(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(refuse)
        with pytest.raises(td.RunFailed) as caught:
            await run.result()
        assert caught.value.code == "refused"


class Results:
    """Any object with ``result(run_id)`` serves a handle (a client will)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def result(self, run_id: str) -> Any:
        self.asked.append(run_id)
        return 42


async def test_a_handle_reads_its_result_from_whatever_made_it() -> None:
    results = Results()
    handle: td.RunHandle[int] = td.RunHandle.of(td.Run(id="r", workflow="w"), results)
    assert await handle.result() == 42
    assert results.asked == ["r"]
