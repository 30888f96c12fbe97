"""Reaching a SQLite store: its URL, its connection and its schema.

The database is opened in WAL mode with ``synchronous=FULL`` (an acknowledged
write survives a power cut) and a busy timeout, so several engine processes on
one host can share the file. The schema version is kept in ``PRAGMA
user_version``; `connect` creates the schema in a new file and migrates an
older one, in one transaction, and refuses a file whose schema is newer than
this code.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from .._base._exceptions import InvalidURLError, StoreError
from .._base._urls import mask_url
from ._hook_sql import TABLES as HOOK_TABLES
from ._migrations_records import MOVE_DECISIONS, MOVE_TO_RECORDS, move_admission, move_marks
from ._payload_marks_sql import SQLITE_MIGRATION as PAYLOAD_MARKS_MIGRATION
from ._record_sql import TABLE as RECORDS_TABLE
from ._search_sql import SQLITE_COLUMN as SEARCH_COLUMN
from ._search_sql import SQLITE_TABLES as SEARCH_TABLES
from ._values_sql import INDEXES as VALUE_INDEXES
from ._values_sql import RUN_COLUMN as VALUE_RUN_COLUMN
from ._values_sql import RUN_OF_SCOPE as VALUE_RUN_OF_SCOPE
from ._values_sql import SQLITE_TABLE as VALUES_TABLE

logger = logging.getLogger("trio_durable")

SCHEMA_VERSION: Final = 14
"""The schema version this module writes, kept in ``PRAGMA user_version``.

Version 2 moved runs' inputs out of ``runs`` into ``run_inputs``; version 3
indexed the queries of `Store.find_runs` (``run_tags`` and the indexes of
runs by status, workflow, namespace and end) and added ``announcements``;
version 4 added webhooks, breakpoints, paused steps and settings; version 5
added keyed values (``durable_values``); version 6 added runs' search
attributes (``runs.search_attributes`` and its index ``run_search``);
version 7 marked the payloads kept in band before (see
`._payload_marks_sql`); version 8 added checkpoints' execution ids
(``checkpoints.executions`` and ``checkpoints.rerun``); version 9 added the
run a keyed value goes with (``durable_values.run_id``, deleted with it by
retention) and the indexes of retention's walks; version 10 added runs' own
records (``run_records``, see `._record_sql`), moving there those kept at
reserved seqs before (`._migrations_records`); version 11 moved runs'
admission there too, and the queue slots runs hold to seq 0; version 12
moved remote workflows' decisions there; version 13 added the ``mark`` of
pending checkpoints and records (what they wait for), kept in their
``error`` before; version 14 made ``terminated`` a status retention's
index of ended runs holds. An older file is migrated when it is opened."""

WATCH_INTERVAL: Final = 0.01
"""Seconds between two looks of a store's watch for commits of other
connections (``PRAGMA data_version``), unless the URL says otherwise."""

_WATCH_INTERVAL_RANGE: Final = (0.001, 10.0)

BUSY_TIMEOUT: Final = 10.0
"""Seconds a statement waits for another process's lock before failing."""

JOURNAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
"""Bytes the ``-wal`` file is cut back to when a checkpoint starts it over
(``PRAGMA journal_size_limit``): without it, the file stays as large as
the largest burst of writes ever made it, for as long as the store lives."""

_SYNCHRONOUS_MODES: Final = {"FULL": 2, "NORMAL": 1}

# The join barrier counts a fan's settled members by status over a seq
# range, the console sums up a fan per status over its seq range and a
# run's checkpoints for its ETag (see `._sql_queries`): this index answers
# all three without touching the rows, which hold the payloads. Version 4
# widened it from (run_id, status, seq); widening costs writes less than a
# second index would.
CHECKPOINTS_STATUS: Final = (
    "CREATE INDEX IF NOT EXISTS checkpoints_status ON checkpoints"
    " (run_id, status, seq, attempts, enqueued_at, started_at, finished_at)"
)

EXECUTIONS_COLUMN: Final = "ALTER TABLE checkpoints ADD COLUMN executions TEXT"
RERUN_COLUMN: Final = "ALTER TABLE checkpoints ADD COLUMN rerun INTEGER NOT NULL DEFAULT 0"
MARK_COLUMN: Final = "ALTER TABLE checkpoints ADD COLUMN mark TEXT"
# Its predicate names every terminal status, so that retention's query
# (which says the same) is known to find every row it wants here.
RUNS_ENDED: Final = (
    "CREATE INDEX IF NOT EXISTS runs_ended ON runs (status, updated_at, id)"
    " WHERE status IN ('cancelled', 'completed', 'dead', 'failed', 'terminated')"
)
RECORD_MARK_COLUMN: Final = "ALTER TABLE run_records ADD COLUMN mark TEXT"

