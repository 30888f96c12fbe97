"""The code of docs/fork-and-retry.md runs as the page says: its blocks,
joined, are one module; the tests run its functions under a MockClock and
check that they print what the page's comments say (``print(...)  # text``,
and ``# prints "text"`` for what a step prints)."""

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

PAGE = Path(__file__).resolve().parents[1] / "docs" / "fork-and-retry.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def page_module() -> types.ModuleType:
    """The page's blocks as a module (made afresh: each test registers the
    page's app anew)."""
    module = types.ModuleType("fork_page")
    module.__file__ = str(PAGE)
    exec(compile("\n".join(BLOCKS), str(PAGE), "exec"), module.__dict__)
    return module


def expected_prints(function: Callable[..., Any]) -> list[str]:
    """What the function's comments say it prints, in order (a comment's
    closing parenthesis, which explains, left out)."""
    name = function.__name__
    [block] = [b for b in BLOCKS if f"def {name}(" in b]
    body = block[block.index(f"def {name}(") :]
    out = []
    for line in body.splitlines()[1:]:
        if line and not line.startswith(" "):
            break
        said = re.search(r'# prints "(.*)"$', line)
        printed = re.search(r"print\(.*\)  # (.*?)( \(.*\))?$", line)
        match = said or printed
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
    for name in ["fix_and_fork", "run_again_in_place", "refused", "from_a_client"]:
        assert expected_prints(getattr(module, name)), name


async def test_fix_and_fork(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    await run_and_compare(capsys, page_module().fix_and_fork)
    # The fork did not wait the hour again.
    assert trio.current_time() == 3600.0


async def test_run_again_in_place(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    module = page_module()
    module.broken["render"] = False
    await run_and_compare(capsys, module.run_again_in_place)
    assert trio.current_time() == 7200.0


async def test_refused(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    module = page_module()
    module.broken["render"] = False
    await run_and_compare(capsys, module.refused)


async def test_from_a_client(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    module = page_module()
    store = f"sqlite:///{tmp_path / 'reports.db'}"
    async with td.open_engine(module.app, store=store):
        async with td.open_client(store, app=module.app) as client:
            await client.start(module.report, "2026-11", run_id="nov")
            with pytest.raises(td.RunFailed):
                await client.result("nov")
        capsys.readouterr()
        module.broken["render"] = False
        await run_and_compare(capsys, module.from_a_client, store)
