"""Shared fixtures.

pytest-trio runs every ``async def`` test (``trio_mode = true``). Tests that
involve time take the ``autojump_clock`` fixture, pytest-trio's
``MockClock(autojump_threshold=0)``, so virtual time jumps as soon as every
task is blocked and asserted times are exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td

# The conformance suites are plain asserts in a library module: rewritten,
# their failures show the values compared. Registered before anything
# imports them.
pytest.register_assert_rewrite("trio_durable.testing.conformance")

WALL_START = 1_700_000_000.0
"""Durable time at Trio time 0 in every test, so durable times are exact."""


def fixed_wall() -> float:
    """A wall clock that moves with Trio's clock: engines opened at different
    moments of one test agree on durable time."""
    return WALL_START + trio.current_time()


EngineFactory = Callable[..., AbstractAsyncContextManager[td.Engine]]


@pytest.fixture
def open_test_engine() -> EngineFactory:
    """``open_engine`` with a fixed seed and wall clock (override as needed)."""

    @asynccontextmanager
    async def factory(app: td.App, **kwargs: Any) -> AsyncIterator[td.Engine]:
        kwargs.setdefault("seed", 0)
        kwargs.setdefault("wall_clock", fixed_wall)
        async with td.open_engine(app, **kwargs) as engine:
            yield engine

    return factory


@asynccontextmanager
async def shared_store(kind: str, tmp_path: Path) -> AsyncIterator[td.Store]:
    """One store that several engines of a test share: a `MemoryStore`
    (``kind`` "memory") or one SQLite file under ``tmp_path``."""
    if kind == "memory":
        yield td.MemoryStore()
    else:
        async with td.open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
            yield store


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which `shared_store` a test runs on: each test that takes it runs on
    both (a module may define its own, with other kinds)."""
    return str(request.param)


StoreEngineFactory = Callable[..., AbstractAsyncContextManager[tuple[td.Store, td.Engine]]]


@pytest.fixture
def open_store_engine(
    kind: str, tmp_path: Path, open_test_engine: EngineFactory
) -> StoreEngineFactory:
    """``open_test_engine`` on the test's ``kind`` of `shared_store`: opens
    both and yields them, the store first."""

    @asynccontextmanager
    async def factory(app: td.App, **kwargs: Any) -> AsyncIterator[tuple[td.Store, td.Engine]]:
        async with (
            shared_store(kind, tmp_path) as store,
            open_test_engine(app, store=store, **kwargs) as engine,
        ):
            yield store, engine

    return factory
