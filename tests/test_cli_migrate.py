"""``trio-durable migrate`` on SQLite files: it creates the schema, is
idempotent, writes nothing with ``--check``, and refuses what it cannot
migrate. (On PostgreSQL: tests/integration/test_cli_operations.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import trio

import trio_durable as td
from test_cli import SECRET, invoke, one_error_line
from test_values_store_upgrade import restore as restore_values_store
from trio_durable._stores._sqlite_schema import SCHEMA_VERSION
from trio_durable.stores import PutValue, StoredValue


def _version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        version: int = connection.execute("PRAGMA user_version").fetchone()[0]
    finally:
        connection.close()
    return version


def test_migrate_creates_the_schema_once(tmp_path: Path) -> None:
    path = tmp_path / "ops.db"
    store = f"sqlite:///{path}"
    result = invoke(["migrate", "--store", store])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{store}: created the schema (version {SCHEMA_VERSION})\n"
    assert _version(path) == SCHEMA_VERSION
    # Idempotent: a second run changes nothing and says so.
    before = path.stat().st_mtime_ns
    result = invoke(["migrate", "--json"], env={"TRIO_DURABLE_STORE": store})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "store": store,
        "action": "current",
        "before": SCHEMA_VERSION,
        "after": SCHEMA_VERSION,
        "newest": SCHEMA_VERSION,
    }
    assert path.stat().st_mtime_ns == before


def test_the_store_migrate_creates_is_one_engines_use(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ops.db'}"
    assert invoke(["migrate", "--store", store]).exit_code == 0

    async def use() -> td.Run:
        async with td.open_store(store) as opened:
            await opened.create_run(td.Run(id="r", workflow="w"))
            run = await opened.get_run("r")
        assert run is not None
        return run

    assert trio.run(use).workflow == "w"


def test_migrate_check_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ops.db"
    store = f"sqlite:///{path}"
    result = invoke(["migrate", "--store", store, "--check"])
    assert result.exit_code == 1
    assert result.stdout == (
        f"{store}: the schema is at version 0, this trio-durable writes {SCHEMA_VERSION}:"
        " `trio-durable migrate` would create it\n"
    )
    assert not path.exists()
    assert invoke(["migrate", "--store", store]).exit_code == 0
    result = invoke(["migrate", "--store", store, "--check", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["action"] == "current"


def test_migrate_refuses_a_newer_schema_and_what_is_no_store(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    connection = sqlite3.connect(newer)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    for more in ([], ["--check"]):
        result = invoke(["migrate", "--store", f"sqlite:///{newer}", *more])
        assert result.exit_code == 3
        assert f"newer than {SCHEMA_VERSION}" in one_error_line(result)
        assert "upgrade trio-durable" in one_error_line(result)
    assert _version(newer) == SCHEMA_VERSION + 1

    garbage = tmp_path / "notes.txt"
    garbage.write_text("not a database, " * 100)
    result = invoke(["migrate", "--store", f"sqlite:///{garbage}"])
    assert result.exit_code == 3
    assert one_error_line(result).startswith(f"Error: cannot open the SQLite store '{garbage}'")
    assert garbage.read_text() == "not a database, " * 100


def test_migrate_usage_errors() -> None:
    result = invoke(["migrate"])
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: no store: give --store URL or set TRIO_DURABLE_STORE"
    result = invoke(["migrate", "--store", "memory://"])
    assert result.exit_code == 2
    assert "the memory store lives inside one process" in one_error_line(result)
    result = invoke(["migrate", "--store", "bogus://x"])
    assert result.exit_code == 2
    assert "no store is registered for the scheme 'bogus'" in one_error_line(result)


def test_migrate_an_unreachable_store_masks_the_password() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/nowhere"
    for more in ([], ["--check"]):
        result = invoke(["migrate", "--store", url, *more])
        assert result.exit_code == 3
        assert one_error_line(result).startswith(
            "Error: cannot open the PostgreSQL store at postgresql://postgres:***@127.0.0.1:1/nowhere"
        )
        assert SECRET not in result.output


def test_migrate_upgrades_a_version_3_file(tmp_path: Path) -> None:
    """`trio-durable migrate` applies version 4 (webhooks, breakpoints) to
    a file an older trio-durable wrote."""
    path = tmp_path / "old.db"
    store = f"sqlite:///{path}"
    assert invoke(["migrate", "--store", store]).exit_code == 0
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(
        "BEGIN; DROP TABLE webhooks; DROP TABLE breakpoints; DROP TABLE paused_steps;"
        " DROP TABLE store_settings; PRAGMA user_version = 3; COMMIT;"
    )
    connection.close()
    result = invoke(["migrate", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["before"], document["after"]) == (3, SCHEMA_VERSION)
    assert SCHEMA_VERSION == 14
    listed = invoke(["breakpoints", "list", "--store", store, "--json"])
    assert json.loads(listed.stdout) == {"breakpoints": [], "paused": []}


def test_migrate_upgrades_a_version_4_file(tmp_path: Path) -> None:
    """`trio-durable migrate` applies version 5 (keyed values) to a file an
    older trio-durable wrote, and the store then keeps values."""
    path = tmp_path / "old.db"
    store = f"sqlite:///{path}"
    assert invoke(["migrate", "--store", store]).exit_code == 0
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript("BEGIN; DROP TABLE durable_values; PRAGMA user_version = 4; COMMIT;")
    connection.close()
    result = invoke(["migrate", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["before"], document["after"]) == (4, SCHEMA_VERSION)

    async def keep() -> list[StoredValue]:
        async with td.open_store(store) as opened:
            assert await opened.apply([PutValue("s", "k", '"v"', 1.0)]) == [1]
            return await opened.list_values("s")

    [kept] = trio.run(keep)
    assert (kept.key, kept.value, kept.version) == ("k", '"v"', 1)


def test_migrate_upgrades_a_file_the_release_before_wrote(tmp_path: Path) -> None:
    """`trio-durable migrate --check` sees the version 8 file of
    tests/data/values_before_runs/ needs the newest version, and `migrate` applies
    version 9 and after: every value stays, those of a run's own scopes going with it."""
    path = restore_values_store(tmp_path)
    store = f"sqlite:///{path}"
    checked = invoke(["migrate", "--store", store, "--check", "--json"])
    assert checked.exit_code == 1, checked.output
    assert json.loads(checked.stdout)["action"] == "needed"
    assert _version(path) == 8
    result = invoke(["migrate", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["action"], document["before"], document["after"]) == (
        "upgraded",
        8,
        SCHEMA_VERSION,
    )

    async def stored() -> list[StoredValue]:
        async with td.open_store(store) as opened:
            return await opened.list_values("stream:live-t")

    [streamed] = trio.run(stored)
    assert (streamed.value, streamed.run_id) == ('"live"', "live-t")
