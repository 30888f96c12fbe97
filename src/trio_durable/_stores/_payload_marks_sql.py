"""The migration that marks payloads kept in band before the marks: one
step of each SQL store's schema versions (see `.._stored_payloads`).

The release before kept an encrypted payload as `AesGcmCodec`'s envelope
``{"$enc":"k1","d":"..."}`` and an offloaded one as the reference
``{"$blob":"sha256-...","size":N}``, in the payload's place, and told them
from payloads by their shape; an encrypted error kept its envelope in its
``details``. This step marks exactly the texts that release wrote (the
same ones `.._stored_payloads` matches):

- an envelope becomes ``~enc:`` followed by it;
- a reference becomes ``~blob:`` followed by it (a mark of its own, since
  its blob may hold an envelope too: `legacy_blob_content`);
- an error whose details are an envelope keeps it in ``sealed`` instead
  (its message, ``encrypted with k1``, stays).

A run's rows read as that release read them; what it wrote in the clear
stays in the clear. Each statement is idempotent (a marked text matches no
pattern), so the step is self-contained: it may take any version number.
"""

from __future__ import annotations

from typing import Final

# (table, column) of every payload the payload layers write: runs' and
# checkpoints' inputs and outputs, signals' payloads, keyed values, settings.
_SQLITE_PAYLOADS: Final = (
    ("run_inputs", "input"),
    ("runs", "output"),
    ("checkpoints", "input"),
    ("checkpoints", "output"),
    ("buffered_signals", "payload"),
    ("durable_values", "value"),
    ("store_settings", "value"),
)
_POSTGRES_PAYLOADS: Final = (
    ("runs", "input"),
    *_SQLITE_PAYLOADS[1:],
)


def _sqlite_encoded(c: str) -> str:
    # The envelope: its two strings hold no quote (exactly the 8 of the
    # frame) and no backslash.
    return (
        f'{c} GLOB \'{{"$enc":"*","d":"*"}}\''
        f" AND length({c}) - length(replace({c}, '\"', '')) = 8"
        f" AND instr({c}, '\\') = 0"
    )


def _sqlite_in_blob(c: str) -> str:
    # {"$blob":" is 10 characters, the key 71 (sha256- and 64 hex digits),
    # then ","size": (9), 1 to 16 digits and }.
    return (
        f'{c} GLOB \'{{"$blob":"sha256-*","size":*}}\''
        f" AND length({c}) BETWEEN 92 AND 107"
        f" AND substr({c}, 18, 64) NOT GLOB '*[^0-9a-f]*'"
        f' AND substr({c}, 82, 9) = \'","size":\''
        f" AND substr({c}, 91, length({c}) - 91) NOT GLOB '*[^0-9]*'"
    )


def _sqlite_sealed_error(e: str) -> str:
    """Whether the error object (JSON text) ``e`` keeps an envelope in its details."""
    return (
        f"json_type({e}, '$.details') = 'object'"
        f" AND json_type({e}, '$.details.\"$enc\"') = 'text'"
        f" AND json_type({e}, '$.details.d') = 'text'"
        f" AND (SELECT count(*) FROM json_each({e}, '$.details')) = 2"
    )


def _sqlite_sealed(e: str) -> str:
    """The error object ``e`` with its envelope moved to ``sealed``, as
    text (``|| ''`` drops the JSON subtype that would set an object)."""
    sealed = f"json_extract({e}, '$.details') || ''"
    return f"json_remove(json_set({e}, '$.sealed', {sealed}), '$.details')"


