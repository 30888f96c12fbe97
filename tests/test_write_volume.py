"""How much the SQLite store writes for a run with a large input: the input
once, not once per turn.

A run's turns rewrite its row (lease, status, wake time); SQLite writes a row
whole, overflow pages and all, so an input kept in that row was written again
by every one of them: 538 MB for a 5 MB input and ten timers.

Two measures, both of the real database file:

- the log: every page a commit wrote goes to the write-ahead log (WAL) as a
  frame. A second connection that holds a read transaction open keeps SQLite
  from copying frames into the database file, and so from reusing the WAL
  from its start: the WAL's size is then all that the run's commits wrote.
- everything written: the bytes the process passed to ``write()`` while the
  run ran (``wchar`` in ``/proc/self/io``, so Linux only): the WAL frames plus
  the checkpoints' copies of them into the database file. WAL mode writes
  every page twice, so this is at least twice the input.
"""

from __future__ import annotations

import functools
import os
import random
import sqlite3
import string
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory

app = td.App("write-volume")

INPUT_SIZE = 5_000_000


@app.workflow()
async def ten_timers(ctx: td.Context, payload: str) -> int:
    for _ in range(10):
        await ctx.sleep(1)
    return len(payload)


@functools.cache
def big_input() -> str:
    # Letters drawn at random: nothing a page could hold in fewer bytes.
    rng = random.Random(0)
    return "".join(rng.choices(string.ascii_letters, k=INPUT_SIZE))


def bytes_written() -> int:
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")  # pragma: no cover


def wal_size(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


@contextmanager
def checkpoints_held_off(path: Path) -> Iterator[None]:
    """While open, the WAL only grows: it starts empty, and a reader on the
    database file alone keeps every frame out of the file."""
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert wal_size(path) == 0
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM runs").fetchone()
        yield
        reader.execute("COMMIT")
    finally:
        reader.close()


async def run_ten_timers(open_test_engine: EngineFactory, path: Path) -> None:
    payload = big_input()
    async with open_test_engine(app, store=f"sqlite:///{path}") as engine:
        await engine.start(ten_timers, payload, run_id="big")
        assert await engine.result("big") == INPUT_SIZE
        # Every turn wrote the run's row: one for the start, one per timer.
        assert engine.statistics().turns >= 11


async def test_a_large_input_is_logged_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    async with td.open_store(f"sqlite:///{path}"):
        pass  # the schema, written before the measure starts
    with checkpoints_held_off(path):
        await run_ten_timers(open_test_engine, path)
        logged = wal_size(path)
    # The input, once, plus a few pages per commit; it was 43x the input.
    assert INPUT_SIZE < logged < 1.25 * INPUT_SIZE


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs Linux's /proc/self/io")
async def test_a_large_input_is_written_once_to_the_log_and_once_to_the_file(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    async with td.open_store(f"sqlite:///{path}"):
        pass
    before = bytes_written()
    await run_ten_timers(open_test_engine, path)
    written = bytes_written() - before
    # Twice the input (the WAL, then the checkpoint's copy into the file),
    # plus a few pages per commit; it was 108x the input.
    assert 2 * INPUT_SIZE < written < 2.25 * INPUT_SIZE
