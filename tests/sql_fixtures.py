"""Stores committed as SQL dumps (tests/data/*/store.sql), restored as the
release that wrote them left them."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def restore_dump(fixture: Path, path: Path, *, wal: bool = False) -> Path:
    """The dump ``fixture`` as a SQLite file at ``path``, at the schema
    version its first line (``-- schema version N``) gives (a dump does not
    keep ``PRAGMA user_version``), in WAL mode if ``wal``."""
    header, _, dump = fixture.read_text().partition("\n")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executescript(dump)
        connection.execute(
            f"PRAGMA user_version = {int(header.removeprefix('-- schema version '))}"
        )
        if wal:
            connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()
    return path
