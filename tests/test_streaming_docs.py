"""The code of docs/streaming.md runs as the page says: its blocks, joined,
are one module; the tests run its functions under a MockClock and check
that each ``print(...)  # expected`` prints what its comment says."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "streaming.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def page_module() -> types.ModuleType:
    """The page's blocks as a module (made afresh: each test registers the
    page's app anew)."""
    module = types.ModuleType("streaming_page")
    module.__file__ = str(PAGE)
    exec(compile("\n".join(BLOCKS), str(PAGE), "exec"), module.__dict__)
    return module


async def test_reading_an_answer(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    page = page_module()
    await page.read_an_answer()
    assert capsys.readouterr().out.splitlines() == [
        "0 {'token': 'Durable'}",
        "1 {'token': ' workflows'}",
        "2 {'token': ' on'}",
        "3 {'token': ' Trio'}",
        "4 {'token': '.'}",
        "5 {'done': True}",
        "Durable workflows on Trio.",
    ]


async def test_a_client_resumes_from_its_last_offset(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    page = page_module()
    store = td.MemoryStore()
    async with td.open_engine(page.app, store=store) as engine:
        await engine.start(page.answer, "trio", run_id="answer-2")
        await page.read_from_a_client(store)
    assert capsys.readouterr().out.splitlines() == ["[0, 1, 2, 3, 4, 5]"]


def test_the_page_s_comments_say_what_its_code_prints() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "print(offset, value)  # 0 {'token': 'Durable'}" in text
    assert "print(await run.result())  # Durable workflows on Trio." in text
    assert "print(seen)  # [0, 1, 2, 3, 4, 5]" in text
