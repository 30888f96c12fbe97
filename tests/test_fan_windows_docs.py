"""The code of docs/fan-windows.md runs as the page says: its Python
blocks, in order, make one module, and the test below runs its demo on the
memory and SQLite stores under the autojump clock."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
import trio
import trio.testing

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "fan-windows.md"


def _page_module() -> ModuleType:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    module = ModuleType("fan_windows_page")
    exec(compile("\n".join(blocks), str(PAGE), "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_five_labels_print_in_a_window_of_two(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, kind: str
) -> None:
    page = _page_module()
    if kind == "memory":
        took, printed = await page.print_five_labels(td.MemoryStore())
    else:
        async with td.open_store(f"sqlite:///{tmp_path / 'labels.db'}") as store:
            took, printed = await page.print_five_labels(store)
    assert printed == [5.0, 1.0, 1.0, 1.0, 1.0]
    assert took == 5.0
