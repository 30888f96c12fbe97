"""The schema migration of a SQLite store marks the payloads the release
before kept in band, exactly those (see tests/legacy_rows.py; a store
that release wrote itself: tests/test_legacy_envelopes.py; PostgreSQL:
tests/integration/test_payload_marks_postgres.py)."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from legacy_rows import CODEC, app, check_marked, check_read_back, set_sqlite_version, write_legacy

_MARKS_VERSION = 7
"""The SQLite schema version that marked the payloads kept in band."""


async def test_the_migration_marks_the_old_forms_and_nothing_else(
    tmp_path: Path, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with td.open_store(url) as store:
        keys = await write_legacy(store, blobs)
    # As the file of the release before the marks: version 6.
    set_sqlite_version(tmp_path / "old.db", _MARKS_VERSION - 1)
    async with td.open_store(url) as store:
        await check_marked(store, keys)
    # Again (a migration applied twice changes nothing more).
    set_sqlite_version(tmp_path / "old.db", _MARKS_VERSION - 1)
    async with td.open_store(url) as store:
        await check_marked(store, keys)
    async with open_test_engine(app, store=url, codec=CODEC, blobs=blobs) as engine:
        with trio.fail_after(600):
            await check_read_back(engine)