SQLITE_MIGRATION: Final[tuple[str, ...]] = (
    *(
        f"UPDATE {table} SET {c} = '~enc:' || {c} WHERE {_sqlite_encoded(c)}"
        for table, c in _SQLITE_PAYLOADS
    ),
    *(
        f"UPDATE {table} SET {c} = '~blob:' || {c} WHERE {_sqlite_in_blob(c)}"
        for table, c in _SQLITE_PAYLOADS
        if table not in ("durable_values", "store_settings")  # never offloaded
    ),
    *(
        f"UPDATE {table} SET error = {_sqlite_sealed('error')}"
        f" WHERE error LIKE '%\"$enc\"%' AND json_valid(error) AND {_sqlite_sealed_error('error')}"
        for table in ("runs", "checkpoints")
    ),
    # Each attempt's error, in order.
    "UPDATE checkpoints SET errors = ("
    " SELECT json_group_array(json(CASE WHEN"
    f" {_sqlite_sealed_error('e.value')} THEN {_sqlite_sealed('e.value')} ELSE e.value END))"
    " FROM (SELECT key, value FROM json_each(checkpoints.errors) ORDER BY key) AS e"
    ") WHERE errors LIKE '%\"$enc\"%' AND json_valid(errors)",
)
"""The step for SQLite."""


_POSTGRES_ENCODED: Final = r"""'^\{"\$enc":"[^"\\]*","d":"[^"\\]*"\}$'"""
_POSTGRES_IN_BLOB: Final = r"""'^\{"\$blob":"sha256-[0-9a-f]{64}","size":[0-9]{1,16}\}$'"""


def _postgres_sealed_error(e: str) -> str:
    """Whether the error object ``e`` (JSON text) keeps an envelope in its
    details. Its JSON is read only if it holds no escaped NUL, which
    PostgreSQL's JSON functions refuse (no error of the old codec's holds
    one); CASE, unlike AND, evaluates in order."""
    j = f"({e})::json"
    details = f"CASE WHEN json_typeof({j} -> 'details') = 'object' THEN {j} -> 'details' END"
    return (
        f"CASE WHEN position('\\u0000' in {e}) > 0 THEN false"
        f" WHEN json_typeof({j} -> 'details') = 'object'"
        f" AND json_typeof({j} #> '{{details,$enc}}') = 'string'"
        f" AND json_typeof({j} #> '{{details,d}}') = 'string'"
        f" THEN (SELECT count(*) FROM json_object_keys(coalesce({details}, '{{}}'::json))) = 2"
        " ELSE false END"
    )


def _postgres_sealed(e: str) -> str:
    """The error object ``e`` (JSON text) with its envelope moved to
    ``sealed``, as JSON text."""
    j = f"({e})::json"
    fields = ", ".join(
        f"'{name}', {j} -> '{name}'" for name in ("message", "code", "type", "step", "traceback")
    )
    return f"json_strip_nulls(json_build_object({fields}, 'sealed', ({j} -> 'details')::text))"


POSTGRES_MIGRATION: Final[tuple[str, ...]] = (
    *(
        f"UPDATE {table} SET {c} = '~enc:' || {c}"
        f""" WHERE {c} LIKE '{{"$enc":"%' AND {c} ~ {_POSTGRES_ENCODED}"""
        for table, c in _POSTGRES_PAYLOADS
    ),
    *(
        f"UPDATE {table} SET {c} = '~blob:' || {c}"
        f""" WHERE {c} LIKE '{{"$blob":"sha256-%' AND {c} ~ {_POSTGRES_IN_BLOB}"""
        for table, c in _POSTGRES_PAYLOADS
        if table not in ("durable_values", "store_settings")  # never offloaded
    ),
    *(
        f"UPDATE {table} SET error = {_postgres_sealed('error')}::text"
        f""" WHERE CASE WHEN error LIKE '%"$enc"%' THEN {_postgres_sealed_error("error")}"""
        " ELSE false END"
        for table in ("runs", "checkpoints")
    ),
    # Each attempt's error, in order. A list holding an escaped NUL is left
    # as it is (PostgreSQL cannot split it): its errors read in the clear,
    # an encrypted one as its message and its envelope as details.
    "UPDATE checkpoints SET errors = ("
    " SELECT '[' || string_agg(CASE WHEN"
    f" {_postgres_sealed_error('x.e')} THEN {_postgres_sealed('x.e')}::text ELSE x.e END,"
    " ',' ORDER BY x.n) || ']'"
    " FROM json_array_elements_text(checkpoints.errors::json) WITH ORDINALITY AS x(e, n)"
    """) WHERE CASE WHEN errors LIKE '%"$enc"%' THEN position('\\u0000' in errors) = 0"""
    " ELSE false END",
)
"""The step for PostgreSQL."""
