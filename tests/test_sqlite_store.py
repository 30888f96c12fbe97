"""What only the SQLite store has: a file, a URL, a schema version, and
group commit on one connection. What every store does is checked by the
conformance suite (tests/conformance/test_store.py)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_durable._base._exceptions import InvalidURLError, StoreError
from trio_durable._base._records import Breakpoint, ErrorInfo, RunFilter, RunStatus
from trio_durable._stores import _sqlite_schema
from trio_durable._stores._base import WriteConflict
from trio_durable._stores._hook_ops import CreateWebhook, PutBreakpoint
from trio_durable._stores._ops import CreateRun, PutCheckpoint, UpdateRun
from trio_durable._stores._sqlite import SQLiteStore, open_sqlite_store
from trio_durable.testing.conformance._store_support import make_checkpoint, make_run


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """The URL of a fresh SQLite file (four slashes: an absolute path)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


async def test_sqlite_data_survives_reopening(sqlite_url: str) -> None:
    run = make_run(tags=("a",), error=ErrorInfo(message="m", details={"x": 1}))
    checkpoint = make_checkpoint(errors=(ErrorInfo(message="e1"),), attempts=1)
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(run)
        await store.save_checkpoint(checkpoint)
        await store.add_signal_waiter("waiting", "r1", 1)
        await store.deliver_signal("buffered", '"p1"')
        await store.deliver_signal("buffered", '"p2"')

    async with open_sqlite_store(sqlite_url) as store:
        assert await store.get_run("r1") == run
        assert await store.get_checkpoints("r1") == [checkpoint]
        assert await store.signal_waiter("waiting") == ("r1", 1)
        assert await store.buffered_signals("buffered") == ['"p1"', '"p2"']
        assert await store.next_due_time() == 0.0


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "sqlite:////",
        "sqlite:///dir/",
        "sqlite://host/x.db",
        "sqlite://localhost//abs/x.db",
        "sqlite:x.db",
        "sqlite:/x.db",
        "sqlite:///:memory:",
        "sqlite:///x.db?timeout=5",
        "sqlite:///x.db?synchronous=OFF",
        "sqlite:///x.db?synchronous=",
        "sqlite:///x.db?synchronous",
        "sqlite:///x.db?synchronous=NORMAL&synchronous=NORMAL",
        "sqlite:///x.db?synchronous=NORMAL&mode=ro",
        "sqlite:///x.db#fragment",
        "memory://",
    ],
)
async def test_sqlite_rejects_malformed_urls(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURLError):
        async with open_sqlite_store(url):
            pass  # pragma: no cover
    assert list(await trio.Path(tmp_path).iterdir()) == []


async def test_sqlite_relative_and_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    async with open_sqlite_store("sqlite:///data/rel.db") as store:
        await store.create_run(make_run())
    assert (tmp_path / "data" / "rel.db").exists()
    absolute = tmp_path / "data" / "rel.db"
    async with open_sqlite_store(f"sqlite:///{absolute}") as store:
        assert store.path == str(absolute)
        assert await store.get_run("r1") == make_run()


async def test_sqlite_defaults_to_wal_and_synchronous_full(sqlite_url: str, tmp_path: Path) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        assert store.synchronous == "FULL"
    async with open_sqlite_store(f"{sqlite_url}?synchronous=NORMAL") as store:
        assert store.synchronous == "NORMAL"
    async with open_sqlite_store(f"{sqlite_url}?synchronous=normal") as store:
        assert store.synchronous == "NORMAL"
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA user_version").fetchone() == (
            _sqlite_schema.SCHEMA_VERSION,
        )
    connection.close()


async def test_sqlite_refuses_a_newer_schema(sqlite_url: str, tmp_path: Path) -> None:
    async with open_sqlite_store(sqlite_url):
        pass
    newer = _sqlite_schema.SCHEMA_VERSION + 1
    with sqlite3.connect(tmp_path / "store.db") as connection:
        connection.execute(f"PRAGMA user_version = {newer}")
    connection.close()

    with pytest.raises(StoreError, match=f"schema version {newer}"):
        async with open_sqlite_store(sqlite_url):
            pass  # pragma: no cover


