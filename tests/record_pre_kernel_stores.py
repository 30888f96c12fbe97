"""Record stores as the release before the kernel (SQLite schema 9,
PostgreSQL schema 8) wrote them, with runs in every state that release kept
in a reserved seq or in an error code, for `test_upgrade_pre_kernel` and
`test_upgrade_pre_kernel_postgres`.

Run it with that release's code first on the path (a worktree of it)::

    git worktree add /tmp/pre-kernel <commit>
    set -a; . /work/servers.env; set +a
    PYTHONPATH=/tmp/pre-kernel/src:tests .venv/bin/python tests/record_pre_kernel_stores.py \\
        --out tests/data/pre_kernel --postgres "$POSTGRES_URL"

Phase one starts the runs `pre_kernel_app` lists, with fixed ids, drives
each to its state (checked with that release's constants) and closes the
engine; a `Client` with no engine running then writes the states only a
client writes. SQLite runs under a mock clock (wall clock `WALL_START` plus
Trio time); PostgreSQL under the real clock (its calls go to threads). The
SQLite store is written as SQL text (``store.sql``, its schema version in
the first line), the PostgreSQL schema as every table's rows in JSON
(``postgres_rows.json``, ordered by primary key).

Phase two opens copies of both stores with that release's code and
finishes every run (`pre_kernel_app.finish`, with the wall clock
`OFFSET` ahead), and writes each run's outcome to ``expected.json``.
``SOURCE.md`` says what recorded them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import trio
import trio.testing

import pre_kernel_app as pk
import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._base._on_error import HANDOFF_BASE
from trio_durable._stores import _postgres_schema, _sqlite_schema

SQLITE_VERSION: Final[int] = 9
POSTGRES_VERSION: Final[int] = 8

RESERVED_SEQS: Final = {
    "forked_from": 999_999_950,
    "stream": 999_999_960,
    "updates": 999_999_970,
    "checked_from": 999_999_980,
    "cancelled_at": 999_999_981,
    "cancel_sent": 999_999_982,
    "admission": 999_999_990,
    "deadline": 999_999_991,
    "continued": 999_999_992,
    "continued_from": 999_999_993,
    "decision": 999_999_999,
}
"""The reserved seqs of the release that records (written out here: later
releases keep none of them, see `check_release`)."""

CANCEL_SENT_SEQ: Final = RESERVED_SEQS["cancel_sent"]

Wall = Callable[[], float]


def check_release() -> None:
    """Refuse to record with code other than the release before the kernel."""
    assert _sqlite_schema.SCHEMA_VERSION == SQLITE_VERSION, _sqlite_schema.SCHEMA_VERSION
    assert _postgres_schema.SCHEMA_VERSION == POSTGRES_VERSION, _postgres_schema.SCHEMA_VERSION
    assert getattr(td, "DECISION_SEQ", None) == RESERVED_SEQS["decision"]


async def checkpoints(engine: td.Engine, run_id: str) -> dict[int, td.Checkpoint]:
    return {cp.seq: cp for cp in await engine.store.get_checkpoints(run_id)}


async def reach(
    engine: td.Engine, run_id: str, seq: int | None, state: Callable[[td.Checkpoint], bool]
) -> None:
    """Wait until a checkpoint of ``run_id`` (at ``seq``, or any) is in
    ``state``. Marks are written after the turn that made their checkpoint
    (when the send is done), so no event of the run says when: this reads
    the store until it holds."""
    for _ in range(2000):
        found = await checkpoints(engine, run_id)
        chosen = [found[seq]] if seq is not None and seq in found else []
        if seq is None:
            chosen = list(found.values())
        if any(state(cp) for cp in chosen):
            return
        await trio.sleep(0.05)
    raise AssertionError(f"{run_id} never reached its state: {found}")


def code(cp: td.Checkpoint) -> str | None:
    return None if cp.error is None else cp.error.code


def pending_with(mark: str) -> Callable[[td.Checkpoint], bool]:
    return lambda cp: cp.status == "pending" and code(cp) == mark


async def phase_one(store: str, wall: Wall) -> None:
    broker = pk.RefusingBroker()
    async with (
        td.open_engine(
            pk.app, store=store, broker=broker, seed=0, engine_id="recorder", wall_clock=wall
        ) as engine,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(_served, broker, [pk.DECIDE], wall)
        cancel_scope = await nursery.start(_served, broker, [pk.DECIDE_CANCEL], wall)
        await _drive(engine, cancel_scope.cancel)
        nursery.cancel_scope.cancel()
    async with td.open_client(store, app=pk.app, wall_clock=wall) as client:
        await _by_client(client)


async def _served(
    broker: pk.RefusingBroker,
    groups: list[str],
    wall: Wall,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.CancelScope() as scope:
        async with td.open_worker(pk.app, broker=broker, groups=groups, seed=0, wall_clock=wall):
            task_status.started(scope)
            await trio.sleep_forever()


async def _drive(engine: td.Engine, stop_workers: Callable[[], None]) -> None:
    # Admission: one run holds the key's slot, one waits in line.
    await engine.start(pk.gate, "k", run_id="adm-hold")
    assert await engine.get_event("adm-hold", "admitted") is True
    await engine.start(pk.gate, "k", run_id="adm-wait")
    await reach(engine, "adm-wait", RESERVED_SEQS["admission"], pending_with("queued"))
    await engine.start(pk.limited, 1, run_id="rate-first")
    assert await engine.result("rate-first") == 1
    await engine.start(pk.limited, 2, run_id="rate-wait")
    await reach(engine, "rate-wait", RESERVED_SEQS["admission"], pending_with("rate_limited"))
    # Runs that end, for the history views (first: the time they take
    # passes before the states below that time would change).
    await engine.start(pk.remote_quick, 1, run_id="remote-done")
    assert await engine.result("remote-done") == 2
    await engine.start(pk.remote_quick, -1, run_id="remote-failed")
    with contextlib.suppress(td.RunFailed):
        await engine.result("remote-failed")
    await engine.start(pk.sleeper, 1.0, run_id="deadline-done", timeout=pk.LONG_TIMEOUT)
    assert await engine.result("deadline-done") == "slept 1"
    # Deadlines, continued runs, checked arguments, a cancelled run's cleanup.
    await engine.start(pk.sleeper, pk.SLEEP, run_id="deadline", timeout=pk.LONG_TIMEOUT)
    await engine.start(pk.sleeper, pk.FOREVER, run_id="deadline-fire", timeout=pk.SHORT_TIMEOUT)
    for run_id in ("deadline", "deadline-fire"):
        assert await engine.get_event(run_id, "sleeping") is True
        await reach(engine, run_id, RESERVED_SEQS["deadline"], lambda cp: cp.status == "pending")
    await engine.start(pk.chain, 0, run_id="chain")
    await reach(engine, "chain.gen.3", None, lambda cp: cp.kind == "timer")
    await engine.start(pk.checked, 1, run_id="checked")
    assert await engine.get_event("checked", "stepped") == 3
    await reach(engine, "checked", RESERVED_SEQS["checked_from"], lambda cp: True)
    await engine.start(pk.cleanup, run_id="cleanup")
    await reach(engine, "cleanup", None, lambda cp: cp.kind == "signal")
    await engine.cancel("cleanup")
    assert await engine.get_event("cleanup", "cleaning") is True
    await reach(engine, "cleanup", RESERVED_SEQS["cancelled_at"], lambda cp: True)
    # Remote workflows.
    await engine.start(pk.remote_later, 1, run_id="remote-out")
    await reach(engine, "remote-out", RESERVED_SEQS["decision"], pending_with("out"))
    await engine.start(pk.remote_sleeper, 1, run_id="remote-waits")
    await reach(
        engine, "remote-waits", None, lambda cp: cp.kind == "timer" and cp.seq < 999_999_000
    )
    await reach(
        engine, "remote-waits", RESERVED_SEQS["decision"], lambda cp: cp.status == "completed"
    )
    await engine.start(pk.remote_cleanup, run_id="remote-cancel")
    await reach(engine, "remote-cancel", None, lambda cp: cp.kind == "signal")
    await reach(
        engine, "remote-cancel", RESERVED_SEQS["decision"], lambda cp: cp.status == "completed"
    )
    stop_workers()
    await engine.cancel("remote-cancel")
    await reach(engine, "remote-cancel", CANCEL_SENT_SEQ, lambda cp: True)
    await reach(engine, "remote-cancel", RESERVED_SEQS["decision"], pending_with("out"))
    # Updates, streams, forks, handoffs.
    await engine.start(pk.updated, run_id="updated")
    assert await engine.get_event("updated", "ready") is True
    assert await engine.update("updated", "bump", 2, update_id="bump-1") == 2
    await engine.start(pk.streamed, run_id="streamed")
    assert await engine.get_event("streamed", "emitted") == 3
    await engine.start(pk.forkable, 1, run_id="fork-source")
    await reach(engine, "fork-source", None, lambda cp: cp.kind == "signal")
    await engine.signal("fork-source", "go", 10)
    assert await engine.result("fork-source") == 13
    await engine.fork("fork-source", from_seq=2, new_run_id="forked")
    await reach(engine, "forked", None, lambda cp: cp.kind == "signal" and cp.status == "pending")
    for run_id in ("handed-off", "retired"):
        await engine.start(pk.fragile, run_id=run_id)
        await reach(engine, run_id, None, lambda cp: cp.kind == "signal")
        await engine.signal(run_id, "fail", True)
        handler = f"{run_id}.onError.0"
        await reach(
            engine, handler, None, lambda cp: cp.kind == "signal" and cp.status == "pending"
        )
    # The handler gives up: the run fails; retried, it fails again, routed
    # to a second handler, and its first handoff is retired.
    await engine.signal("retired.onError.0", "go", "give up")
    with contextlib.suppress(td.RunFailed):
        await engine.result("retired")
    await engine.retry("retired")
    await reach(engine, "retired.onError.1", None, lambda cp: cp.kind == "signal")
    retired = await checkpoints(engine, "retired")
    assert retired[HANDOFF_BASE].name == "onError:retried:retired.onError.0", retired
    # Remote steps: out (their group unserved), in a queue's line, waiting
    # for a queue's rate limit, blocked, refused by the broker.
    await engine.start(pk.stepper, "held", 1, run_id="out-step")
    await reach(engine, "out-step", 1, pending_with("out"))
    await engine.start(pk.stepper, "line", 2, run_id="q-hold")
    await reach(engine, "q-hold", 1, pending_with("out"))
    await engine.start(pk.stepper, "line", 3, run_id="q-step")
    await reach(engine, "q-step", 1, pending_with("queued"))
    await engine.start(pk.stepper, "metered", 4, run_id="rl-first")
    await reach(engine, "rl-first", 1, pending_with("out"))
    await engine.start(pk.stepper, "metered", 5, run_id="rl-step")
    await reach(engine, "rl-step", 1, pending_with("rate_limited"))
    await engine.start(pk.stepper, "render", 6, run_id="blocked-step")
    await reach(engine, "blocked-step", 1, pending_with("blocked"))
    await engine.start(pk.stepper, "refused", 7, run_id="wait-step")
    await reach(engine, "wait-step", 1, pending_with("broker_unavailable"))
    # A child cancelled with its step out; its parent fails, and a client
    # retries it (below).
    await engine.start(pk.resender, 8, run_id="resend-step")
    await reach(engine, "resend-step", 1, lambda cp: cp.kind == "child")
    child = (await checkpoints(engine, "resend-step"))[1].child_id
    assert child is not None
    await reach(engine, child, 1, pending_with("out"))
    await engine.cancel(child)
    with contextlib.suppress(td.RunFailed, td.RunCancelled):
        await engine.result("resend-step")
    # Breakpoints.
    await engine.set_breakpoint(workflow="pausing", step="tool")
    for n, run_id in enumerate(("paused-step", "continued-step")):
        await engine.start(pk.pausing, n, run_id=run_id)
        await reach(engine, run_id, 1, pending_with("paused"))
    # Patches, published values, runs that ended.
    await engine.start(pk.patched, run_id="patched")
    assert await engine.get_event("patched", "patched") is True
    await engine.start(pk.published, "v", run_id="published")
    assert await engine.get_event("published", "value") == "v"
    await engine.start(pk.simple, 1, run_id="done")
    assert await engine.result("done") == 2
    await engine.start(pk.simple, -1, run_id="failed")
    with contextlib.suppress(td.RunFailed):
        await engine.result("failed")
    await engine.start(pk.published, "c", run_id="cancel-asked")
    assert await engine.get_event("cancel-asked", "value") == "c"
    await engine.start(pk.updated, run_id="update-asked")
    assert await engine.get_event("update-asked", "ready") is True


async def _by_client(client: td.Client) -> None:
    """The states a client writes while no engine runs."""
    await client.continue_run("continued-step")
    await client.cancel("cancel-asked")
    await client.retry("resend-step")
    # An update accepted into the run's inbox: nothing answers it while no
    # engine runs, so the client stops waiting.
    with trio.move_on_after(1.0):
        await client.update("update-asked", "bump", 5, update_id="bump-2")


def dump_sqlite(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        assert version == SQLITE_VERSION, version
        dump = "\n".join(connection.iterdump())
    finally:
        connection.close()
    return f"-- schema version {version}\n{dump}\n"


MARKS: Final = (
    "out",
    "broker_unavailable",
    "queued",
    "rate_limited",
    "blocked",
    "resend",
    "paused",
    "continued",
)
"""The error codes that hold a pending checkpoint's state (plan 1.5)."""


