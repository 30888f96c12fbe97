"""Webhooks and breakpoints on PostgreSQL: across engines and a client on
its own store object, with LISTEN/NOTIFY carrying breakpoint changes (the
same scenarios as on SQLite: tests/test_breakpoints.py,
tests/test_webhooks.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from servers.postgres import scratch_schema
from test_breakpoints import breakpoints_across_engines
from test_webhooks import deliveries_race, webhook_across_engines


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_breakpoints_across_engines_on_postgres(url: str) -> None:
    await breakpoints_across_engines(url)


async def test_a_webhook_across_engines_on_postgres(url: str) -> None:
    await webhook_across_engines(url, "pg-restart")


async def test_two_deliveries_of_one_token_on_postgres(url: str) -> None:
    await deliveries_race(url, "pg-race")
