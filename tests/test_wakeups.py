"""Cross-process wake-ups on SQLite (see tests/wakeups.py): two stores on
one file, as two processes have, and a client in a real second process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
import wakeups


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


SCENARIOS = [
    wakeups.client_signal,
    wakeups.client_cancel,
    wakeups.client_retry,
    wakeups.client_start,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_a_client_write_wakes_the_run_at_once(
    url: str, scenario: Callable[..., Awaitable[None]]
) -> None:
    await scenario(url, process=False)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_a_client_in_another_process_wakes_the_run_at_once(
    url: str, scenario: Callable[..., Awaitable[None]]
) -> None:
    await scenario(url, process=True)


async def test_a_client_result_is_woken_by_the_end(url: str) -> None:
    await wakeups.client_result_is_woken(url)


async def test_an_engine_without_the_workflow_signals(url: str) -> None:
    await wakeups.engine_without_the_workflow_signals(url)


async def test_a_sqlite_watch_says_when_it_missed_announcements(url: str) -> None:
    from trio_durable._stores._ops import Announce
    from trio_durable._stores._sqlite_watch import KEEP, TRIM_EVERY

    heard: list[Any] = []
    missed = trio.Event()

    def deliver(announced: Any) -> None:
        heard.append(announced)
        if announced is None:
            missed.set()

    async with (
        td.open_store(url) as watched,
        td.open_store(url) as writer,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(watched.watch, "watcher", deliver)  # type: ignore[attr-defined]
        # More than the table keeps, in one commit: the oldest are trimmed
        # before the watch can read them.
        count = KEEP + 2 * TRIM_EVERY
        many = [Announce(run_id=f"r{i}", kind="wake", origin="writer") for i in range(count)]
        trimmed = count // TRIM_EVERY * TRIM_EVERY - KEEP
        await writer.apply(many)
        with trio.fail_after(10):
            await missed.wait()
        # What it could still read, then that it missed some.
        assert heard == [many[trimmed:], None]
        nursery.cancel_scope.cancel()


async def test_a_sqlite_watch_interval_comes_from_the_url(tmp_path: Path) -> None:
    async with td.open_store(f"sqlite:///{tmp_path / 'w.db'}?watch_interval=0.002") as store:
        assert store.watch_interval == 0.002  # type: ignore[attr-defined]
    for bad in ("0", "abc", "11", "nan"):
        with pytest.raises(td.InvalidURLError, match="watch_interval"):
            async with td.open_store(f"sqlite:///{tmp_path / 'w.db'}?watch_interval={bad}"):
                pass  # pragma: no cover
