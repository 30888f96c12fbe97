"""The code of docs/starting-many-runs.md runs as the page says: each of its
blocks is this module's code (a test checks it), and the tests below run
them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "starting-many-runs.md"

app = td.App("greetings")


@app.step()
async def shout(name: str) -> str:
    return name.upper()


@app.workflow()
async def greet(ctx: td.Context, name: str, punctuation: str) -> str:
    return await ctx.step(shout, name) + punctuation


async def greet_everyone(engine: td.Engine) -> list[str]:
    handles = await engine.start_many(greet, [("ada", "!"), ("grace", "?"), ("alan", ".")])
    return [await handle.result() for handle in handles]


async def start_orders(engine: td.Engine) -> list[td.RunHandle[str]]:
    return await engine.start_many(
        greet, [("ada", "!"), ("grace", "?")], run_ids=["order-1", "order-2"]
    )


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'g.db'}"


async def test_greet_everyone(url: str, autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(app, store=url, seed=0) as engine:
        assert await greet_everyone(engine) == ["ADA!", "GRACE?", "ALAN."]


async def test_start_orders_twice_starts_them_once(
    url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_engine(app, store=url, seed=0) as engine:
        first = await start_orders(engine)
        again = await start_orders(engine)
        assert [h.id for h in again] == [h.id for h in first] == ["order-1", "order-2"]
        assert [await h.result() for h in again] == ["ADA!", "GRACE?"]


async def test_a_bad_input_writes_nothing(url: str) -> None:
    async with td.open_engine(app, store=url, seed=0) as engine:
        with pytest.raises(td.InvalidArgumentsError):
            await engine.start_many(greet, [("ada", "!"), ("grace", 3)])
        assert await engine.store.list_runs() == []


def _code(text: str) -> str:
    return "\n".join(
        line.rstrip()
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    )


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 2
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block
