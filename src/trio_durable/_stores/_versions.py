"""The schema version a SQL store's database holds, read without writing.

Opening a SQLite or PostgreSQL store creates its schema or applies the
missing migrations. ``trio-durable migrate`` says what that did, so it reads
the version before and after; the commands that only read or change runs
refuse a store that has no schema yet, rather than create one where a
mistyped URL points. A client, those commands and ``trio-durable engine``
without ``--migrate`` refuse a store whose schema is older than this
trio-durable's (`refuse_older`) before they open it: only
``trio-durable migrate`` and an engine opened from Python change a
store's schema.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Final, final
from urllib.parse import quote

import attrs
import trio

from .._base._exceptions import InvalidURLError, SchemaVersionError, StoreError
from .._base._urls import mask_url, scrub
from . import store_opener


@final
@attrs.define(frozen=True, kw_only=True)
class SchemaVersion:
    """Where a store's schema stands.

    Attributes:
      found: The version the database holds (0: no schema, or no file).
      newest: The newest version this trio-durable writes.
    """

    found: int
    newest: int


_SQL_SCHEMES: Final = frozenset({"sqlite", "postgresql", "postgres"})


def has_schema_versions(url: str) -> bool:
    """Whether ``url`` names a store whose version `schema_version` reads
    (SQLite and PostgreSQL; not the memory store, nor a store of another
    package)."""
    return url.partition("://")[0].lower() in _SQL_SCHEMES


async def schema_version(url: str) -> SchemaVersion:
    """The schema version of the SQLite or PostgreSQL store ``url`` names,
    read without creating or changing anything.

    Raises:
      InvalidURLError: The URL is malformed or not a SQL store's.
      StoreError: The database cannot be reached or read (the message shows
        the URL with its password masked).
    """
    # A bad URL, or the 'postgres' extra missing, is told as opening says it.
    store_opener(url)
    if url.partition("://")[0].lower() == "sqlite":
        from ._sqlite import threads_keep_time
        from ._sqlite_schema import SCHEMA_VERSION, parse_url

        path, _, _ = parse_url(url)
        if threads_keep_time():
            found = await trio.to_thread.run_sync(_sqlite_version, path)
        else:
            # Under a clock of the program's own (MockClock's autojump), a
            # thread's call would let the clock jump while it runs: read on
            # the Trio thread, after the checkpoint the call would make, as
            # the SQLite store does.
            await trio.lowlevel.checkpoint()
            found = _sqlite_version(path)
        return SchemaVersion(found=found, newest=SCHEMA_VERSION)
    # Imported here: psycopg comes with the 'postgres' extra only.
    import psycopg

    from ._postgres_schema import SCHEMA_VERSION as NEWEST
    from ._postgres_schema import parse_url as parse_postgres_url

    target = parse_postgres_url(url)
    try:
        found = await trio.to_thread.run_sync(_postgres_version, target.conninfo, target.schema)
    except psycopg.Error as exc:
        # As the store words it when it opens: libpq may quote the
        # connection string, password and all, so nothing is chained.
        reason = scrub(str(exc), target.conninfo)
        if type(exc) is psycopg.ProgrammingError and exc.sqlstate is None:
            raise InvalidURLError(f"bad postgresql URL {target.masked!r}: {reason}") from None
        raise StoreError(f"cannot open the PostgreSQL store at {target.masked}: {reason}") from None
    return SchemaVersion(found=found, newest=NEWEST)


async def refuse_older(url: str, opener: str) -> None:
    """Refuse a SQLite or PostgreSQL store whose schema is older than this
    trio-durable's, reading its version without writing anything; any
    other store, one with no schema yet, or a current one passes.
    ``opener`` names what would have opened it, for the message.

    Raises:
      SchemaVersionError: The store holds an older schema.
      InvalidURLError: The URL is malformed.
      StoreError: The database cannot be reached or read.
    """
    if not has_schema_versions(url):
        return
    version = await schema_version(url)
    if 0 < version.found < version.newest:
        masked = mask_url(url)
        raise SchemaVersionError(
            f"the store {masked} has schema version {version.found}, older than"
            f" {version.newest}, the version this trio-durable reads and writes; {opener}"
            f" does not change a store's schema: upgrade it first with"
            f" `trio-durable migrate --store {masked}` (engines of the release before cannot"
            " open it after)",
            found=version.found,
            newest=version.newest,
        )


def _sqlite_version(path: str) -> int:
    if not os.path.exists(path):
        return 0
    # Read-only: a file that is not a store stays as it is. With no write
    # ahead log beside it (no process has it open, or it is not in WAL
    # mode), the file holds every commit: read it as immutable, which
    # creates no -wal and -shm files either.
    options = "mode=ro" if os.path.exists(f"{path}-wal") else "mode=ro&immutable=1"
    try:
        connection = sqlite3.connect(f"file:{quote(path)}?{options}", uri=True)
        try:
            version: int = connection.execute("PRAGMA user_version").fetchone()[0]
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the SQLite store {path!r}: {exc}") from exc
    return version


def _postgres_version(conninfo: str, schema: str | None) -> int:
    from ._postgres_schema import connect

    conn: Any = connect(conninfo, schema)
    try:
        exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
        if exists is None or not exists[0]:
            return 0
        row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
        return int(row[0])
    finally:
        conn.close()
