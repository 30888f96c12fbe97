"""Reaching a PostgreSQL store: its URL, its connections and its schema.

The schema is versioned: the table ``schema_version`` holds the versions
applied, and `open_first` applies the missing migrations in one transaction
under an advisory lock, so several engines starting at once on an empty
database migrate it once. A database whose schema is newer than this code
refuses to open.
"""

from __future__ import annotations

import hashlib
import logging
import re
from contextlib import suppress
from typing import Any, Final, final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg import sql

from .._base._exceptions import InvalidURLError, StoreError
from .._base._urls import AMBIGUOUS_HINT, mask_url, userinfo_is_ambiguous
from ._hook_sql import TABLES as HOOK_TABLES
from ._migrations_records import MOVE_DECISIONS, MOVE_TO_RECORDS, move_admission, move_marks
from ._payload_marks_sql import POSTGRES_MIGRATION as PAYLOAD_MARKS_MIGRATION
from ._record_sql import TABLE as RECORDS_TABLE
from ._search_sql import POSTGRES_MIGRATION as SEARCH_MIGRATION
from ._values_sql import INDEXES as VALUE_INDEXES
from ._values_sql import POSTGRES_RUN_COLUMN as VALUE_RUN_COLUMN
from ._values_sql import POSTGRES_TABLE as VALUES_TABLE
from ._values_sql import RUN_OF_SCOPE as VALUE_RUN_OF_SCOPE

logger = logging.getLogger("trio_durable")

SCHEMA_VERSION: Final = 13
"""The newest schema version this module knows (rows of ``schema_version``)."""

DEFAULT_POOL_SIZE: Final = 4
"""Connections a store opens at most, unless the URL says ``?pool_size=``."""

CONNECT_TIMEOUT: Final = 10
"""Seconds a connection attempt waits, unless the URL says ``?connect_timeout=``."""

# Serializes migrations of one database by every process that opens it.
_MIGRATION_LOCK: Final = 0x7472696F5F6475  # "trio_du"

# The join barrier counts a fan's settled members by status over a seq
# range, the console sums up a fan per status over its seq range and a
# run's checkpoints for its ETag: from version 3 this index covers all
# three (index-only scans), where version 1 made it (run_id, status, seq).
CHECKPOINTS_STATUS: Final = (
    "CREATE INDEX checkpoints_status ON checkpoints"
    " (run_id, status, seq, attempts, enqueued_at, started_at, finished_at)"
)

