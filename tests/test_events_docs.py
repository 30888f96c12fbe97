"""The code of docs/events.md runs as the page says: its blocks, joined, are
one module; the tests run its functions under a MockClock and check that
each ``print(...)  # expected`` prints what its comment says."""

from __future__ import annotations

import re
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "events.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def page_module() -> types.ModuleType:
    """The page's blocks as a module (made afresh: each test registers the
    page's app anew)."""
    module = types.ModuleType("events_page")
    module.__file__ = str(PAGE)
    exec(compile("\n".join(BLOCKS), str(PAGE), "exec"), module.__dict__)
    return module


def expected_prints(function: Callable[..., Any]) -> list[str]:
    """What the function's ``print(...)  # comment`` lines say they print,
    in order (the first word of the comment on, up to a parenthesis that
    explains it)."""
    name = function.__name__
    [block] = [b for b in BLOCKS if f"def {name}(" in b]
    body = block[block.index(f"def {name}(") :]
    out = []
    for line in body.splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        match = re.search(r"print\(.*\)  # (.*)$", line)
        if match:
            out.append(match.group(1))
    return out


async def run_and_compare(
    capsys: pytest.CaptureFixture[str], function: Callable[..., Awaitable[None]], *args: Any
) -> None:
    await function(*args)
    printed = capsys.readouterr().out.splitlines()
    assert printed == expected_prints(function)


def test_the_page_has_its_blocks() -> None:
    module = page_module()
    for name in ["place_an_order", "cancel_from_a_client", "edit_a_document", "nobody_listens"]:
        assert expected_prints(getattr(module, name)), name
    assert [wf.name for wf in module.app.workflows] == [
        "reserve_stock",
        "audit",
        "reindex",
        "changelog",
    ]


async def test_sending(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_and_compare(capsys, page_module().place_an_order)


async def test_from_a_client(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    module = page_module()
    store = f"sqlite:///{tmp_path / 'shop.db'}"
    async with td.open_engine(module.app, store=store):
        await run_and_compare(capsys, module.cancel_from_a_client, store)


async def test_debounce(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_and_compare(capsys, page_module().edit_a_document)


async def test_an_event_nobody_subscribes_to(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_and_compare(capsys, page_module().nobody_listens)
