"""Schedules with two engines on one SQLite file, under `MockClock`: a
schedule across an engine restart and a DST change, and two engines never
double-starting a tick (the cases are in tests/schedule_cases.py; the same
run on PostgreSQL in tests/integration/test_schedules_postgres.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio.testing

import schedule_cases


@pytest.mark.parametrize("season", ["spring", "autumn"])
async def test_a_schedule_across_a_restart_and_a_dst_change(
    tmp_path: Path, season: str, autojump_clock: trio.testing.MockClock
) -> None:
    await schedule_cases.restart_across_dst(f"sqlite:///{tmp_path / 'runs.db'}", season)


async def test_two_engines_never_start_a_tick_twice(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    await schedule_cases.never_twice(f"sqlite:///{tmp_path / 'runs.db'}")