async def test_sqlite_migrates_a_version_1_file(sqlite_url: str, tmp_path: Path) -> None:
    run = make_run(input='{"big":"input"}', tags=("a",))
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(run)
    # Version 1 kept the input in the runs row: put the file back that way.
    with sqlite3.connect(tmp_path / "store.db", isolation_level=None) as connection:
        connection.executescript(
            """
            BEGIN;
            ALTER TABLE runs ADD COLUMN input TEXT NOT NULL DEFAULT '';
            UPDATE runs SET input = (SELECT input FROM run_inputs WHERE run_id = runs.id);
            DROP TABLE run_inputs;
            PRAGMA user_version = 1;
            COMMIT;
            """
        )
    connection.close()

    async with open_sqlite_store(sqlite_url) as store:
        assert await store.get_run("r1") == run
        await store.create_run(make_run("r2"))
        assert [r.id for r in await store.list_runs()] == ["r1", "r2"]
        # Version 3 indexed the tags of the runs already there.
        assert await store.find_runs(RunFilter(tags=("a",))) == [run]
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (
            _sqlite_schema.SCHEMA_VERSION,
        )
        columns = {row[1] for row in connection.execute("PRAGMA table_info(runs)")}
        assert "input" not in columns
    connection.close()


async def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not a database, not at all" * 100)
    with pytest.raises(StoreError) as caught:
        async with open_sqlite_store(f"sqlite:///{tmp_path / 'junk.db'}"):
            pass  # pragma: no cover
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)
    # The thread the store opened for its calls is gone with it.
    assert not [t for t in threading.enumerate() if t.name.startswith("trio-durable sqlite")]


async def test_sqlite_translates_database_errors(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_schema, "BUSY_TIMEOUT", 0.01)
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(make_run())
        # Another process holds the write lock past the busy timeout.
        blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as caught:
                await store.apply([UpdateRun("r1", {"status": "running"})])
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert not isinstance(caught.value, WriteConflict)
            # Readers are not held up by a writer (WAL).
            assert await store.get_run("r1") == make_run()
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        # The store recovers once the lock is free.
        assert await store.apply([UpdateRun("r1", {"status": "running"})]) == [True]
        assert store.statistics().batches == 2


async def hold_connection(store: SQLiteStore, task_status: Any) -> None:
    """Keep the store's thread (and so its one connection) busy until
    cancelled, so that trips queue behind."""
    thread = store._thread
    assert thread is not None
    release = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(thread.run, release.wait)
        await trio.testing.wait_all_tasks_blocked()  # its call is queued first
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            release.set()


async def test_sqlite_group_commit(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        await store.apply([CreateRun(make_run(f"r{i}")) for i in range(20)])
        base = store.statistics().transactions
        outcomes: dict[int, Any] = {}

        async def write(i: int) -> None:
            expect: frozenset[RunStatus] = frozenset({"running" if i == 7 else "pending"})
            try:
                outcomes[i] = await store.apply(
                    [
                        PutCheckpoint(make_checkpoint(f"r{i}", 1)),
                        UpdateRun(f"r{i}", {"wake_at": float(i)}, expect_status=expect),
                    ]
                )
            except WriteConflict as exc:
                outcomes[i] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            # The first writer leads a trip and waits for the connection; the
            # others queue behind it and all go in the next trip.
            nursery.start_soon(write, 0)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1, 20):
                nursery.start_soon(write, i)
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert isinstance(outcomes.pop(7), WriteConflict)
        assert all(result == [None, True] for result in outcomes.values())
        assert store.statistics().transactions == base + 2
        assert store.statistics().batches == 1 + 19
        assert await store.get_checkpoints("r7") == []
        assert await store.get_run("r7") == make_run("r7")
        assert await store.count_checkpoints("r8", 1, 1, ["pending"]) == 1
        due = await store.list_due_runs(now=100.0, limit=100)
        assert len(due) == 20