_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        version TEXT NOT NULL,
        namespace TEXT NOT NULL,
        status TEXT NOT NULL,
        output TEXT,
        error TEXT,
        tags TEXT NOT NULL,
        parent_id TEXT,
        parent_seq INTEGER,
        lease_owner TEXT,
        lease_expiry REAL,
        wake_at REAL,
        compensate INTEGER NOT NULL,
        recoveries INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        due_at REAL,
        search_attributes TEXT NOT NULL DEFAULT '{}'
    )
    """,
    # A run's input, written once, when the run is created. SQLite writes a
    # row whole, overflow pages and all, whichever columns change: in the
    # runs row, which several writes of every turn change, a 5 MB input was
    # written again by each of them.
    """
    CREATE TABLE IF NOT EXISTS run_inputs (
        run_id TEXT PRIMARY KEY,
        input TEXT NOT NULL
    )
    """,
    # Partial: terminal runs (most rows, in time) are never due and stay out
    # of the index. Ordered by id too, so ties come out as in MemoryStore and
    # `list_due_runs` reads the index alone.
    "CREATE INDEX IF NOT EXISTS runs_due ON runs (due_at, id) WHERE due_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS runs_created ON runs (created_at, id)",
    # Partial: the few runs a reconcile pass may find stalled.
    """
    CREATE INDEX IF NOT EXISTS runs_waiting ON runs (created_at, id)
    WHERE status = 'suspended' AND wake_at IS NULL
    """,
    """
    CREATE INDEX IF NOT EXISTS runs_parent ON runs (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL
    """,
    # The queries of `Store.find_runs`, newest first: each filter's index
    # ends with (created_at, id), so a page is a backward walk from the
    # cursor. Workflow and namespace never change; status does, and its
    # entry moves with it.
    "CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_workflow ON runs (workflow, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_namespace ON runs (namespace, created_at, id)",
    # Partial: a run enters it once, when it ends (retention's oldest first).
    RUNS_ENDED,
    # One row per tag of a run, in the order of a page; the triggers below
    # keep it as the runs' tags are, whoever writes them.
    """
    CREATE TABLE IF NOT EXISTS run_tags (
        tag TEXT NOT NULL,
        created_at REAL NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (tag, created_at, run_id)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX IF NOT EXISTS run_tags_run ON run_tags (run_id)",
    """
    CREATE TRIGGER IF NOT EXISTS runs_tags_insert AFTER INSERT ON runs
    WHEN new.tags <> '[]' BEGIN
        INSERT OR IGNORE INTO run_tags (tag, created_at, run_id)
        SELECT value, new.created_at, new.id FROM json_each(new.tags);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS runs_tags_update AFTER UPDATE OF tags ON runs BEGIN
        DELETE FROM run_tags WHERE run_id = old.id;
        INSERT OR IGNORE INTO run_tags (tag, created_at, run_id)
        SELECT value, new.created_at, new.id FROM json_each(new.tags);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS runs_tags_delete AFTER DELETE ON runs
    WHEN old.tags <> '[]' BEGIN
        DELETE FROM run_tags WHERE run_id = old.id;
    END
    """,
    """
    CREATE TABLE IF NOT EXISTS checkpoints (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        output TEXT,
        error TEXT,
        errors TEXT,
        attempts INTEGER NOT NULL,
        worker_group TEXT,
        child_id TEXT,
        compensation TEXT,
        parallel_group INTEGER,
        parallel_size INTEGER,
        parallel_mode TEXT,
        wake_at REAL,
        enqueued_at REAL,
        started_at REAL,
        finished_at REAL,
        executions TEXT,
        rerun INTEGER NOT NULL DEFAULT 0,
        mark TEXT,
        PRIMARY KEY (run_id, seq)
    )
    """,
    CHECKPOINTS_STATUS,
    """
    CREATE TABLE IF NOT EXISTS signal_waiters (
        token TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    )
    """,
    # The rowid orders a token's payloads: a new row's rowid is larger than
    # every row present, so FIFO order holds without AUTOINCREMENT.
    """
    CREATE TABLE IF NOT EXISTS buffered_signals (
        id INTEGER PRIMARY KEY,
        token TEXT NOT NULL,
        payload TEXT NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS buffered_signals_token ON buffered_signals (token, id)",
    # Flow-control queues: who holds a slot, and who waits in line (by
    # priority, then arrival, which the rowid orders).
    """
    CREATE TABLE IF NOT EXISTS queue_slots (
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (queue, run_id, seq)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS queue_waiters (
        id INTEGER PRIMARY KEY,
        queue TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        priority INTEGER NOT NULL,
        at REAL NOT NULL,
        UNIQUE (queue, run_id, seq)
    )
    """,
    "CREATE INDEX IF NOT EXISTS queue_waiters_line ON queue_waiters (queue, priority DESC, at, id)",
    # What writers announce to the watches of other processes (see
    # `._sqlite_watch`): read by id since the last one seen, trimmed by the
    # writers. AUTOINCREMENT, so an id is never used twice (a watch that
    # saw id n must never miss a later row numbered n).
    """
    CREATE TABLE IF NOT EXISTS announcements (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        workflow TEXT,
        version TEXT,
        origin TEXT NOT NULL
    )
    """,
    *HOOK_TABLES,
    RECORDS_TABLE,
    VALUES_TABLE,
    *SEARCH_TABLES,
)

_MIGRATIONS: Final = {
    # From version 1, which kept the input in the runs row.
    1: (
        "INSERT INTO run_inputs (run_id, input) SELECT id, input FROM runs",
        "ALTER TABLE runs DROP COLUMN input",
    ),
    # From version 2: the tags of the runs already there (the triggers see
    # only rows written from now on); ``announcements``, a new table, the
    # schema creates.
    2: (
        "INSERT OR IGNORE INTO run_tags (tag, created_at, run_id)"
        " SELECT j.value, r.created_at, r.id FROM runs r, json_each(r.tags) j"
        " WHERE r.tags <> '[]'",
    ),
    # From version 3: webhooks, breakpoints, paused_steps and store_settings
    # are new tables, which the schema creates; ``checkpoints_status`` is
    # widened (made anew: an index's columns cannot be altered).
    3: ("DROP INDEX checkpoints_status", CHECKPOINTS_STATUS),
    # From version 4: ``durable_values``, a new table, the schema creates.
    4: (),
    # From version 5: the runs' column of search attributes (none, in the
    # runs already there, so ``run_search`` starts empty); the index and its
    # triggers the schema creates.
    5: (SEARCH_COLUMN,),
    # From version 6: encrypted and offloaded payloads kept in band, marked.
    6: PAYLOAD_MARKS_MIGRATION,
    # From version 7: the execution ids of checkpoints (none in the rows
    # already there: their results are matched by attempt, see
    # docs/failure-handling.md#rolling-upgrades).
    7: (EXECUTIONS_COLUMN, RERUN_COLUMN),
    # From version 8: the run a keyed value goes with (none, for the values
    # already there, but those of a scope named after a run); its indexes
    # `_INDEXED_LAST` creates.
    8: (VALUE_RUN_COLUMN, *VALUE_RUN_OF_SCOPE),
    # From version 9: ``run_records``, a new table the schema creates, and
    # the records kept at reserved seqs before moved into it.
    9: MOVE_TO_RECORDS,
    # From version 10: runs' admission checkpoints become records.
    10: move_admission("json_extract(error, '$.code')", "json_quote(queue)"),
    # From version 11: remote workflows' decision checkpoints become records.
    11: MOVE_DECISIONS,
    # From version 12: what pending checkpoints and records wait for, in a
    # column of its own rather than in their error.
    12: (MARK_COLUMN, RECORD_MARK_COLUMN, *move_marks("json_extract(error, '$.code')")),
    # From version 13: ``terminated``, a new terminal status, in the index
    # of ended runs (made anew: an index's predicate cannot be altered).
    13: ("DROP INDEX IF EXISTS runs_ended", RUNS_ENDED),
}

_INDEXED_LAST: Final = VALUE_INDEXES
"""Indexes of columns that a migration may add: made once the migrations
ran (in a new file too), since SQLite refuses an index of a column that
does not exist yet."""

_ADDED_COLUMNS: Final = {
    SEARCH_COLUMN: ("runs", "search_attributes"),
    EXECUTIONS_COLUMN: ("checkpoints", "executions"),
    RERUN_COLUMN: ("checkpoints", "rerun"),
    MARK_COLUMN: ("checkpoints", "mark"),
    RECORD_MARK_COLUMN: ("run_records", "mark"),
    VALUE_RUN_COLUMN: ("durable_values", "run_id"),
}
"""Migrations that add a column, with the column: skipped where it exists
(SQLite has no ``ADD COLUMN IF NOT EXISTS``)."""


def _migrate(cur: sqlite3.Cursor, statement: str) -> None:
    added = _ADDED_COLUMNS.get(statement)
    if added is not None:
        table, column = added
        if any(row[1] == column for row in cur.execute(f"PRAGMA table_info({table})")):
            return
    cur.execute(statement)


def parse_url(url: str) -> tuple[str, str, float]:
    """The file path, synchronous mode and watch interval a ``sqlite://``
    URL names."""
    usage = "use sqlite:///relative/path.db or sqlite:////absolute/path.db"
    # Messages show the URL masked and never quote what urllib says about it
    # (a password with an unencoded '#' or '/' would be split across parts).
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidURLError(f"malformed store URL {shown!r} ({usage})") from None
    if parts.scheme.lower() != "sqlite" or not url[len("sqlite:") :].startswith("//"):
        raise InvalidURLError(f"not a sqlite URL: {shown!r} ({usage})")
    if parts.netloc:
        raise InvalidURLError(f"a sqlite URL names a file, not a host: {shown!r} ({usage})")
    if parts.fragment:
        raise InvalidURLError(f"a sqlite URL takes no fragment: {shown!r}")
    path = unquote(parts.path[1:])
    if not path or path.endswith("/"):
        raise InvalidURLError(f"the sqlite URL {shown!r} names no file ({usage})")
    if path == ":memory:" or "\x00" in path:
        raise InvalidURLError(
            f"the sqlite URL {shown!r} must name a file (for an in-memory store use memory://)"
        )
    synchronous = "FULL"
    watch_interval = WATCH_INTERVAL
    try:
        options = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise InvalidURLError(f"malformed query in the sqlite URL {shown!r}") from None
    seen: set[str] = set()
    for name, value in options:
        if name not in ("synchronous", "watch_interval") or name in seen:
            raise InvalidURLError(
                f"unsupported option {name!r} in the sqlite URL {shown!r}"
                " (the options are synchronous=NORMAL and watch_interval=SECONDS)"
            )
        seen.add(name)
        if name == "watch_interval":
            watch_interval = _interval(value, shown)
            continue
        synchronous = value.upper()
        if synchronous not in _SYNCHRONOUS_MODES:
            raise InvalidURLError(
                f"synchronous={value!r} in the sqlite URL {shown!r} is not supported"
                " (FULL, the default, or NORMAL)"
            )
    return path, synchronous, watch_interval


def _interval(value: str, shown: str) -> float:
    low, high = _WATCH_INTERVAL_RANGE
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not low <= seconds <= high:
        raise InvalidURLError(
            f"watch_interval={value!r} in the sqlite URL {shown!r} must be a number of"
            f" seconds from {low} to {high}"
        )
    return seconds


def _read_version(cur: sqlite3.Cursor, path: str) -> int:
    version: int = cur.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the SQLite store {path!r} has schema version {version}, newer than"
            f" {SCHEMA_VERSION}, the newest this trio-durable knows: upgrade trio-durable"
        )
    return version


def connect(path: str, synchronous: str) -> sqlite3.Connection:
    """Open and prepare the connection (where the store's trips run)."""
    connection = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT,
        # We issue BEGIN, SAVEPOINT and COMMIT ourselves.
        isolation_level=None,
        # One connection used from trio's worker threads, one at a time (the
        # store's limiter sees to that).
        check_same_thread=False,
        cached_statements=256,
    )
    try:
        cur = connection.cursor()
        # Check the version before changing anything in a file we may not
        # understand.
        version = _read_version(cur, path)
        (mode,) = cur.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            raise StoreError(f"the SQLite store {path!r} cannot use WAL mode (it is in {mode})")
        cur.execute(f"PRAGMA synchronous = {synchronous}")
        cur.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        (level,) = cur.execute("PRAGMA synchronous").fetchone()
        if level != _SYNCHRONOUS_MODES[synchronous]:  # pragma: no cover - sqlite ignored it
            raise StoreError(f"the SQLite store {path!r} refused synchronous={synchronous}")
        if version < SCHEMA_VERSION:
            cur.execute("BEGIN IMMEDIATE")
            # Another process may have created or migrated the schema
            # meanwhile.
            version = _read_version(cur, path)
            if version < SCHEMA_VERSION:
                # Creates what is missing: all of it in a new file, the
                # tables and indexes newer than its version in an older one.
                for statement in _SCHEMA:
                    cur.execute(statement)
                # Version 0 is a new file, which needs no migration.
                for older in range(version, SCHEMA_VERSION) if version else ():
                    logger.warning(
                        "upgrading the SQLite store %r from schema version %d to %d",
                        path,
                        older,
                        older + 1,
                    )
                    for statement in _MIGRATIONS[older]:
                        _migrate(cur, statement)
                for statement in _INDEXED_LAST:
                    cur.execute(statement)
                cur.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            cur.execute("COMMIT")
        cur.close()
    except BaseException:
        connection.close()
        raise
    return connection
