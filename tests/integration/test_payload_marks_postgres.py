"""The schema migration of a PostgreSQL store marks the payloads the
release before kept in band, exactly those (see tests/legacy_rows.py; on
SQLite: tests/test_payload_marks_migration.py). Real time (the store's
calls go to threads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest
import trio

import trio_durable as td
from legacy_rows import CODEC, app, check_marked, check_read_back, write_legacy
from servers.postgres import scratch_schema

_MARKS_VERSION = 6
"""The PostgreSQL schema version that marked the payloads kept in band."""


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def _set_back(url: str) -> None:
    """The schema as the release before the marks left it: version 5."""
    base, schema = url.partition("?")[0], url.rpartition("schema=")[2]

    def run() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                f'DELETE FROM "{schema}".schema_version WHERE version >= %s', (_MARKS_VERSION,)
            )

    await trio.to_thread.run_sync(run)


async def test_the_migration_marks_the_old_forms_and_nothing_else(url: str, tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with td.open_store(url) as store:
        keys = await write_legacy(store, blobs)
    await _set_back(url)
    async with td.open_store(url) as store:
        await check_marked(store, keys)
    await _set_back(url)
    async with td.open_store(url) as store:
        await check_marked(store, keys)
    async with td.open_engine(app, store=url, codec=CODEC, blobs=blobs) as engine:
        with trio.fail_after(60):
            await check_read_back(engine)
