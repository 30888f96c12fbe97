"""Search attributes in the SQL stores: the index of runs' attributes, kept
by triggers, and the conditions of `Store.find_runs` on it.

A run keeps its attributes in ``runs.search_attributes``, JSON text
``{name: [type, value]}`` (see `.._search_values`). ``run_search`` holds one
row per value (a keyword list: one per keyword) with the run's
``created_at``, in one of three typed columns: ``value_text`` (str,
keywords), ``value_int`` (int, bool as 0 or 1, datetime as microseconds
since the epoch) and ``value_real`` (float). Triggers on ``runs`` keep it as
the column is, whoever writes it, as ``run_tags`` is kept.

Indexes: per column ``(name, value, created_at, run_id)``, so an equality
is a backward walk in the order of a page (as for a tag), and a range a
walk of the values in range; ``(run_id, name)`` for the probes of the other
conditions, one run at a time.
"""

from __future__ import annotations

from typing import Final

from .._base._search_values import SearchCondition

_INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS run_search_text ON run_search"
    " (name, value_text, created_at, run_id) WHERE value_text IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS run_search_int ON run_search"
    " (name, value_int, created_at, run_id) WHERE value_int IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS run_search_real ON run_search"
    " (name, value_real, created_at, run_id) WHERE value_real IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS run_search_run ON run_search (run_id, name)",
)

_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS run_search (
        name TEXT NOT NULL,
        value_text TEXT,
        value_int BIGINT,
        value_real DOUBLE PRECISION,
        created_at DOUBLE PRECISION NOT NULL,
        run_id TEXT NOT NULL
    )
    """

# The rows of one runs row (``new``): the scalars, then each keyword.
_SQLITE_ROWS: Final = """
    INSERT INTO run_search (name, value_text, value_int, value_real, created_at, run_id)
    SELECT a.key,
        CASE WHEN json_extract(a.value, '$[0]') = 'str' THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') IN ('int', 'bool', 'datetime')
            THEN json_extract(a.value, '$[1]') END,
        CASE WHEN json_extract(a.value, '$[0]') = 'float' THEN json_extract(a.value, '$[1]') END,
        new.created_at, new.id
    FROM json_each(new.search_attributes) a
    WHERE json_extract(a.value, '$[0]') <> 'keywords'
    UNION ALL
    SELECT a.key, k.value, NULL, NULL, new.created_at, new.id
    FROM json_each(new.search_attributes) a, json_each(a.value, '$[1]') k
    WHERE json_extract(a.value, '$[0]') = 'keywords';
"""

SQLITE_COLUMN: Final = "ALTER TABLE runs ADD COLUMN search_attributes TEXT NOT NULL DEFAULT '{}'"
"""The column a store of schema version 5 gains (a newer one is created
with it)."""

SQLITE_TABLES: Final = (
    _TABLE,
    *_INDEXES,
    f"""
    CREATE TRIGGER IF NOT EXISTS runs_search_insert AFTER INSERT ON runs
    WHEN new.search_attributes <> '{{}}' BEGIN
        {_SQLITE_ROWS}
    END
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS runs_search_update AFTER UPDATE OF search_attributes ON runs
    BEGIN
        DELETE FROM run_search WHERE run_id = old.id;
        {_SQLITE_ROWS}
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS runs_search_delete AFTER DELETE ON runs
    WHEN old.search_attributes <> '{}' BEGIN
        DELETE FROM run_search WHERE run_id = old.id;
    END
    """,
)
"""The statements that create the index and its triggers in SQLite."""

POSTGRES_MIGRATION: Final = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS search_attributes text NOT NULL DEFAULT '{}'",
    _TABLE,
    *_INDEXES,
    """
    CREATE OR REPLACE FUNCTION run_search_sync() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM run_search WHERE run_id = OLD.id;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            INSERT INTO run_search (name, value_text, value_int, value_real, created_at, run_id)
            SELECT a.key,
                CASE WHEN a.value ->> 0 = 'str' THEN a.value ->> 1 END,
                CASE a.value ->> 0
                    WHEN 'int' THEN (a.value ->> 1)::bigint
                    WHEN 'datetime' THEN (a.value ->> 1)::bigint
                    WHEN 'bool' THEN CASE WHEN a.value ->> 1 = 'true' THEN 1 ELSE 0 END
                END,
                CASE WHEN a.value ->> 0 = 'float' THEN (a.value ->> 1)::double precision END,
                NEW.created_at, NEW.id
            FROM jsonb_each(NEW.search_attributes::jsonb) AS a
            WHERE a.value ->> 0 <> 'keywords'
            UNION ALL
            SELECT a.key, k.value, NULL, NULL, NEW.created_at, NEW.id
            FROM jsonb_each(NEW.search_attributes::jsonb) AS a,
                jsonb_array_elements_text(a.value -> 1) AS k(value)
            WHERE a.value ->> 0 = 'keywords';
        END IF;
        RETURN NULL;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS runs_search_insert ON runs",
    """
    CREATE TRIGGER runs_search_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.search_attributes <> '{}') EXECUTE FUNCTION run_search_sync()
    """,
    "DROP TRIGGER IF EXISTS runs_search_update ON runs",
    """
    CREATE TRIGGER runs_search_update AFTER UPDATE OF search_attributes ON runs
    FOR EACH ROW WHEN (OLD.search_attributes IS DISTINCT FROM NEW.search_attributes)
    EXECUTE FUNCTION run_search_sync()
    """,
    "DROP TRIGGER IF EXISTS runs_search_delete ON runs",
    """
    CREATE TRIGGER runs_search_delete AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.search_attributes <> '{}') EXECUTE FUNCTION run_search_sync()
    """,
)
"""PostgreSQL's migration 5: the column, the index and its triggers (runs
already there have no attributes). Each statement applies whether or not
what it makes exists (a schema put back to an older version by hand may
keep some of it)."""

_VALUE_COLUMNS: Final = {"text": "value_text", "int": "value_int", "real": "value_real"}


def walk(p: str, condition: SearchCondition) -> tuple[str, str, list[object]]:
    """The source and condition of a walk of ``run_search`` (as ``s``) for
    an equality: its rows come in the order of a page."""
    column = _VALUE_COLUMNS[condition.column]
    return (
        "run_search s",
        f"s.name = {p} AND s.{column} = {p}",
        [condition.name, condition.value],
    )


def probe(p: str, condition: SearchCondition, ident: str) -> tuple[str, list[object]]:
    """A condition that the run ``ident`` has a value matching ``condition``."""
    column = _VALUE_COLUMNS[condition.column]
    # The OFFSET keeps PostgreSQL from making it a join (hashed, then sorted).
    return (
        f"EXISTS (SELECT 1 FROM run_search x WHERE x.run_id = {ident} AND x.name = {p}"
        f" AND x.{column} {condition.op} {p} LIMIT 1 OFFSET 0)",
        [condition.name, condition.value],
    )
