"""The code of docs/schedules.md runs as the page says: its Python blocks,
joined in order, make one module, and the tests below run what it
defines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td

PAGE = Path(__file__).resolve().parents[1] / "docs" / "schedules.md"


@pytest.fixture
def page() -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {"__name__": "schedules_page"}
    exec(compile("\n".join(blocks), str(PAGE), "exec"), namespace)
    return namespace


def test_the_declaration_is_checked(page: dict[str, Any]) -> None:
    app: td.App = page["app"]
    [spec] = app.schedules
    assert (spec.name, spec.cron, spec.timezone) == (
        "nightly-report",
        "30 2 * * *",
        "Europe/Berlin",
    )
    with pytest.raises(td.ScheduleError):
        app.schedule("nightly-report", page["nightly_report"], cron="30 2 * * *")


async def test_the_run_time_calls_run(
    page: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    async with td.open_engine(page["app"]) as engine:
        await page["manage"](engine)
        with pytest.raises(td.ScheduleNotFoundError):
            await engine.get_schedule("hourly-sync")
        assert (await engine.get_schedule("nightly-report")).jitter == 30


async def test_the_dst_example_gives_what_the_page_says(
    page: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    assert await page["dst_ticks"]() == [
        "night@2026-10-25T00:30:00Z",
        "night@2026-10-25T01:30:00Z",
    ]
    assert "['night@2026-10-25T00:30:00Z', 'night@2026-10-25T01:30:00Z']" in PAGE.read_text()
