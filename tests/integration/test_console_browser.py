"""The console in a real headless Chromium: Debian's ``chromium`` and
``chromium-driver`` driven by selenium (never a downloaded browser).

An engine on SQLite with an embedded worker runs a fan of 2,000 remote
steps, 50 of which fail on their first execution; the console is served on
a real socket. The browser lists the runs, opens the run, pages through its
failed members, is refused an action without the token, then retries the
run with the token and watches the page refresh itself until the run has
completed, where no action but a fork is offered any more. It takes a
screenshot of each stage into a temporary folder; with
``TRIO_DURABLE_SCREENSHOTS=docs/images`` it refreshes the ones
docs/console.md shows.

Selenium blocks, so it runs in a worker thread while Trio serves the
console and runs the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
import trio

import trio_durable as td
from trio_durable.console import serve_console

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

CHROMIUM: Final = Path("/usr/bin/chromium")
CHROMEDRIVER: Final = Path("/usr/bin/chromedriver")
TOKEN: Final = "console-test-token"
WIDTH: Final = 2000
FAILING: Final = frozenset(range(1, WIDTH, 40))
"""The 50 members that fail on their first execution."""
WAIT: Final = 120.0
"""Seconds the browser waits for a page to show something (2 shared cores)."""

app = td.App("console-browser")


class World:
    """Whether the failing members are fixed (the test flips it)."""

    fixed = False
    weighings = 0


@app.step(group="g", retry=td.Retry(attempts=1))
async def deliver(index: int) -> int:
    if index in FAILING and not World.fixed:
        raise td.FatalError(f"parcel {index} was lost", code="lost", details={"index": index})
    return index


@app.workflow()
async def big_fan(ctx: td.Context, width: int) -> int:
    return sum(await ctx.all(deliver, list(range(width)), mode="wait_all"))


@app.workflow()
async def small(ctx: td.Context, value: int) -> int:
    return value


@app.step()
async def pack(item: str) -> str:
    return f"packed {item}"


@app.workflow()
async def packing(ctx: td.Context, item: str) -> str:
    return await ctx.step(pack, item)


@app.step(retry=td.Retry(attempts=2, backoff=0.01))
async def weigh(parcel: dict[str, object]) -> dict[str, object]:
    if World.weighings == 0:
        World.weighings += 1
        raise ValueError("the scale was not ready")
    return {"grams": 1250, "parcel": parcel["id"]}


@app.step(group="ghost")
async def label(parcel: dict[str, object]) -> str:
    return f"label for {parcel['id']}"


@app.workflow()
async def ship(ctx: td.Context, parcel: dict[str, object]) -> dict[str, object]:
    weight = await ctx.step(weigh, parcel)
    await ctx.sleep(0.2)
    return {"weight": weight, "shipped": True}


@app.workflow()
async def stuck(ctx: td.Context, parcel: dict[str, object]) -> str:
    await ctx.step(weigh, parcel)
    return await ctx.step(label, parcel)


@pytest.fixture
def browser_binaries() -> Iterator[None]:
    """Skips the test when Chromium or its driver is not installed, except
    under ``CI=true`` (``.ci/run`` installs them), where that fails it."""
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing:
        message = f"{' and '.join(missing)} missing: install Debian's chromium and chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # Selenium must use the system's browser and driver, never fetch one.
    previous = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    yield
    if previous is None:
        os.environ.pop("SE_OFFLINE", None)
    else:
        os.environ["SE_OFFLINE"] = previous


def open_driver() -> WebDriver:
    """A headless Chromium: the system's browser through its driver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(argument)
    # The browser's console, to see what the page's Content-Security-Policy refused.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def assert_nothing_refused(driver: WebDriver) -> None:
    """No script, style or request of the pages was refused by their
    Content-Security-Policy (the browser says so in its console)."""
    # What WebDriver.get_log does (only Chromium's driver has it).
    logs = driver.execute("getLog", {"type": "browser"})["value"]
    refused = [entry["message"] for entry in logs if "Content Security Policy" in entry["message"]]
    assert refused == []


