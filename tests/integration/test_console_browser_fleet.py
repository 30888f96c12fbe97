"""The fleet and events pages in a real headless Chromium (as
tests/integration/test_console_browser.py, whose browser helpers these
tests share).

The fleet: a worker that heartbeats every second (on a memory broker that
says its announcements need heartbeats, as a server's do) holds two tasks
of group ``parcels`` in flight while three more wait at the broker, and
one task of group ``nobody`` waits with no worker at all; the page shows
the worker's heartbeat age and load and each group's backlog. The events:
an event that started a run, and two that share an open debounce window;
the page links to their runs. Screenshots go where the other browser
tests put theirs (``TRIO_DURABLE_SCREENSHOTS=docs/images`` refreshes the
ones docs/console.md shows).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from test_console_browser import (
    TOKEN,
    assert_nothing_refused,
    browser_binaries,  # noqa: F401 (the fixture)
    open_driver,
    text_waiter,
)

import trio_durable as td
from trio_durable.brokers import MemoryBroker
from trio_durable.console import serve_console

app = td.App("console-fleet")
gate = {"open": trio.Event()}


@app.step(group="parcels")
async def weigh(parcel: int) -> int:
    await gate["open"].wait()
    return parcel * 100


@app.step(group="nobody")
async def stamp(parcel: int) -> int:
    return parcel


@app.workflow()
async def weighing(ctx: td.Context, parcel: int) -> int:
    return await ctx.step(weigh, parcel)


@app.workflow()
async def stamping(ctx: td.Context, parcel: int) -> int:
    return await ctx.step(stamp, parcel)


@app.workflow(events=["parcel.arrived"])
async def receive(ctx: td.Context, parcel: int) -> int:
    return parcel


@app.workflow(events=["parcel.scanned"], debounce=3600.0)
async def scanned(ctx: td.Context, parcel: int) -> int:
    return parcel


class HeartbeatingMemoryBroker:
    """A memory broker whose announcements need heartbeats (the memory
    broker's own go with its process and need none)."""

    needs_heartbeat = True

    def __init__(self, inner: MemoryBroker) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def drive_fleet(url: str, images: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)
    try:
        driver.get(f"{url}/fleet")
        parcels = 'tr[data-group="parcels"]'
        wait_for_text(f"{parcels} td.backlog", "3")
        wait_for_text(f"{parcels} td.in-flight", "2")
        wait_for_text('tr[data-group="nobody"] td.backlog', "1")
        wait_for_text('tr[data-group="nobody"]', "none")
        # The heartbeat's age, as a relative time the page keeps current.
        wait_for_text('details[data-worker="worker-1"] .heartbeat', " ago")
        age = driver.find_element(By.CSS_SELECTOR, 'details[data-worker="worker-1"] .heartbeat')
        assert age.text.startswith("heartbeat ")
        assert "2 in flight" in driver.find_element(By.CSS_SELECTOR, "details .load").text
        driver.save_screenshot(images / "console-fleet.png")
        driver.get(f"{url}/queues")
        wait_for_text('table.backlogs tr[data-group="parcels"] td.backlog', "3")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


@pytest.mark.usefixtures("browser_binaries")
async def test_the_fleet_page_in_a_browser(tmp_path: Path) -> None:
    gate["open"] = trio.Event()
    broker: Any = HeartbeatingMemoryBroker(MemoryBroker())
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'fleet.db'}", broker=broker) as engine,
        td.open_worker(
            app,
            broker=broker,
            groups=["parcels"],
            instance_id="worker-1",
            heartbeat=1.0,
            concurrency=2,
        ),
        trio.open_nursery() as nursery,
    ):
        for parcel in range(5):
            await engine.start(weighing, parcel, run_id=f"weigh-{parcel}")
        await engine.start(stamping, 1, run_id="stamp-1")
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive_fleet, url, images)
        assert (images / "console-fleet.png").stat().st_size > 10_000
        gate["open"].set()
        for parcel in range(5):
            assert await engine.result(f"weigh-{parcel}") == parcel * 100
        nursery.cancel_scope.cancel()


def drive_events(url: str, images: Path, run_ids: Sequence[str]) -> None:
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)
    try:
        driver.get(f"{url}/events")
        wait_for_text('tr[data-event="arrived-1"]', "completed")
        wait_for_text('table.windows tr[data-run="scan-1.scanned"]', "scanned")
        assert "2" in driver.find_element(By.CSS_SELECTOR, "table.windows td.num").text
        driver.save_screenshot(images / "console-events.png")
        # The run an event started, one click away.
        driver.find_element(By.CSS_SELECTOR, 'tr[data-event="arrived-1"] a.event-run').click()
        wait_for_text("#run-status", "completed")
        assert driver.current_url.endswith(f"/runs/{run_ids[0]}")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


@pytest.mark.usefixtures("browser_binaries")
async def test_the_events_page_in_a_browser(tmp_path: Path) -> None:
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'events.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.send_event("parcel.arrived", 7, event_id="arrived-1")
        assert await engine.result("arrived-1.receive") == 7
        await engine.send_event("parcel.scanned", 1, key="dock-4", event_id="scan-1")
        await engine.send_event("parcel.scanned", 2, key="dock-4", event_id="scan-2")
        with pytest.warns(td.UnsubscribedEventWarning):
            await engine.send_event("parcel.lost", 9, event_id="lost-1")
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive_events, url, images, ["arrived-1.receive"])
        assert (images / "console-events.png").stat().st_size > 10_000
        nursery.cancel_scope.cancel()