def reserved(seq: int) -> bool:
    return seq >= 999_999_000


async def recorded(store: td.Store) -> dict[str, Any]:
    """Each run's status, its checkpoints at reserved seqs (seq, kind,
    name, status) and its pending checkpoints marked by an error code (seq,
    code), by id."""
    runs: dict[str, Any] = {}
    for run in sorted((await store.list_runs(limit=1000)), key=lambda run: run.id):
        found = await store.get_checkpoints(run.id)
        runs[run.id] = {
            "status": run.status,
            "reserved": [[cp.seq, cp.kind, cp.name, cp.status] for cp in found if reserved(cp.seq)],
            "marks": [
                [cp.seq, code(cp)] for cp in found if cp.status == "pending" and code(cp) in MARKS
            ],
        }
    return runs


async def read_recorded(url: str) -> dict[str, Any]:
    async with td.open_store(url) as store:
        return await recorded(store)


def check_coverage(runs: dict[str, Any]) -> None:
    """Every reserved seq and every mark is in the store at least once."""
    seqs = {seq for run in runs.values() for seq, *_ in run["reserved"]}
    expected_seqs = {*RESERVED_SEQS.values(), HANDOFF_BASE, HANDOFF_BASE + 1}
    assert expected_seqs <= seqs, expected_seqs - seqs
    marks = {mark for run in runs.values() for _, mark in run["marks"]}
    assert set(MARKS) <= marks, set(MARKS) - marks