def text_waiter(driver: WebDriver) -> Callable[[str, str], None]:
    """Waits until an element matching a CSS selector shows a text. The page
    refreshes itself, so an element found may be replaced before its text is
    read: such a look is taken again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def wait_for_text(css: str, text: str) -> None:
        def shown(d: WebDriver) -> bool:
            return any(text in e.text for e in d.find_elements(By.CSS_SELECTOR, css))

        wait = WebDriverWait(driver, WAIT, ignored_exceptions=(StaleElementReferenceException,))
        wait.until(shown, f"{css!r} never showed {text!r}")

    return wait_for_text


def drive(url: str, engine: td.Engine, images: Path) -> None:
    """The browser's part, in a worker thread."""
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)

    def run_status() -> str:
        return trio.from_thread.run(engine.get, "big").status

    try:
        # The runs list: the runs, their counts per status.
        driver.get(f"{url}/")
        wait_for_text("table.runs", "big")
        assert driver.find_element(By.LINK_TEXT, "small-1")
        chips = driver.find_element(By.CSS_SELECTOR, ".chips").text
        assert "failed 1" in chips
        assert "completed 5" in chips
        driver.save_screenshot(images / "console-runs.png")

        # The run: failed, its fan of 2,000 with 50 failed members shown first.
        driver.find_element(By.LINK_TEXT, "big").click()
        wait_for_text("#run-status", "failed")
        fan = driver.find_element(By.CSS_SELECTOR, "section.fan")
        assert fan.find_element(By.CSS_SELECTOR, ".count-failed").text == "50"
        assert fan.find_element(By.CSS_SELECTOR, ".count-completed").text == "1950"
        assert "Failed members 1 to 50 of 50" in fan.text
        rows = fan.find_elements(By.CSS_SELECTOR, "table.members tr.entry")
        assert len(rows) == 50
        assert all("failed" in (row.get_attribute("class") or "") for row in rows)
        # The progress bar: 1,950 completed, 50 failed (2.5% of its width).
        bar = fan.find_element(By.CSS_SELECTOR, "svg.bar")
        failed_part = bar.find_element(By.CSS_SELECTOR, "rect.seg-failed")
        assert failed_part.size["width"] / bar.size["width"] == pytest.approx(0.025, abs=0.01)
        driver.save_screenshot(images / "console-run-fan.png")

        # Paging through the failed members, 20 at a time.
        driver.get(f"{url}/runs/big?fan=1&failed=1&limit=20")
        seen: list[str] = []
        for expected in ("1 to 20 of 50", "21 to 40 of 50", "41 to 50 of 50"):
            wait_for_text("section.fan .page-info", f"Failed members {expected}")
            cells = driver.find_elements(By.CSS_SELECTOR, "table.members tr.entry td:first-child")
            seen.extend(cell.text for cell in cells)
            if expected == "21 to 40 of 50":
                # An error's message and traceback open under its row.
                driver.find_element(By.CSS_SELECTOR, "table.members details.error summary").click()
                wait_for_text("table.members details.error[open]", "parcel 801 was lost")
                driver.save_screenshot(images / "console-failed-members.png")
            nexts = driver.find_elements(By.CSS_SELECTOR, "section.fan a.next")
            if nexts:
                nexts[0].click()
        # Member i sits at seq i + 1.
        assert seen == [str(index + 1) for index in sorted(FAILING)]
        driver.find_element(By.CSS_SELECTOR, "section.fan a.prev").click()
        wait_for_text("section.fan .page-info", "Failed members 21 to 40 of 50")

        # An action without the token is refused, and nothing changes.
        driver.get(f"{url}/runs/big")
        wait_for_text("#run-status", "failed")
        driver.find_element(By.ID, "retry").click()
        wait_for_text("#flash.error", "this action needs the console's bearer token")
        assert "retry refused (401)" in driver.find_element(By.ID, "flash").text
        assert run_status() == "failed"
        driver.save_screenshot(images / "console-refused.png")

        # With the token the retry goes through; the page, never reloaded,
        # refreshes itself until the run has completed.
        World.fixed = True
        driver.execute_script("window.notReloaded = true")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "retry").click()
        wait_for_text("#flash.ok", "retry: accepted")
        wait_for_text("#run-status", "completed")
        assert driver.execute_script("return window.notReloaded") is True
        fan = driver.find_element(By.CSS_SELECTOR, "section.fan")
        assert fan.find_element(By.CSS_SELECTOR, ".count-completed").text == "2000"
        assert fan.find_element(By.CSS_SELECTOR, ".count-failed").text == "0"
        assert run_status() == "completed"
        driver.save_screenshot(images / "console-completed.png")

        # A completed run offers no signal, cancel or retry.
        for action in ("signal", "cancel", "retry"):
            assert not driver.find_elements(By.CSS_SELECTOR, f'form[data-action="{action}"]')
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_the_console_in_a_browser(tmp_path: Path, browser_binaries: None) -> None:
    World.fixed = False
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}", serve=["g"]) as engine,
        trio.open_nursery() as nursery,
    ):
        for i in range(1, 6):
            tags = ["nightly"] if i % 2 else ["manual", "ops"]
            await engine.start(small, i, run_id=f"small-{i}", tags=tags)
            assert await engine.result(f"small-{i}") == i
        await engine.start(big_fan, WIDTH, run_id="big")
        with pytest.raises(td.RunFailed) as failed:
            await engine.result("big")
        assert failed.value.code == "gather_failed"
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive, url, engine, images)
        for stage in ("runs", "run-fan", "failed-members", "refused", "completed"):
            assert (images / f"console-{stage}.png").stat().st_size > 10_000
        assert await engine.result("big") == sum(range(WIDTH))
        nursery.cancel_scope.cancel()


