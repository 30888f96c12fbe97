"""A SQLite store written before pending steps had a `td.Mark` of their own
(schema version 12, which kept the mark in the step's error) migrates to
schema 13 with every mark kept: in the clear, and sealed by a codec (whose
details come back once the codec store reads it)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import trio
import trio.testing

import trio_durable as td
from trio_durable._base._records import ErrorInfo
from trio_durable._stores._codec import PayloadCoder
from trio_durable._stores._sqlite_schema import SCHEMA_VERSION
from trio_durable.stores import CodecStore, PutCheckpoint

RING = td.Keyring.single(bytes(range(16)), "k1")

OUT = td.Mark(
    code="out",
    message="out on memory://",
    details={"broker": "memory://", "durable": False, "holder": "h-1"},
)
BLOCKED = td.Mark(code="blocked", message="no live worker of group 'render' offers gpu")


def _as_release_12(path: Path, errors: dict[int, str]) -> None:
    """Make the file what schema 12 wrote: no ``mark`` columns, each
    pending step's mark in its error (``errors``: seq -> the error's JSON)."""
    conn = sqlite3.connect(path)
    try:
        for seq, error in errors.items():
            conn.execute("UPDATE checkpoints SET error = ? WHERE seq = ?", (error, seq))
        conn.execute("ALTER TABLE checkpoints DROP COLUMN mark")
        conn.execute("ALTER TABLE run_records DROP COLUMN mark")
        conn.execute("PRAGMA user_version = 12")
        conn.commit()
    finally:
        conn.close()


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        return int(version)
    finally:
        conn.close()


async def _write_pending(url: str) -> None:
    async with td.open_store(url) as store:
        await store.create_run(
            td.Run(id="r", workflow="w", version="1", status="suspended", input="[]")
        )
        for seq, mark in ((1, OUT), (2, BLOCKED)):
            step = td.Checkpoint(
                run_id="r", seq=seq, name="s", kind="remote", attempts=1, mark=mark
            )
            await store.apply([PutCheckpoint(step)])


async def test_marks_kept_in_errors_in_the_clear_become_marks(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    await _write_pending(url)
    _as_release_12(
        path, {seq: json.dumps(mark.to_json()) for seq, mark in ((1, OUT), (2, BLOCKED))}
    )
    async with td.open_store(url) as store:
        assert _version(path) == SCHEMA_VERSION == 14
        [out, blocked] = await store.get_checkpoints("r")
    assert (out.mark, blocked.mark) == (OUT, BLOCKED)
    # While pending, the error still shows the mark, as before.
    assert out.error == ErrorInfo(message=OUT.message, code="out", details=OUT.details)


async def test_marks_a_codec_sealed_in_errors_come_back_whole_through_the_codec(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    await _write_pending(url)
    # The release before sealed a pending step's error (its mark) as any
    # error: only its code stayed readable.
    coder = PayloadCoder(td.AesGcmCodec(RING))
    sealed = {
        seq: json.dumps(coder.error_in(mark.as_error()).to_json())  # type: ignore[union-attr]
        for seq, mark in ((1, OUT), (2, BLOCKED))
    }
    _as_release_12(path, sealed)
    async with td.open_store(url) as inner:
        [raw, _] = await inner.get_checkpoints("r")
        # Migrated: the mark is the sealed error as it was stored.
        assert raw.mark is not None
        assert (raw.mark.code, raw.mark.details) == ("out", None)
        coded = CodecStore(inner, td.AesGcmCodec(RING))
        [out, blocked] = await coded.get_checkpoints("r")
    assert (out.mark, blocked.mark) == (OUT, BLOCKED)