def record_sqlite(out: Path) -> dict[str, Any]:
    """Phase one on a new SQLite file, written as ``store.sql``; phase two
    on a copy. Returns what the store held and each run's outcome."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "store.db"
        url = f"sqlite:///{path}"
        trio.run(
            phase_one,
            url,
            lambda: pk.WALL_START + trio.current_time(),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
        dump = dump_sqlite(path)
        (out / "store.sql").write_text(dump)
        copy = Path(scratch) / "copy.db"
        assert pk.restore_sqlite(dump, copy) == SQLITE_VERSION
        runs = trio.run(read_recorded, f"sqlite:///{copy}")
        check_coverage(runs)
        outcomes = trio.run(
            pk.finish_store,
            f"sqlite:///{copy}",
            pk.sqlite_wall,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    return {"recorded": runs, "outcomes": outcomes}


async def record_postgres(server: str, out: Path) -> dict[str, Any]:
    """Phase one in a new schema of the server at ``server``, written as
    ``postgres_rows.json``; phase two on a copy in another schema. Returns
    what the store held and each run's outcome."""
    async with scratch_schema(server) as url:
        recorded_at = time.time()
        await phase_one(url, time.time)
        tables = await trio.to_thread.run_sync(pk.dump_postgres, url)
    versions = [row["version"] for row in tables["schema_version"]]
    assert versions == list(range(1, POSTGRES_VERSION + 1)), versions
    recording = {"recorded_at": recorded_at, "tables": tables}
    text = json.dumps(recording, indent=1, sort_keys=True) + "\n"
    await trio.Path(out / "postgres_rows.json").write_text(text)
    async with scratch_schema(server) as url:
        migrations = _postgres_schema._MIGRATIONS[:POSTGRES_VERSION]
        await trio.to_thread.run_sync(pk.restore_postgres, url, migrations, tables)
        runs = await read_recorded(url)
        check_coverage(runs)
        outcomes = await pk.finish_store(url, pk.RecordedWall(recorded_at))
    return {"recorded": runs, "outcomes": outcomes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--postgres", default=None)
    options = parser.parse_args()
    check_release()
    options.out.mkdir(parents=True, exist_ok=True)
    expected = {"sqlite": record_sqlite(options.out)}
    if options.postgres is not None:
        expected["postgres"] = trio.run(record_postgres, options.postgres, options.out)
    with open(options.out / "expected.json", "w") as written:
        json.dump(expected, written, indent=1, sort_keys=True)
        written.write("\n")
    write_source(options.out, options.postgres is not None)


POSTGRES_OPTION: Final = ' --postgres "$POSTGRES_URL"'


def write_source(out: Path, postgres: bool) -> None:
    """``SOURCE.md``: the commit whose code recorded the files, how, and
    the files' sha256."""
    source = Path(td.__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(source), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()

    commit = git("rev-parse", "HEAD")
    tree = git("rev-parse", "HEAD:src")
    dirty = git("status", "--porcelain", "--", str(source))
    assert not dirty, f"the recording code has changes of its own:\n{dirty}"
    sums = "\n".join(
        f"    {hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}"
        for path in sorted(out.iterdir())
        if path.name in ("store.sql", "postgres_rows.json", "expected.json")
    )
    (out / "SOURCE.md").write_text(
        "# Stores written by the release before the kernel\n\n"
        f"Recorded by `tests/record_pre_kernel_stores.py` with the code of commit\n"
        f"`{commit}` (its `src/` is tree `{tree}`, unchanged), trio {trio.__version__}, Python"
        f" {sys.version.split()[0]}:\n\n"
        "    set -a; . /work/servers.env; set +a\n"
        "    PYTHONPATH=<that commit>/src:tests .venv/bin/python tests/record_pre_kernel_stores.py \\\n"
        f"        --out tests/data/pre_kernel{POSTGRES_OPTION if postgres else ''}\n\n"
        "Its docstring says what each file holds; `tests/pre_kernel_app.py` is the\n"
        "scenario. sha256 of the files:\n\n"
        f"{sums}\n"
    )


if __name__ == "__main__":
    main()
