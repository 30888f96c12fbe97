"""A SQLite store written by the release before out-of-band payload marks
reads as it did after the upgrade.

`tests/data/legacy_envelopes/` was written by `tests/record_legacy_envelopes.py`
run with that release's code: a store (as SQL text) whose encrypted
payloads are ``{"$enc":...}`` objects and whose offloaded ones are
``{"$blob":...}`` references in the rows themselves, encrypted errors
keeping their envelope in ``details``, and the blob directory (blobs of
encrypted payloads among them). Opened by this release, the schema
migration marks exactly those; an engine with the key and the blob store
then reads every run, history, signal and keyed value as before, and the
waiting runs go on to complete.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from record_legacy_envelopes import (
    APPROVER,
    CARD,
    NOTE,
    RING1,
    SECOND,
    THRESHOLD,
    app,
)

FIXTURE: Final = Path(__file__).parent / "data" / "legacy_envelopes"

_PAYLOAD_COLUMNS: Final = (
    ("run_inputs", "input"),
    ("runs", "output"),
    ("checkpoints", "input"),
    ("checkpoints", "output"),
    ("buffered_signals", "payload"),
    ("durable_values", "value"),
)


def restore(tmp_path: Path) -> tuple[str, Path]:
    """The fixture's store as a SQLite file at its old schema version, and
    a copy of its blob directory."""
    text = (FIXTURE / "store.sql").read_text()
    header, _, dump = text.partition("\n")
    version = int(header.removeprefix("-- schema version "))
    path = tmp_path / "legacy.db"
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executescript(dump)
        connection.execute(f"PRAGMA user_version = {version}")
    finally:
        connection.close()
    blobs = tmp_path / "blobs"
    shutil.copytree(FIXTURE / "blobs", blobs)
    return f"sqlite:///{path}", blobs


def payloads(path: Path) -> list[str]:
    """Every payload text and error the file holds."""
    connection = sqlite3.connect(path)
    try:
        found: list[str] = []
        for table, column in (*_PAYLOAD_COLUMNS, ("runs", "error"), ("checkpoints", "errors")):
            rows = connection.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")
            found.extend(row[0] for row in rows)
        return found
    finally:
        connection.close()


def test_the_fixture_is_as_the_old_release_wrote_it(tmp_path: Path) -> None:
    restore(tmp_path)
    texts = payloads(tmp_path / "legacy.db")
    assert any(text.startswith('{"$enc":"k1","d":"') for text in texts)
    assert any(text.startswith('{"$blob":"sha256-') for text in texts)
    assert any('"details":{"$enc":"k1"' in text for text in texts)
    assert not any(text.startswith("~") for text in texts)
    assert "SECRET" not in "".join(texts)


async def test_a_store_written_before_the_marks_reads_as_before(
    tmp_path: Path, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    url, blobs = restore(tmp_path)
    async with open_test_engine(
        app, store=url, codec=td.AesGcmCodec(RING1), blobs=blobs, blob_threshold=THRESHOLD
    ) as engine:
        # Marked by the migration, in place: what was in band is marked,
        # and what was in the clear stays as it was.
        texts = payloads(tmp_path / "legacy.db")
        assert not any(text.startswith(('{"$enc"', '{"$blob"')) for text in texts)
        assert sum(text.startswith('~enc:{"$enc":"k1"') for text in texts) >= 2
        assert sum(text.startswith('~blob:{"$blob":"sha256-') for text in texts) >= 8
        assert '["bare"]' in texts
        assert not any('"details":{"$enc"' in text for text in texts)

        done = await engine.get("done-1")
        assert json.loads(done.input) == [{"card": CARD, "note": NOTE}]
        assert await engine.result("done-1") == {
            "receipt": f"charged {CARD} for {NOTE}",
            "approval": APPROVER,
        }
        [charged, approved] = await engine.store.get_checkpoints("done-1")
        assert json.loads(charged.output or "") == f"charged {CARD} for {NOTE}"
        assert json.loads(approved.output or "") == APPROVER

        with pytest.raises(td.RunFailed) as caught:
            await engine.result("failed-1")
        assert (caught.value.message, caught.value.code) == (f"card {CARD} declined", "declined")
        assert caught.value.details == {"card": CARD, "pad": "." * 80}
        [entry] = (await engine.history("failed-1")).entries
        assert [error.message for error in entry.errors] == [
            f"card {CARD} timed out " + "." * 80,
            f"card {CARD} declined",
        ]
        assert entry.errors[1].details == {"card": CARD, "pad": "." * 80}

        # The buffered signal: a legacy reference to a blob that holds an
        # encrypted payload in band.
        await engine.signal("waiting-1", "first", "one")
        assert await engine.result("waiting-1") == {
            "label": NOTE,
            "first": "one",
            "second": SECOND,
        }

        wallet = engine.entity("wallet", "w-1")
        assert await wallet.last() == f"{CARD}-{NOTE}"
        assert await wallet.add("another") == 2

        # Offloaded in the clear, and not offloaded at all.
        await engine.signal("plain-1", "go", "now")
        assert await engine.result("plain-1") == f"{(NOTE + 'plain')[:10]} now"
        await engine.signal("bare-1", "go", "now")
        assert await engine.result("bare-1") == "bare now"
        await engine.drain()
    assert "SECRET" not in "".join(payloads(tmp_path / "legacy.db"))
