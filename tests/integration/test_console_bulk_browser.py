"""A bulk retry from the console's runs list in a real headless Chromium
(Debian's ``chromium`` and ``chromium-driver`` through selenium, as in
test_console_browser.py): the failed runs of one workflow, once their step
is fixed, are counted on the list filtered by that workflow, refused
without the token, then retried with it after the confirmation; the page
follows the operation's progress until it finished, and the list, never
reloaded, shows them completed while another workflow's failed runs stay
failed."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Final

import pytest
import trio
from test_console_browser import (
    TOKEN,
    WAIT,
    assert_nothing_refused,
    browser_binaries,
    open_driver,
    text_waiter,
)

import trio_durable as td
from trio_durable.console import serve_console

app = td.App("console-bulk-browser")
STATE: Final[dict[str, bool]] = {"fixed": False}
FAILED: Final = 12

__all__ = ["browser_binaries"]


@app.step(retry=td.Retry(attempts=1))
async def settle(invoice: int) -> int:
    if not STATE["fixed"]:
        raise td.FatalError(f"invoice {invoice} hit the bug", code="bug")
    return invoice


@app.workflow()
async def billing(ctx: td.Context, invoice: int) -> int:
    return await ctx.step(settle, invoice)


@app.workflow()
async def other(ctx: td.Context, invoice: int) -> int:
    return await ctx.step(settle, invoice)


def drive(url: str, engine: td.Engine, images: Path) -> None:
    """The browser's part, in a worker thread."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)
    try:
        driver.get(f"{url}/?workflow=billing")
        wait_for_text("a.chip.status-failed", f"failed {FAILED}")

        def bulk(action: str) -> None:
            # The fold may be replaced by a live refresh: opened each time.
            panel = driver.find_element(By.CSS_SELECTOR, "details.bulk")
            if not panel.get_attribute("open"):
                panel.find_element(By.TAG_NAME, "summary").click()
            Select(driver.find_element(By.NAME, "bulk_action")).select_by_value(action)
            driver.find_element(By.CSS_SELECTOR, "#bulk-form button[type=submit]").click()

        # Counted (no token needed), confirmed, then refused without the token.
        bulk("retry")
        wait_for_text("dialog#bulk-confirm", f"retry {FAILED} runs?")
        driver.find_element(By.ID, "bulk-go").click()
        wait_for_text("#flash.error", "this action needs the console's bearer token")
        assert trio.from_thread.run(engine.count_runs) == {"failed": FAILED + 2}

        driver.find_element(By.ID, "token").send_keys(TOKEN)
        bulk("retry")
        wait_for_text("dialog#bulk-confirm", "first: billing-11 billing-10")
        driver.save_screenshot(images / "console-bulk-confirm.png")
        driver.find_element(By.ID, "bulk-go").click()
        wait_for_text("#flash.ok", f"retry: retried {FAILED} runs (operation retry-")
        # The list, refreshed live, shows them completed and the operation finished.
        WebDriverWait(driver, WAIT).until(
            lambda d: not d.find_elements(By.CSS_SELECTOR, "a.chip.status-failed"),
            "the list still counts failed runs",
        )
        wait_for_text("a.chip.status-completed", f"completed {FAILED}")
        wait_for_text("table.bulk-operations td.bulk-state", "finished")
        statuses = {
            cell.text for cell in driver.find_elements(By.CSS_SELECTOR, "table.runs .status")
        }
        assert statuses == {"completed"}, statuses
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_a_bulk_retry_from_the_runs_list_in_a_browser(
    tmp_path: Path, browser_binaries: None
) -> None:
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        for i in range(FAILED):
            await engine.start(billing, i, run_id=f"billing-{i}")
        for i in range(2):
            await engine.start(other, i, run_id=f"other-{i}")
        await engine.drain()
        STATE["fixed"] = True
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive, url, engine, images)
        assert await engine.count_runs(workflow="billing") == {"completed": FAILED}
        # The filter held: the other workflow's failed runs were not retried.
        assert await engine.count_runs(workflow="other") == {"failed": 2}
        nursery.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def _broken() -> None:
    STATE["fixed"] = False
