"""Schedules with two engines on one PostgreSQL schema: a schedule across an
engine restart and a DST change, and two engines never double-starting a
tick (the cases of tests/schedule_cases.py, as SQLite runs them in
tests/test_schedules_fleet.py).

PostgreSQL calls run on threads, so the mock clock jumps only once every
task has been idle for a moment of real time (not at once, which would
move time while a query is in flight); start times are checked to the
minute.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio.testing

import schedule_cases
from servers.postgres import scratch_schema


@pytest.fixture
def idle_jump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


@pytest.mark.parametrize("season", ["spring", "autumn"])
async def test_a_schedule_across_a_restart_and_a_dst_change(
    url: str, season: str, idle_jump_clock: trio.testing.MockClock
) -> None:
    await schedule_cases.restart_across_dst(url, season, exact=False)


async def test_two_engines_never_start_a_tick_twice(
    url: str, idle_jump_clock: trio.testing.MockClock
) -> None:
    await schedule_cases.never_twice(url, minutes=60)
