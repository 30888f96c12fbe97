"""Cross-process wake-ups on SQLite (see tests/wakeups.py): two stores on
one file, as two processes have, and a client in a real second process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

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
