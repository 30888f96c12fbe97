"""Keyed values in the SQL stores: their table, the write of `PutValue` and
the reads `Store.get_value` and `Store.list_values`, written once for SQLite
and PostgreSQL (which differ here in the placeholder and the table's
collation).

Each write decides with one statement that the database applies to the
newest version of the row: an upsert, an insert that does nothing on a
conflict, or an update or delete conditional on the version. In PostgreSQL
a concurrent writer of the row is waited out and the condition evaluated
again, so of two writers expecting one version exactly one wins; SQLite lets
one writer in at a time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from .._base._records import StoredValue
from ._ops import Op, PutValue
from ._rules import value_conflict

if TYPE_CHECKING:
    from ._group_commit import Counts, GroupCommit
    from ._sql_store import Dialect

# Keys are ordered code point by code point, as in the memory store: SQLite
# compares text as bytes (UTF-8, whose byte order is the code points'), and
# PostgreSQL does with the "C" collation, given to the column so that the
# primary key's index serves the ordered pages of `list_values`. A value
# that goes with a run (``run_id``) is deleted when that run is pruned; the
# others stay until their writer or `Store.prune_values` deletes them.
SQLITE_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS durable_values (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        run_id TEXT,
        PRIMARY KEY (scope, key)
    )
    """

RUN_COLUMN: Final = "ALTER TABLE durable_values ADD COLUMN run_id TEXT"
"""The migration that gives values the run they go with (SQLite schema 9):
the values written before go with no run."""

POSTGRES_RUN_COLUMN: Final = "ALTER TABLE durable_values ADD COLUMN IF NOT EXISTS run_id text"
"""The same in PostgreSQL (schema 8), which may apply it again."""

_RUN_SCOPES: Final = ("stream:", "run-event:", "update:")
"""The scopes named after their run (``<prefix><run id>``) when values
first went with runs: a run's stream values, published values and updates."""

RUN_OF_SCOPE: Final = tuple(
    f"UPDATE durable_values SET run_id = substr(scope, {len(prefix) + 1})"
    f" WHERE substr(scope, 1, {len(prefix)}) = '{prefix}' AND run_id IS NULL"
    for prefix in _RUN_SCOPES
)
"""The migration's second half: the values of a scope named after a run,
written before values went with runs, go with that run from then on."""

# Both partial: pruning runs finds the values of a run (few values go with
# one), `Store.prune_values` the oldest of a scope that go with none; a
# value is in exactly one of them.
INDEXES: Final = (
    "CREATE INDEX IF NOT EXISTS durable_values_run ON durable_values (run_id)"
    " WHERE run_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS durable_values_age ON durable_values (scope, updated_at)"
    " WHERE run_id IS NULL",
)

POSTGRES_TABLE: Final = """
    CREATE TABLE durable_values (
        scope text NOT NULL,
        key text COLLATE "C" NOT NULL,
        value text NOT NULL,
        version bigint NOT NULL,
        updated_at double precision NOT NULL,
        PRIMARY KEY (scope, key)
    )
    """

_COLUMNS: Final = "scope, key, value, version, updated_at, run_id"


def value_ops(p: str) -> dict[type[Any], Callable[[Any, Any], Any]]:
    """The handler of `PutValue`, for a dialect whose placeholder is ``p``."""
    row_is = f"scope = {p} AND key = {p}"
    # A write that names no run keeps the run the row goes with.
    upsert = (
        f"INSERT INTO durable_values ({_COLUMNS}) VALUES ({p}, {p}, {p}, 1, {p}, {p})"
        " ON CONFLICT (scope, key) DO UPDATE SET value = excluded.value,"
        " version = durable_values.version + 1, updated_at = excluded.updated_at,"
        " run_id = coalesce(excluded.run_id, durable_values.run_id)"
        " RETURNING version"
    )
    insert = (
        f"INSERT INTO durable_values ({_COLUMNS}) VALUES ({p}, {p}, {p}, 1, {p}, {p})"
        " ON CONFLICT (scope, key) DO NOTHING RETURNING version"
    )
    update = (
        f"UPDATE durable_values SET value = {p}, version = version + 1, updated_at = {p},"
        f" run_id = coalesce({p}, run_id) WHERE {row_is} AND version = {p} RETURNING version"
    )

    def put_value(cur: Any, op: PutValue) -> int | None:
        where = (op.scope, op.key)
        expected = op.expect_version
        version: int | None
        if op.value is None:
            version = 0
            if expected is None:
                cur.execute(f"DELETE FROM durable_values WHERE {row_is}", where)
            elif expected == 0:
                # Nothing to delete if it is absent; a conflict if not.
                found = cur.execute(f"SELECT 1 FROM durable_values WHERE {row_is}", where)
                if found.fetchone() is not None:
                    version = None
            else:
                cur.execute(
                    f"DELETE FROM durable_values WHERE {row_is} AND version = {p}",
                    (*where, expected),
                )
                if cur.rowcount != 1:
                    version = None
        else:
            if expected is None:
                row = cur.execute(upsert, (*where, op.value, op.at, op.run_id)).fetchone()
            elif expected == 0:
                row = cur.execute(insert, (*where, op.value, op.at, op.run_id)).fetchone()
            else:
                params = (op.value, op.at, op.run_id, *where, expected)
                row = cur.execute(update, params).fetchone()
            version = None if row is None else int(row[0])
        if version is None and op.strict:
            raise value_conflict(op)
        return version

    return {PutValue: put_value}


