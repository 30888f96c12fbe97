"""Keyed values in the SQLite store, beyond the conformance suite (which
tests/conformance/test_store.py runs on every store): the index their reads
walk, and the bound of a key prefix's range."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable._stores._values_sql import list_values_query, prefix_end


def test_a_prefix_ends_past_every_key_that_starts_with_it() -> None:
    assert prefix_end("") is None
    assert prefix_end("ab") == "ac"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\U0010ffff\U0010ffff") is None
    # Surrogates are no characters of UTF-8 text: the next one is U+E000.
    assert prefix_end("a\ud7ff") == "a\ue000"
    for prefix in ("ab", "a\U0010ffff", "x\ud7ff"):
        end = prefix_end(prefix)
        assert end is not None
        for key in (prefix, prefix + "\U0010ffff" * 3, prefix + "z"):
            assert prefix <= key < end


async def test_value_pages_walk_the_primary_key_in_order(tmp_path: Path) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'store.db'}"):
        pass
    with sqlite3.connect(tmp_path / "store.db") as connection:
        for prefix, after in (("", None), ("key:00", None), ("key:0", "key:004")):
            statement, params = list_values_query("?", "scope3", prefix, after, 100)
            plan = " / ".join(
                row[-1] for row in connection.execute(f"EXPLAIN QUERY PLAN {statement}", params)
            )
            assert "USING INDEX sqlite_autoindex_durable_values_1" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
    connection.close()