async def test_sqlite_many_concurrent_writers_share_transactions(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:

        async def workflow(i: int) -> None:
            await store.create_run(make_run(f"r{i}"))
            turn = await store.begin_turn(f"r{i}", "e", 10.0, 0.0)
            assert turn is not None
            await store.apply(
                [
                    PutCheckpoint(make_checkpoint(f"r{i}", 1, status="completed")),
                    UpdateRun(f"r{i}", {"status": "completed"}, expect_owner="e", now=1.0),
                ]
            )

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(workflow, i)

        stats = store.statistics()
        assert stats.batches == 600
        assert stats.transactions < stats.batches // 10
        assert len(await store.list_runs(statuses={"completed"})) == 200


async def test_sqlite_cancelled_queued_caller_withdraws_its_batch(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        outcomes: list[str] = []

        async def write(run_id: str, scope: trio.CancelScope) -> None:
            with scope:
                await store.create_run(make_run(run_id))
                outcomes.append(run_id)

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            leader, queued = trio.CancelScope(), trio.CancelScope()
            nursery.start_soon(write, "taken", leader)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write, "queued", queued)
            await trio.testing.wait_all_tasks_blocked()
            # The leader's batch is taken: it commits, and its caller learns
            # so. The queued one is withdrawn.
            leader.cancel()
            queued.cancel()
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes == ["taken"]
        assert await store.get_run("taken") == make_run("taken")
        assert await store.get_run("queued") is None
        assert store.statistics().batches == 1


async def test_sqlite_aclose_fails_queued_callers(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        outcomes: dict[str, Any] = {}

        async def write(run_id: str) -> None:
            try:
                outcomes[run_id] = await store.create_run(make_run(run_id))
            except trio.ClosedResourceError as exc:
                outcomes[run_id] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            nursery.start_soon(write, "taken")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write, "queued")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(store.aclose)
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes["taken"] == (make_run("taken"), True)
        assert isinstance(outcomes["queued"], trio.ClosedResourceError)

    async with open_sqlite_store(sqlite_url) as store:
        assert [run.id for run in await store.list_runs()] == ["taken"]


async def test_sqlite_batch_failing_in_the_database_fails_alone(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        await store.apply([CreateRun(make_run("good")), CreateRun(make_run("bad"))])
        outcomes: dict[str, Any] = {}

        async def write(run_id: str, value: Any) -> None:
            try:
                outcomes[run_id] = await store.apply(
                    [
                        PutCheckpoint(make_checkpoint(run_id, 1)),
                        UpdateRun(run_id, {"output": value}),
                    ]
                )
            except StoreError as exc:
                outcomes[run_id] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            nursery.start_soon(store.get_run, "good")
            await trio.testing.wait_all_tasks_blocked()
            # sqlite3 cannot bind an object(): the error comes from the
            # database layer, in the middle of the batch.
            nursery.start_soon(write, "bad", object())
            nursery.start_soon(write, "good", '"fine"')
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes["good"] == [None, True]
        error = outcomes["bad"]
        assert isinstance(error, StoreError)
        assert isinstance(error.__cause__, sqlite3.Error)
        assert await store.get_checkpoints("bad") == []
        assert await store.get_run("bad") == make_run("bad")
        good = await store.get_run("good")
        assert good is not None
        assert good.output == '"fine"'
        assert store.statistics().transactions == 2


_HOOK_TABLES = ("webhooks", "breakpoints", "paused_steps", "store_settings")


def _schema_of(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            " ORDER BY type, name"
        ).fetchall()
    connection.close()
    return rows


async def test_sqlite_migrates_a_version_3_file(sqlite_url: str, tmp_path: Path) -> None:
    """Version 4 added the tables of webhooks, breakpoints, paused steps
    and settings, and widened ``checkpoints_status``: a version 3 file
    gains them, its runs and checkpoints kept, and ends with the schema a
    new file has."""
    run = make_run(tags=("a",))
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(run)
        await store.save_checkpoint(make_checkpoint("r1", 1, status="failed", attempts=2))
    fresh = _schema_of(tmp_path / "store.db")
    with sqlite3.connect(tmp_path / "store.db", isolation_level=None) as connection:
        connection.executescript(
            "BEGIN;"
            + "".join(f"DROP TABLE {table};" for table in _HOOK_TABLES)
            + "DROP INDEX checkpoints_status;"
            + "CREATE INDEX checkpoints_status ON checkpoints (run_id, status, seq);"
            + "PRAGMA user_version = 3; COMMIT;"
        )
    connection.close()
    assert _schema_of(tmp_path / "store.db") != fresh

    async with open_sqlite_store(sqlite_url) as store:
        assert await store.get_run("r1") == run
        bp = Breakpoint(id="b", workflow="w", step="s", created_at=1.0)
        await store.apply([PutBreakpoint(bp), CreateWebhook("h", "r1", "go", 1.0)])
        assert await store.list_breakpoints() == [bp]
        assert await store.get_webhook("h") is not None
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (
            _sqlite_schema.SCHEMA_VERSION,
        )
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        assert set(_HOOK_TABLES) <= tables
        # The widened index holds the checkpoint written before.
        assert connection.execute(
            "SELECT seq, attempts FROM checkpoints INDEXED BY checkpoints_status"
            " WHERE run_id = 'r1' AND status = 'failed'"
        ).fetchall() == [(1, 2)]
    connection.close()
    assert _schema_of(tmp_path / "store.db") == fresh
