"""Concurrency keys, singletons and dedup keys (of runs and of steps) with
two engines on one PostgreSQL database (the same scenarios as on SQLite, in
real time)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings

from admission_order import WAVES, check_admission_order
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
    await key_limit_across_engines(url, workflow=limited_one, limit=1, hold=0.05)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(waves=WAVES)
async def test_starts_that_do_not_overlap_are_admitted_in_order(
    real_server: Callable[[str], str], waves: Sequence[Sequence[int]]
) -> None:
    # Two engines, each with its own pool on a fresh schema (the property
    # of tests/admission_order.py).
    async with scratch_schema(real_server("postgres")) as url:
        await check_admission_order(url, url, waves)


async def test_two_engines_racing_start_one_run_per_key(url: str) -> None:
    await singleton_race(url)


async def test_racing_step_calls_on_two_engines_let_one_wait(url: str) -> None:
    await dedup_race(url)
