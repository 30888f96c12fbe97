"""The code of docs/entities.md runs as the page says: its ``python``
blocks, in order, are one program, which this test runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio

PAGE = Path(__file__).resolve().parents[1] / "docs" / "entities.md"


def page_program() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {"__name__": "entities_page"}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)
    return namespace


async def test_the_pages_program_runs(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    program = page_program()
    await program["main"]()
    # The workflow's durable sleep passed in virtual time.
    assert trio.current_time() == 60
    assert capsys.readouterr().out.splitlines() == [
        "entity 'cart' takes str keys, not int 7",
        "no entity 'basket' in app 'shop' (known: cart)",
    ]
