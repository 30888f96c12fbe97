"""Concurrency keys, singletons and dedup keys (of runs and of steps) with
two engines on one PostgreSQL database (the same scenarios as on SQLite, in
real time)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from servers.postgres import scratch_schema
from test_concurrency_keys import key_limit_across_engines, limited_one
from test_singletons import singleton_race
from test_step_dedup import dedup_race


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_a_key_limit_holds_with_100_starts_on_two_engines(url: str) -> None:
    # One at a time per key, so that body entries are admissions, in order.
    await key_limit_across_engines(url, workflow=limited_one, limit=1, hold=0.05, every=0.02)


async def test_two_engines_racing_start_one_run_per_key(url: str) -> None:
    await singleton_race(url, sleep=3.0)


async def test_racing_step_calls_on_two_engines_let_one_wait(url: str) -> None:
    await dedup_race(url, seconds=1.0)
