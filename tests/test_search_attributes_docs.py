"""The code of docs/search-attributes.md runs as the page says: its Python
blocks, joined in order, make one module, and the tests below run what it
defines."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "search-attributes.md"


@pytest.fixture
def page() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {"__name__": "search_attributes_page"}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)
    return namespace


def test_the_declarations_are_the_table_s(page: dict[str, Any]) -> None:
    app: td.App = page["app"]
    assert app.search_attributes == {
        "amount": "int",
        "customer": "str",
        "express": "bool",
        "labels": "keywords",
        "promised": "datetime",
        "stage": "str",
    }


def test_main_returns_what_the_page_says(page: dict[str, Any]) -> None:
    found = trio.run(page["main"], clock=trio.testing.MockClock(autojump_threshold=0))
    said = re.search(r"returns `(\[\[.*?\]\])`", PAGE.read_text(), flags=re.DOTALL)
    assert said is not None
    assert found == ast.literal_eval(" ".join(said.group(1).split()))


async def test_the_workflow_ends_with_its_last_upserts(
    page: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_engine(page["app"]) as engine:
        handle = await engine.start(
            page["checkout"], 7, search_attributes={"express": True, "customer": "acme"}
        )
        assert await handle.result() == "receipt-7"
        run = await engine.get(handle.id)
        page_of_labelled = await engine.list_runs(search_attributes={"labels": "paid"})
    assert dict(run.search_attributes) == {
        "customer": "acme",
        "labels": ("paid", "shipped"),
        "stage": "shipped",
    }
    assert [r.id for r in page_of_labelled.runs] == [handle.id]
