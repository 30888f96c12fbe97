"""The code of docs/run-controls.md runs as the page says: its Python
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

PAGE = Path(__file__).resolve().parents[1] / "docs" / "run-controls.md"


def _page_module() -> ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    module = ModuleType("run_controls_page")
    exec(compile("\n".join(blocks), str(PAGE), "exec"), module.__dict__)
    return module


@pytest.fixture
def page() -> Any:
    return _page_module()


async def test_continue_as_new_keeps_each_generation_small(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.follow()


async def test_a_timeout_cancels_the_stay_with_compensation(
    autojump_clock: trio.testing.MockClock, page: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    await page.time_out()
    assert trio.current_time() == 3600.0 + 60.0
    assert capsys.readouterr().out.splitlines() == [
        "freed the room of ada",
        "freed the room of bob",
    ]


async def test_a_signal_between_runs_is_sent_once_per_key(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.message()


async def test_a_child_started_with_cancel_with_parent_goes_with_it(
    autojump_clock: trio.testing.MockClock, page: Any
) -> None:
    await page.cancel_both()
