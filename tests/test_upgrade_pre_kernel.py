"""A SQLite store written by the release before the kernel (schema version
9), with runs in every state that release kept in a reserved seq or in an
error code, opens with this release's code and every run finishes as it
finished under the release that wrote it.

`tests/data/pre_kernel/` was written by `tests/record_pre_kernel_stores.py`
(see its ``SOURCE.md``): ``store.sql`` is the store mid-flight,
``expected.json`` what it held then (``recorded``: each run's status, its
checkpoints at reserved seqs and its pending checkpoints marked by an error
code) and how each run ended when that release finished it (``outcomes``).
Every later release that moves that state elsewhere migrates this store,
and this test holds it to the same outcomes.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Final

import trio
import trio.testing

import pre_kernel_app as pk
import trio_durable as td

DATA: Final = Path(__file__).parent / "data" / "pre_kernel"
RECORDED_VERSION: Final = 9

RESERVED_FROM: Final = 999_999_000
HANDOFF_BASE: Final = 1_000_000_000
MARKS: Final = frozenset(
    {
        "out",
        "broker_unavailable",
        "queued",
        "rate_limited",
        "blocked",
        "resend",
        "paused",
        "continued",
    }
)
"""The error codes that held a pending checkpoint's state when recorded."""


async def assert_marks_moved(store: td.stores.Store, recorded: dict[str, Any]) -> None:
    """Each mark the recorded runs' pending steps held in their error is
    their `td.Mark` now (which their error shows, as before)."""
    for run_id, run in recorded.items():
        for seq, code in run["marks"]:
            if seq >= RESERVED_FROM:
                continue  # a run's own record now, which keeps no mark
            [cp] = await store.get_checkpoints(run_id, seq, seq)
            assert cp.status == "pending", (run_id, seq)
            assert cp.mark is not None, (run_id, seq)
            assert cp.error is not None, (run_id, seq)
            assert (cp.mark.code, cp.error.code) == (code, code), (run_id, seq)


def expected() -> dict[str, Any]:
    found: dict[str, Any] = json.loads((DATA / "expected.json").read_text())
    return found


def _rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()


def held(path: Path) -> dict[str, Any]:
    """What a store of the recorded schema holds, as ``recorded`` says it."""
    runs: dict[str, Any] = {
        run_id: {"status": status, "reserved": [], "marks": []}
        for run_id, status in _rows(path, "SELECT id, status FROM runs ORDER BY id")
    }
    rows = _rows(
        path,
        "SELECT run_id, seq, kind, name, status, json_extract(error, '$.code')"
        " FROM checkpoints ORDER BY run_id, seq",
    )
    for run_id, seq, kind, name, status, code in rows:
        if seq >= RESERVED_FROM:
            runs[run_id]["reserved"].append([seq, kind, name, status])
        if status == "pending" and code in MARKS:
            runs[run_id]["marks"].append([seq, code])
    return runs


def version(path: Path) -> int:
    found: int = _rows(path, "PRAGMA user_version")[0][0]
    return found


def state_left_in_seqs_or_codes(path: Path) -> list[tuple[Any, ...]]:
    """Checkpoints that still keep run state in a reserved seq (below the
    handoffs) or only in an error code (with no mark of their own)."""
    placeholders = ", ".join(f"'{mark}'" for mark in sorted(MARKS))
    return _rows(
        path,
        "SELECT run_id, seq, json_extract(error, '$.code') FROM checkpoints"
        f" WHERE (seq >= {RESERVED_FROM} AND seq < {HANDOFF_BASE})"
        f" OR (status = 'pending' AND mark IS NULL"
        f" AND json_extract(error, '$.code') IN ({placeholders}))",
    )


async def test_every_run_of_the_pre_kernel_sqlite_store_finishes_as_recorded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    want = expected()["sqlite"]
    path = tmp_path / "store.db"
    assert pk.restore_sqlite((DATA / "store.sql").read_text(), path) == RECORDED_VERSION
    # The fixture holds the state it was recorded for: every reserved seq
    # and every mark (checked against that release's constants when
    # recorded), in the runs ``recorded`` names.
    assert held(path) == want["recorded"]
    seqs = {seq for run in want["recorded"].values() for seq, *_ in run["reserved"]}
    assert {s for s in seqs if s < HANDOFF_BASE} == {
        999_999_950,
        999_999_960,
        999_999_970,
        999_999_980,
        999_999_981,
        999_999_982,
        999_999_990,
        999_999_991,
        999_999_992,
        999_999_993,
        999_999_999,
    }
    assert {HANDOFF_BASE, HANDOFF_BASE + 1} <= seqs
    assert {code for run in want["recorded"].values() for _, code in run["marks"]} == MARKS

    url = f"sqlite:///{path}"
    async with td.open_store(url) as store:
        # Opened by this release: migrated if its schema is newer, and then
        # no run state is left in a reserved seq or an error code that a
        # migration moved.
        if version(path) > RECORDED_VERSION:
            assert state_left_in_seqs_or_codes(path) == []
            await assert_marks_moved(store, want["recorded"])
            # Runs hold and wait for their queues' slots at seq 0 now.
            for table in ("queue_slots", "queue_waiters"):
                seqs = {seq for (seq,) in _rows(path, f"SELECT DISTINCT seq FROM {table}")}
                assert max(seqs, default=0) < RESERVED_FROM, table
        for run_id, run in want["recorded"].items():
            found = await store.get_run(run_id)
            assert found is not None, run_id
            assert found.status == run["status"], run_id
    assert await pk.finish_store(url, pk.sqlite_wall) == want["outcomes"]