# PostgreSQL: two transactions that write the same keyed values in opposite
# orders deadlock, on the rows or, for keys new to both, on the unique
# index (PostgreSQL notices after `deadlock_timeout`, a second, and the
# trip runs again). Row locks cannot be taken on rows not inserted yet, so
# a transaction first takes a transaction-scoped advisory lock per value it
# writes, in one order for every transaction (of every engine): sorted by
# key. Two that share values then queue; a collision of two keys (64 bits
# of a hash) only makes two transactions queue that need not.
LOCK_VALUES: Final = (
    "SELECT pg_advisory_xact_lock(k)"
    " FROM unnest(%s::bigint[]) WITH ORDINALITY AS t(k, n) ORDER BY n"
)


def value_locks(namespace: str, ops: Iterable[Op]) -> list[int]:
    """The advisory lock keys (sorted, each once) of the keyed values that
    ``ops`` write, for `LOCK_VALUES`. ``namespace`` (the store's schema)
    keeps the keys of stores sharing a database apart."""
    keys = set()
    for op in ops:
        if isinstance(op, PutValue):
            text = json.dumps([namespace, op.scope, op.key])
            digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8)
            keys.add(int.from_bytes(digest.digest(), "big", signed=True))
    return sorted(keys)


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix``
    (None if there is none): keys with the prefix are those from ``prefix``
    up to it, a range an index walks."""
    chars = list(prefix)
    while chars:
        following = ord(chars.pop()) + 1
        if 0xD800 <= following <= 0xDFFF:
            following = 0xE000  # surrogates are no characters of UTF-8 text
        if following <= 0x10FFFF:
            return "".join(chars) + chr(following)
    return None


class SQLValues:
    """The read methods of keyed values for `SQLStore`."""

    _commit: GroupCommit[Any]
    _dialect: Dialect[Any]

    async def _value_rows(self, statement: str, params: tuple[Any, ...]) -> list[StoredValue]:
        def work(cur: Any) -> tuple[list[StoredValue], None]:
            rows = cur.execute(statement, params).fetchall()
            return [
                StoredValue(scope=s, key=k, value=v, version=int(n), updated_at=at, run_id=r)
                for s, k, v, n, at, r in rows
            ], None

        return await self._commit.submit(work, writes=False)

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        p = self._dialect.param
        rows = await self._value_rows(
            f"SELECT {_COLUMNS} FROM durable_values WHERE scope = {p} AND key = {p}",
            (scope, key),
        )
        return rows[0] if rows else None

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        statement, params = list_values_query(self._dialect.param, scope, prefix, after, limit)
        return await self._value_rows(statement, params)

    async def prune_values(self, scope: str, older_than: float, limit: int) -> int:
        d = self._dialect
        statement = prune_values_statement(d.param, d.lock_skipping)
        params = (scope, scope, older_than, max(limit, 0))

        def work(cur: Any) -> tuple[int, Counts]:
            cur.execute(statement, params)
            return max(int(cur.rowcount), 0), (1, 0, 0, 0)

        return await self._commit.submit(work, writes=True)


def list_values_query(
    p: str, scope: str, prefix: str, after: str | None, limit: int
) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters of `Store.list_values`, for a dialect
    whose placeholder is ``p``: a walk of the primary key's index from the
    prefix (or past ``after``) to the end of the prefix's range."""
    where = f"scope = {p} AND key >= {p}"
    params: tuple[Any, ...] = (scope, prefix)
    end = prefix_end(prefix)
    if end is not None:
        where += f" AND key < {p}"
        params += (end,)
    if after is not None:
        where += f" AND key > {p}"
        params += (after,)
    statement = f"SELECT {_COLUMNS} FROM durable_values WHERE {where} ORDER BY key LIMIT {p}"
    return statement, (*params, max(limit, 0))


def prune_values_statement(p: str, lock_skipping: str) -> str:
    """The statement of `Store.prune_values` (parameters: the scope twice,
    the time, the limit), for a dialect whose placeholder is ``p``: a walk
    of ``durable_values_age``, oldest first. The rows are aliased ``r``,
    the alias of the dialect's ``lock_skipping`` clause: on PostgreSQL a row
    another transaction is writing is left to a later pass, never waited
    for."""
    return (
        f"DELETE FROM durable_values WHERE scope = {p} AND key IN ("
        f"SELECT r.key FROM durable_values r WHERE r.scope = {p} AND r.run_id IS NULL"
        f" AND r.updated_at < {p} ORDER BY r.updated_at LIMIT {p}{lock_skipping})"
    )