def drive_breakpoints(url: str, engine: td.Engine, images: Path) -> None:
    """Set a breakpoint on the breakpoints page, watch two runs pause at
    it, continue one and skip the step of the other, in a worker thread."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)

    def in_row(run_id: str, css: str) -> WebElement:
        row = f"//table[contains(@class, 'paused-runs')]//tr[td/a[text()='{run_id}']]"
        return driver.find_element(By.XPATH, row).find_element(By.CSS_SELECTOR, css)

    def act(run_id: str, css: str, action: Callable[[WebElement], None]) -> None:
        # The page may swap its content (live refresh) between finding
        # the element and acting on it: find it again then.
        for _ in range(5):
            try:
                action(in_row(run_id, css))
                return
            except StaleElementReferenceException:
                continue
        raise AssertionError(f"{css} of {run_id} kept going stale")

    def click(run_id: str, css: str) -> None:
        act(run_id, css, lambda element: element.click())

    try:
        driver.get(f"{url}/breakpoints")
        wait_for_text("main", "No breakpoint is set.")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        form = driver.find_element(By.CSS_SELECTOR, 'form[data-action="set-breakpoint"]')
        form.find_element(By.NAME, "workflow").send_keys("packing")
        form.find_element(By.NAME, "step").send_keys("pack")
        form.find_element(By.TAG_NAME, "button").click()
        wait_for_text("#flash.ok", "set-breakpoint: accepted")
        wait_for_text("table.breakpoints", "packing")

        for item in ("a", "b"):
            trio.from_thread.run(partial(engine.start, packing, item, run_id=f"pack-{item}"))
        # Both pause before the step, and the page shows them on its own.
        wait_for_text("table.paused-runs", "pack-a")
        wait_for_text("table.paused-runs", "pack-b")
        driver.save_screenshot(images / "console-breakpoints.png")

        click("pack-a", 'form[data-action="continue"] button')
        wait_for_text("#flash.ok", "continue: accepted")
        # Typing keeps the page from refreshing under the field.
        act(
            "pack-b",
            'form[data-action="skip"] textarea',
            lambda element: element.send_keys('"packed by hand"'),
        )
        click("pack-b", 'form[data-action="skip"] button')
        wait_for_text("#flash.ok", "skip: accepted")
        wait_for_text("main", "No run is paused.")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_breakpoints_in_a_browser(tmp_path: Path, browser_binaries: None) -> None:
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive_breakpoints, url, engine, images)
        with trio.fail_after(30):
            assert await engine.result("pack-a") == "packed a"
            assert await engine.result("pack-b") == "packed by hand"
        [entry] = [e for e in (await engine.history("pack-b")).entries if e.name == "pack"]
        assert (entry.status, entry.attempts) == ("completed", 0)
        assert (images / "console-breakpoints.png").stat().st_size > 10_000
        nursery.cancel_scope.cancel()


PARCEL: Final[dict[str, object]] = {
    "id": "p-7",
    "to": "Lyon",
    "items": [{"sku": f"sku-{i}", "n": i} for i in range(60)],
}


def drive_run_page(url: str, engine: td.Engine, images: Path) -> None:
    """The run page of a completed run (its input and output in the JSON
    viewer, the timeline's chart with durations, an attempt's error) and
    of a run whose step waits for a group no worker serves, in a worker
    thread."""
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)
    try:
        driver.get(f"{url}/runs/shipped")
        wait_for_text("#run-status", "completed")
        # Input and output in the viewer: a tree, the long list cut.
        wait_for_text(".run-input .json-tree", '"to": "Lyon"')
        inputs = driver.find_element(By.CSS_SELECTOR, ".run-input .json-tree")
        assert "… 10 more" in inputs.text
        inputs.find_element(By.CSS_SELECTOR, "button.show-all").click()
        wait_for_text(".run-input .json-tree", "59:")
        wait_for_text(".run-output .json-tree", '"shipped": true')
        # The chart: the run's bar and one per operation, with durations.
        chart = driver.find_element(By.CSS_SELECTOR, "svg.chart")
        assert len(chart.find_elements(By.CSS_SELECTOR, "g.row")) == 3
        took = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.took")]
        assert len(took) == 3
        assert all(t.endswith(("ms", "s")) for t in took)
        cells = driver.find_elements(By.CSS_SELECTOR, "section.timeline td.took")
        assert all(cell.text != "—" for cell in cells)
        # The step's first attempt failed: its error and traceback, the
        # user's frames first and trio-durable's folded.
        row = driver.find_element(By.CSS_SELECTOR, "section.timeline tr.entry")
        assert "attempt 1" in row.text
        row.find_element(By.CSS_SELECTOR, "details.error summary").click()
        wait_for_text("section.timeline details.error[open]", "the scale was not ready")
        assert "raised in" in row.find_element(By.CSS_SELECTOR, ".traceback").text
        assert row.find_elements(By.CSS_SELECTOR, "details.own-frames")
        # Relative times, the exact time on hover.
        created = driver.find_element(By.CSS_SELECTOR, ".facts time")
        assert created.text.endswith("ago")
        assert (created.get_attribute("title") or "").endswith("Z")
        # A completed run offers neither cancel nor retry.
        assert not driver.find_elements(By.ID, "cancel")
        assert not driver.find_elements(By.ID, "retry")
        driver.execute_script("window.scrollTo(0, 0)")
        driver.save_screenshot(images / "console-run.png")

        # Dark mode, as the system asks (prefers-color-scheme).
        driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
        )
        driver.get(f"{url}/")
        wait_for_text("table.runs", "shipped")
        assert "stuck" in driver.find_element(By.CSS_SELECTOR, "table.runs").text
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(20, 23, 31)"
        driver.save_screenshot(images / "console-dark.png")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

        driver.get(f"{url}/runs/stuck")
        wait_for_text("#run-status", "suspended")
        wait_for_text("section.timeline .reason", "no live worker of group ghost")
        wait_for_text("section.timeline .reason", "waiting for")
        assert driver.find_elements(By.ID, "cancel")
        assert not driver.find_elements(By.ID, "retry")
        # The signal form sends a JSON payload, and says what it refuses.
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        signal = driver.find_element(By.CSS_SELECTOR, 'form[data-action="signal"]')
        signal.find_element(By.NAME, "name").send_keys("nudge")
        payload = signal.find_element(By.NAME, "payload")
        payload.send_keys("{not json")
        signal.find_element(By.TAG_NAME, "button").click()
        wait_for_text("#flash.error", "the payload is not JSON")
        payload.clear()
        payload.send_keys('{"by": "browser"}')
        signal.find_element(By.TAG_NAME, "button").click()
        wait_for_text("#flash.ok", "signal: accepted")
        driver.execute_script("document.querySelector('section.timeline').scrollIntoView()")
        driver.save_screenshot(images / "console-run-pending.png")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_the_run_page_in_a_browser(tmp_path: Path, browser_binaries: None) -> None:
    World.weighings = 0
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.start(ship, PARCEL, run_id="shipped")
        assert (await engine.result("shipped"))["shipped"] is True
        await engine.start(stuck, PARCEL, run_id="stuck")
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive_run_page, url, engine, images)
        for stage in ("run", "run-pending", "dark"):
            assert (images / f"console-{stage}.png").stat().st_size > 10_000
        nursery.cancel_scope.cancel()


def drive_schedules(url: str, engine: td.Engine, images: Path) -> None:
    """Pause a schedule and trigger it from its page, with the token, in a
    worker thread."""
    from selenium.webdriver.common.by import By

    driver = open_driver()
    images.mkdir(parents=True, exist_ok=True)
    wait_for_text = text_waiter(driver)
    row = 'tr[data-schedule="nightly"]'
    try:
        driver.get(f"{url}/schedules")
        wait_for_text(row, "active")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(
            By.CSS_SELECTOR, f'{row} form[data-action="pause-schedule"] button'
        ).click()
        wait_for_text("#flash.ok", "pause-schedule: accepted")
        wait_for_text(row, "paused")
        driver.find_element(
            By.CSS_SELECTOR, f'{row} form[data-action="trigger-schedule"] button'
        ).click()
        wait_for_text("#flash.ok", "trigger-schedule: accepted")
        # The run it started is its last run, and it completes.
        wait_for_text(f"{row} a.last-run", "nightly")
        info = trio.from_thread.run(engine.get_schedule, "nightly")
        assert (info.paused, info.triggered) == (True, 1)
        assert info.last_run_id is not None
        assert trio.from_thread.run(engine.result, info.last_run_id) == 3
        driver.save_screenshot(images / "console-schedules.png")
        assert_nothing_refused(driver)
    finally:
        driver.quit()


async def test_schedules_in_a_browser(tmp_path: Path, browser_binaries: None) -> None:
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'console.db'}") as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.create_schedule("nightly", small, cron="0 3 * * *", args=(3,))
        url = await nursery.start(partial(serve_console, engine, port=0, token=TOKEN))
        images = Path(os.environ.get("TRIO_DURABLE_SCREENSHOTS") or tmp_path / "images")
        await trio.to_thread.run_sync(drive_schedules, url, engine, images)
        assert (images / "console-schedules.png").stat().st_size > 10_000
        nursery.cancel_scope.cancel()
