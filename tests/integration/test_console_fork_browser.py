"""The console's fork and retry-from forms in a real headless Chromium
(Debian's ``chromium`` and ``chromium-driver`` through selenium, as in
test_console_browser.py): a failed run is forked from the seq of its broken
step once the step is fixed, the browser lands on the fork's page and sees
it complete; a refused seq is said in the flash; the original is retried in
place from a seq."""

from __future__ import annotations

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
)

import trio_durable as td
from trio_durable.console import serve_console

app = td.App("console-fork-browser")
STATE: Final[dict[str, bool]] = {"fixed": False}

__all__ = ["browser_binaries"]


@app.step()
async def load(n: int) -> int:
    return n


@app.step()
async def score(n: int) -> int:
    if not STATE["fixed"]:
        raise td.FatalError("score is broken", code="bug")
    return 10 * n


@app.workflow()
async def scoring(ctx: td.Context, n: int) -> int:
    loaded = await ctx.step(load, n)  # seq 1
    return await ctx.step(score, loaded)  # seq 2


def drive(url: str, engine: td.Engine) -> None:
    """The browser's part, in a worker thread."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    driver = open_driver()

    def wait_for_text(css: str, text: str) -> None:
        # The page swaps its main part as it refreshes itself, and a fork
        # opens a page of its own: an element read as it goes (stale, or
        # of the page before) is looked for again.
        wait = WebDriverWait(driver, WAIT, ignored_exceptions=(WebDriverException,))
        wait.until(
            lambda d: any(text in e.text for e in d.find_elements(By.CSS_SELECTOR, css)),
            f"{css!r} never showed {text!r}",
        )

    def submit(action: str, **fields: str) -> None:
        """Fill the form of ``action`` and send it; looked for again if the
        page swapped it before the first field was typed in (a form typed
        in is never swapped)."""
        for _ in range(10):
            try:
                form = driver.find_element(By.CSS_SELECTOR, f'form[data-action="{action}"]')
                for name, value in fields.items():
                    # Typed over what is there, never emptied first: an
                    # emptied form may be swapped before it is typed in.
                    form.find_element(By.NAME, name).send_keys(Keys.CONTROL, "a", Keys.NULL, value)
                form.find_element(By.TAG_NAME, "button").click()
                return
            except WebDriverException:
                # Swapped under the driver's hands (stale, detached, not
                # interactable yet): looked for again.
                continue
        raise AssertionError(f"the {action} form kept being swapped")

    try:
        driver.get(f"{url}/runs/s")
        wait_for_text("#run-status", "failed")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        # A seq past the end is refused, and said.
        submit("fork", from_seq="7")
        wait_for_text("#flash.error", "fork refused (400): from_seq 7 is out of range")
        STATE["fixed"] = True
        submit("fork", from_seq="2", new_run_id="s-fixed")
        # The browser goes to the fork's page, which shows it complete.
        wait_for_text("h1", "s-fixed")
        wait_for_text("#run-status", "completed")
        wait_for_text("section.lineage", "Forked from: s at seq 2")
        # The token is kept for the session.
        driver.get(f"{url}/runs/s")
        wait_for_text("#run-status", "failed")
        submit("retry-from", from_seq="2")
        wait_for_text("#flash.ok", "retry-from: accepted")
        wait_for_text("#run-status", "completed")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_fork_and_retry_from_a_seq_in_a_browser(
    tmp_path: Path, browser_binaries: None
) -> None:
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.start(scoring, 4, run_id="s")
        with pytest.raises(td.RunFailed):
            await engine.result("s")
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        await trio.to_thread.run_sync(drive, url, engine)
        with trio.fail_after(30):
            assert await engine.result("s-fixed") == 40
            assert await engine.result("s") == 40
        nursery.cancel_scope.cancel()
