"""The example of docs/deployments.md runs as the page says, under the
autojump clock."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import trio

PAGE = Path(__file__).resolve().parents[1] / "docs" / "deployments.md"


def _page_module() -> ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    module = ModuleType("deployments_page")
    exec(compile("\n".join(blocks), str(PAGE), "exec"), module.__dict__)
    return module


async def test_the_pages_roll_out(autojump_clock: trio.abc.Clock) -> None:
    page = _page_module()
    assert await page.roll_out() == {"old": ["A", "A"], "new": ["B", "B"]}
