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
