"""The code of docs/changing-workflow-code.md runs as the page says: its
Python blocks, in order, make one module, and the tests below run its demos
against the memory and SQLite stores under the autojump clock."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
import trio_durable.testing

PAGE = Path(__file__).resolve().parents[1] / "docs" / "changing-workflow-code.md"


def _page_module() -> ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    module = ModuleType("changing_workflow_code_page")
    exec(compile("\n".join(blocks), str(PAGE), "exec"), module.__dict__)
    return module


@pytest.fixture
def page() -> Any:
    return _page_module()


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


@asynccontextmanager
async def _store(kind: str, tmp_path: Path) -> AsyncIterator[td.Store]:
    if kind == "memory":
        yield td.MemoryStore()
    else:
        async with td.open_store(f"sqlite:///{tmp_path / 'shop.db'}") as store:
            yield store


async def test_a_patch_keeps_old_runs_on_the_old_branch(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, page: Any
) -> None:
    async with _store(kind, tmp_path) as store:
        await page.roll_out(store)


async def test_deprecate_patch_replays_a_run_with_the_marker(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, page: Any
) -> None:
    async with _store(kind, tmp_path) as store:
        await page.deprecate(store)


async def _runs_of_deploy_a(store: td.Store) -> None:
    """o-1 waits for "packed"; o-2 completed."""
    async with td.open_engine(_page_module().deploy_a(), store=store) as engine:
        await engine.start("order", "o-1", run_id="o-1")
        await engine.start("order", "o-2", run_id="o-2")
        await engine.drain()
        await engine.signal("o-2", "packed")
        await engine.result("o-2")


async def test_the_tests_before_a_deploy_run_as_the_page_says(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, page: Any
) -> None:
    histories = tmp_path / "histories"
    histories.mkdir()
    async with _store(kind, tmp_path) as store:
        await _runs_of_deploy_a(store)
        await page.export_histories(store, histories)
    assert sorted(p.name for p in histories.iterdir()) == ["o-1.json", "o-2.json"]
    # replay and replay_all run Trio themselves: a plain test calls them.
    await trio.to_thread.run_sync(page.test_deploy_b_replays_the_runs_in_flight, histories)
    await trio.to_thread.run_sync(page.test_an_unpatched_change_breaks_a_run_in_flight, histories)
    with pytest.raises(td.NonDeterminismError) as info:
        await trio.to_thread.run_sync(
            td.testing.replay, page.deploy_b_unpatched(), histories / "o-1.json"
        )
    shown = re.search(r"```text\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert shown is not None
    # The page's report is this one, but for the path, the digest and the line.
    assert [re.sub(r"[0-9a-f]{16}\)|/\S+:\d+ in", "...", line) for line in shown[1].splitlines()][
        1:4
    ] == [re.sub(r"[0-9a-f]{16}\)", "...", line) for line in str(info.value).splitlines()][1:4]