# Each migration is the statements that take the schema from the version
# before it to its own (migration i makes version i + 1). Append only.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE runs (
            id text PRIMARY KEY,
            workflow text NOT NULL,
            version text NOT NULL,
            namespace text NOT NULL,
            status text NOT NULL,
            input text NOT NULL,
            output text,
            error text,
            tags text NOT NULL,
            parent_id text,
            parent_seq bigint,
            lease_owner text,
            lease_expiry double precision,
            wake_at double precision,
            compensate boolean NOT NULL,
            recoveries integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            -- run_due_at, kept by the database itself so that no write can
            -- forget it.
            due_at double precision GENERATED ALWAYS AS (
                CASE
                    WHEN status = 'suspended' THEN wake_at
                    WHEN status IN ('pending', 'running', 'cancelling') THEN
                        CASE WHEN lease_owner IS NOT NULL AND lease_expiry IS NOT NULL
                            THEN lease_expiry ELSE updated_at END
                END
            ) STORED
        )
        """,
        # Partial: terminal runs (most rows, in time) are never due and stay
        # out of the index; ordered by id too, so ties come out as in
        # MemoryStore and the due listing reads the index alone.
        "CREATE INDEX runs_due ON runs (due_at, id) WHERE due_at IS NOT NULL",
        "CREATE INDEX runs_created ON runs (created_at, id)",
        "CREATE INDEX runs_parent ON runs (parent_id, created_at, id) WHERE parent_id IS NOT NULL",
        # Suspended runs with no wake time are the candidates for a lost wake.
        """
        CREATE INDEX runs_waiting ON runs (created_at, id)
        WHERE status = 'suspended' AND wake_at IS NULL
        """,
        """
        CREATE TABLE checkpoints (
            run_id text NOT NULL,
            seq bigint NOT NULL,
            name text NOT NULL,
            kind text NOT NULL,
            status text NOT NULL,
            input text,
            output text,
            error text,
            errors text,
            attempts integer NOT NULL,
            worker_group text,
            child_id text,
            compensation text,
            parallel_group bigint,
            parallel_size bigint,
            parallel_mode text,
            wake_at double precision,
            enqueued_at double precision,
            started_at double precision,
            finished_at double precision,
            PRIMARY KEY (run_id, seq)
        )
        """,
        # The join barrier counts a fan's settled members by status over a
        # seq range; this index answers that without touching the rows.
        "CREATE INDEX checkpoints_status ON checkpoints (run_id, status, seq)",
        """
        CREATE TABLE signal_waiters (
            token text PRIMARY KEY,
            run_id text NOT NULL,
            seq bigint NOT NULL
        )
        """,
        """
        CREATE TABLE buffered_signals (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            token text NOT NULL,
            payload text NOT NULL
        )
        """,
        "CREATE INDEX buffered_signals_token ON buffered_signals (token, id)",
        """
        CREATE TABLE queue_slots (
            queue text NOT NULL,
            run_id text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (queue, run_id, seq)
        )
        """,
        """
        CREATE TABLE queue_waiters (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            queue text NOT NULL,
            run_id text NOT NULL,
            seq bigint NOT NULL,
            priority bigint NOT NULL,
            at double precision NOT NULL,
            UNIQUE (queue, run_id, seq)
        )
        """,
        "CREATE INDEX queue_waiters_line ON queue_waiters (queue, priority DESC, at, id)",
    ),
    # 2: the queries of `Store.find_runs`, newest first: each filter's index
    # ends with (created_at, id), so a page is a backward walk from the
    # cursor; run_tags holds one row per tag of a run in that order, kept by
    # triggers whoever writes the runs; runs_ended (partial: a run enters it
    # when it ends) finds what retention prunes.
    (
        "CREATE INDEX runs_status ON runs (status, created_at, id)",
        "CREATE INDEX runs_workflow ON runs (workflow, created_at, id)",
        "CREATE INDEX runs_namespace ON runs (namespace, created_at, id)",
        """
        CREATE INDEX runs_ended ON runs (status, updated_at, id)
        WHERE status IN ('cancelled', 'completed', 'dead', 'failed')
        """,
        """
        CREATE TABLE run_tags (
            tag text NOT NULL,
            created_at double precision NOT NULL,
            run_id text NOT NULL,
            PRIMARY KEY (tag, created_at, run_id)
        )
        """,
        "CREATE INDEX run_tags_run ON run_tags (run_id)",
        """
        CREATE FUNCTION run_tags_sync() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'INSERT' THEN
                DELETE FROM run_tags WHERE run_id = OLD.id;
            END IF;
            IF TG_OP <> 'DELETE' THEN
                INSERT INTO run_tags (tag, created_at, run_id)
                SELECT tag, NEW.created_at, NEW.id
                FROM json_array_elements_text(NEW.tags::json) AS tag
                ON CONFLICT DO NOTHING;
            END IF;
            RETURN NULL;
        END
        $$
        """,
        """
        CREATE TRIGGER runs_tags_insert AFTER INSERT ON runs
        FOR EACH ROW WHEN (NEW.tags <> '[]') EXECUTE FUNCTION run_tags_sync()
        """,
        """
        CREATE TRIGGER runs_tags_update AFTER UPDATE OF tags ON runs
        FOR EACH ROW WHEN (OLD.tags IS DISTINCT FROM NEW.tags) EXECUTE FUNCTION run_tags_sync()
        """,
        """
        CREATE TRIGGER runs_tags_delete AFTER DELETE ON runs
        FOR EACH ROW WHEN (OLD.tags <> '[]') EXECUTE FUNCTION run_tags_sync()
        """,
        # The tags of the runs already there.
        """
        INSERT INTO run_tags (tag, created_at, run_id)
        SELECT tag, r.created_at, r.id FROM runs r, json_array_elements_text(r.tags::json) AS tag
        WHERE r.tags <> '[]'
        ON CONFLICT DO NOTHING
        """,
    ),
    # Webhooks (by their token's hash), breakpoints, paused steps, settings;
    # ``checkpoints_status`` widened to cover what the console's fan sums
    # and run stamps read (see `._sql_queries`), made anew.
    (*HOOK_TABLES, "DROP INDEX checkpoints_status", CHECKPOINTS_STATUS),
    # 4: keyed values (see `._values_sql`).
    (VALUES_TABLE,),
    # 5: runs' search attributes, indexed in run_search (see `._search_sql`).
    SEARCH_MIGRATION,
    # 6: encrypted and offloaded payloads kept in band, marked (see
    # `._payload_marks_sql`).
    PAYLOAD_MARKS_MIGRATION,
    # 7: checkpoints' execution ids (none in the rows already there: their
    # results are matched by attempt, see docs/failure-handling.md).
    (
        "ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS executions text",
        "ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS rerun boolean NOT NULL DEFAULT false",
    ),
    # 8: the run a keyed value goes with, and the indexes retention walks
    # (see `._values_sql`); the values already there go with no run, but
    # those of a scope named after a run.
    (VALUE_RUN_COLUMN, *VALUE_RUN_OF_SCOPE, *VALUE_INDEXES),
    # 9: runs' own records (see `._record_sql`), those kept at reserved
    # seqs before moved there (see `._migrations_records`).
    (RECORDS_TABLE, *MOVE_TO_RECORDS),
    # 10: runs' admission checkpoints become records, and the queue slots
    # runs hold move to seq 0 (see `._migrations_records`).
    move_admission(
        "replace(error, '\\u0000', '\\u0020')::jsonb ->> 'code'", "to_json(queue)::text"
    ),
    # 11: remote workflows' decision checkpoints become records.
    MOVE_DECISIONS,
    # 12: what pending checkpoints and records wait for, in a column of its
    # own rather than in their error.
    (
        "ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS mark text",
        "ALTER TABLE run_records ADD COLUMN IF NOT EXISTS mark text",
        *move_marks("replace(error, '\\u0000', '\\u0020')::jsonb ->> 'code'"),
    ),
    # 13: ``terminated``, a new terminal status, in the index of ended runs
    # (its predicate names every terminal status, as retention's query does).
    (
        "DROP INDEX IF EXISTS runs_ended",
        """
        CREATE INDEX runs_ended ON runs (status, updated_at, id)
        WHERE status IN ('cancelled', 'completed', 'dead', 'failed', 'terminated')
        """,
    ),
)
assert len(_MIGRATIONS) == SCHEMA_VERSION


_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


@final
@attrs.define(frozen=True, kw_only=True)
class Target:
    """What a ``postgresql://`` URL asks for: the libpq connection string
    (without our options), the URL to show, and our options."""

    conninfo: str
    masked: str
    pool_size: int
    schema: str | None
    scope: str


def parse_url(url: str) -> Target:
    """Read a ``postgresql://`` (or ``postgres://``) URL; nothing connects.

    Raises:
      InvalidURLError: The URL is malformed or one of our options is bad.
    """
    usage = "use postgresql://user:password@host:port/database[?pool_size=N&schema=NAME]"
    # Messages show the URL masked and never quote what urllib says about it
    # (a password with an unencoded '#' or '/' is split across its parts).
    masked = mask_url(url)
    if userinfo_is_ambiguous(url):
        raise InvalidURLError(f"malformed store URL {masked!r}: {AMBIGUOUS_HINT}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidURLError(
            f"malformed store URL {masked!r}: a bad host or port ({usage})"
        ) from None
    if parts.scheme.lower() not in ("postgresql", "postgres"):
        raise InvalidURLError(f"not a postgresql URL: {masked!r} ({usage})")
    if parts.fragment:
        raise InvalidURLError(f"a postgresql URL takes no fragment: {masked!r}")
    try:
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURLError(f"malformed query in the postgresql URL {masked!r}") from None
    pool_size = DEFAULT_POOL_SIZE
    schema: str | None = None
    passed: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, value in options:
        if name in seen:
            raise InvalidURLError(f"option {name!r} given twice in the postgresql URL {masked!r}")
        seen.add(name)
        if name == "pool_size":
            if not value.isdigit() or not 1 <= int(value) <= 1000:
                raise InvalidURLError(
                    f"pool_size={value!r} in the postgresql URL {masked!r} must be an"
                    " integer from 1 to 1000"
                )
            pool_size = int(value)
        elif name == "schema":
            if not _SCHEMA_NAME.fullmatch(value):
                raise InvalidURLError(
                    f"schema={value!r} in the postgresql URL {masked!r} must be a plain"
                    " identifier (letters, digits and _, at most 63)"
                )
            schema = value
        else:
            # Everything else is libpq's (sslmode, application_name, ...); it
            # checks those when it connects.
            passed.append((name, value))
    if "connect_timeout" not in seen:
        passed.append(("connect_timeout", str(CONNECT_TIMEOUT)))
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(passed), ""))
    # What names the fleet: the server, the database and the schema (not the
    # user, nor the options).
    place = f"{parts.hostname or ''}:{port or 5432}{parts.path or '/'}#{schema or ''}"
    scope = "postgres-" + hashlib.sha256(place.encode()).hexdigest()[:16]
    return Target(conninfo=conninfo, masked=masked, pool_size=pool_size, schema=schema, scope=scope)


def connect(conninfo: str, schema: str | None) -> psycopg.Connection[Any]:
    """Open and prepare one connection (in a worker thread)."""
    conn = psycopg.connect(conninfo, autocommit=True)
    try:
        # A commit is acknowledged once it is on disk, whatever the server's
        # or the role's default says.
        conn.execute("SET synchronous_commit = on")
        conn.execute("SET default_transaction_isolation = 'read committed'")
        if schema is not None:
            conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
    except BaseException:
        conn.close()
        raise
    return conn


def close_all(connections: list[psycopg.Connection[Any]]) -> None:
    """Close connections (in a worker thread), whatever state they are in."""
    for conn in connections:
        with suppress(psycopg.Error):
            conn.close()


def _current_version(conn: psycopg.Connection[Any]) -> int:
    exists = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if exists is None or not exists[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    assert row is not None
    return int(row[0])


def migrate(conn: psycopg.Connection[Any], schema: str | None, masked: str) -> None:
    """Bring the schema up to `SCHEMA_VERSION` (in a worker thread).

    Raises:
      StoreError: The database's schema is newer than this code knows.
    """

    def check(version: int) -> int:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store at {masked} has schema version {version}, newer than"
                f" {SCHEMA_VERSION}, the newest this trio-durable knows: upgrade trio-durable"
            )
        return version

    if check(_current_version(conn)) == SCHEMA_VERSION:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        if schema is not None:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        # Another process may have migrated while we waited for the lock.
        found = check(_current_version(conn))
        for version in range(found, SCHEMA_VERSION):
            # A new schema (version 0) is created by the same steps: only an
            # older one's upgrade is told.
            if found:
                logger.warning(
                    "upgrading the PostgreSQL store at %s from schema version %d to %d",
                    masked,
                    version,
                    version + 1,
                )
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version + 1,))


def open_first(target: Target) -> psycopg.Connection[Any]:
    """Open the store's first connection and bring the schema up to date (in
    a worker thread)."""
    conn = connect(target.conninfo, target.schema)
    try:
        migrate(conn, target.schema, target.masked)
    except BaseException:
        conn.close()
        raise
    return conn
