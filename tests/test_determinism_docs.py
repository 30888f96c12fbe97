"""The code of docs/determinism.md runs as the page says: its Python
blocks, in order, make one module, and the tests below run its demos under
the autojump clock."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio
import trio.testing

PAGE = Path(__file__).resolve().parents[1] / "docs" / "determinism.md"


def _page_module() -> ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    module = ModuleType("determinism_page")
    exec(compile("\n".join(blocks), str(PAGE), "exec"), module.__dict__)
    return module


@pytest.fixture
def page() -> Any:
    return _page_module()


async def test_time_random_and_ids_replay(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.time_and_ids()


async def test_a_cancelled_stay_frees_its_room(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.cancel_a_stay()


async def test_a_changed_argument_is_noticed(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.checked_arguments()
