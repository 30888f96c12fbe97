"""The PostgreSQL store against a real server: what the conformance suite
cannot show (it runs every store alike).

Migrations and the schema version, errors for an unreachable database (with
the password masked), the query plans of the hot reads, the pool size, and an
engine running workflows on the store end to end. Each test works in a fresh
schema of the shared server (`scratch_schema`); the tests that stop a server
start a private one of their own.
"""

from __future__ import annotations

import functools
import json
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio

import trio_durable as td
from servers import postgres as postgres_server
from servers.fixture import installed
from servers.postgres import scratch_schema
from trio_durable._base._exceptions import InvalidURLError, StoreError
from trio_durable._base._records import Checkpoint, Run
from trio_durable._base._urls import mask_url
from trio_durable._stores import open_store
from trio_durable._stores._base import WriteConflict
from trio_durable._stores._hook_ops import KeepSetting
from trio_durable._stores._ops import (
    ClaimCheckpoint,
    CreateRun,
    PutCheckpoint,
    SettleCheckpoint,
    UpdateRun,
)
from trio_durable._stores._postgres import PostgresStore, open_postgres_store
from trio_durable._stores._postgres_reads import (
    LIST_DUE_RUNS,
    LIST_STALLED,
    NEXT_DUE_TIME,
    count_checkpoints_query,
)
from trio_durable._stores._postgres_schema import DEFAULT_POOL_SIZE, SCHEMA_VERSION

PATIENCE = 30.0
"""Seconds a test waits at most for what it waits for."""


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


def _schema_of(url: str) -> str:
    return url.rpartition("schema=")[2]


async def _sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement run in the URL's schema (in a worker thread)."""
    base = url.partition("?")[0]

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{_schema_of(url)}"')
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(run)


async def _indexes(url: str) -> list[tuple[Any, ...]]:
    """The schema's indexes: name and definition (the schema's name left out)."""
    rows = await _sql(
        url,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY indexname",
        _schema_of(url),
    )
    return [(name, definition.replace(_schema_of(url), "")) for name, definition in rows]


async def _until(url: str, statement: str, *params: Any) -> None:
    """Poll until ``statement`` returns a row (within `PATIENCE`)."""
    with trio.fail_after(PATIENCE):
        while not await _sql(url, statement, *params):  # noqa: ASYNC110 (a database condition)
            await trio.sleep(0.01)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# -- migrations ---------------------------------------------------------------------


async def test_opening_creates_the_schema_once_and_records_its_version(url: str) -> None:
    # Several engines starting at once on an empty database: one migrates,
    # the others wait for it and find the schema made.
    async with trio.open_nursery() as nursery:
        for _ in range(4):

            async def open_and_write(i: int = _) -> None:
                async with open_postgres_store(url) as store:
                    await store.create_run(Run(id=f"r{i}", workflow="w"))

            nursery.start_soon(open_and_write)

    versions = await _sql(url, "SELECT version FROM schema_version ORDER BY version")
    assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    tables = await _sql(
        url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
        " ORDER BY table_name",
        _schema_of(url),
    )
    assert [name for (name,) in tables] == [
        "breakpoints",
        "buffered_signals",
        "checkpoints",
        "durable_values",
        "paused_steps",
        "queue_slots",
        "queue_waiters",
        "run_records",
        "run_search",
        "run_tags",
        "runs",
        "schema_version",
        "signal_waiters",
        "store_settings",
        "webhooks",
    ]
    # Reopening changes nothing and keeps the rows.
    async with open_postgres_store(url) as store:
        assert len(await store.list_runs()) == 4
    assert await _sql(url, "SELECT count(*) FROM schema_version") == [(SCHEMA_VERSION,)]


async def test_a_version_2_schema_gains_webhooks_and_breakpoints(url: str) -> None:
    async with open_postgres_store(url) as store:
        await store.create_run(Run(id="kept", workflow="w"))
        # Back to version 2, before webhooks and breakpoints.
        await store.save_checkpoint(
            Checkpoint(run_id="kept", seq=1, name="s", kind="local", attempts=2)
        )
    fresh = await _indexes(url)
    # Back to version 2, before webhooks and breakpoints, with the narrow
    # checkpoints_status.
    for table in ("webhooks", "breakpoints", "paused_steps", "store_settings", "durable_values"):
        await _sql(url, f"DROP TABLE {table}")
    await _sql(url, "DROP INDEX checkpoints_status")
    await _sql(url, "CREATE INDEX checkpoints_status ON checkpoints (run_id, status, seq)")
    await _sql(url, "DELETE FROM schema_version WHERE version >= 3")
    assert await _indexes(url) != fresh
    async with open_postgres_store(url) as store:
        assert [run.id for run in await store.list_runs()] == ["kept"]
        assert await store.list_breakpoints() == []
        assert await store.apply([KeepSetting("s", "v")]) == ["v"]
        assert (await store.run_stamp("kept")) is not None
    assert await _sql(url, "SELECT max(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    # The migrated schema's indexes are those of a new one.
    assert await _indexes(url) == fresh
    assert SCHEMA_VERSION == 13


async def test_a_schema_newer_than_the_code_refuses_to_open(url: str) -> None:
    async with open_postgres_store(url):
        pass
    await _sql(url, "INSERT INTO schema_version (version) VALUES (%s)", SCHEMA_VERSION + 1)

    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer") as caught:
        async with open_postgres_store(url):
            pytest.fail("opened a store with a newer schema")  # pragma: no cover
    assert "upgrade trio-durable" in str(caught.value)
    with pytest.raises(StoreError, match="newer"):
        async with td.open_engine(td.App("newer"), store=url):
            pass  # pragma: no cover


# -- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_an_unreachable_database_fails_to_open_with_the_password_masked(
    scheme: str,
) -> None:
    url = f"{scheme}://alice:s3cr3t@127.0.0.1:{_free_port()}/shop?pool_size=2"
    for opener in (open_store, lambda u: td.open_engine(td.App("unreachable"), store=u)):
        with pytest.raises(StoreError) as caught:
            async with opener(url):
                pytest.fail("opened an unreachable store")  # pragma: no cover
        message = str(caught.value)
        assert f"{scheme}://alice:***@127.0.0.1:" in message
        assert "s3cr3t" not in message
        assert "Connection refused" in message
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_mask_password() -> None:
    assert mask_url("postgresql://u:p@h:5/d") == "postgresql://u:***@h:5/d"
    assert mask_url("postgresql://u@h/d") == "postgresql://u@h/d"
    assert mask_url("postgres://h/d?user=u&password=p&x=1") == (
        "postgres://h/d?user=u&password=***&x=1"
    )
    assert mask_url("postgresql://u:p:q@h/d") == "postgresql://u:***@h/d"


@pytest.mark.parametrize(
    "bad",
    [
        "postgresql://h/d?pool_size=0",
        "postgresql://h/d?pool_size=x",
        "postgresql://h/d?pool_size=1&pool_size=2",
        "postgresql://h/d?schema=a-b",
        "postgresql://h/d?schema=",
        "postgresql://h/d#frag",
        "postgresql://h:notaport/d",
        "postgresql://h/d?pool_size",
        "mysql://h/d",
    ],
)
async def test_malformed_urls_are_refused_before_connecting(bad: str) -> None:
    with pytest.raises(InvalidURLError):
        async with open_postgres_store(bad):
            pass  # pragma: no cover


async def test_an_option_libpq_does_not_know_is_a_bad_url(url: str) -> None:
    with pytest.raises(InvalidURLError, match="invalid URI query parameter"):
        async with open_postgres_store(url + "&no_such_option=1"):
            pass  # pragma: no cover
    # What libpq knows goes through.
    async with open_postgres_store(url + "&application_name=td-options&sslmode=disable"):
        pass


async def test_a_dropped_connection_fails_the_call_and_the_store_reconnects(url: str) -> None:
    async with open_postgres_store(url + "&application_name=td-dropped") as store:
        await store.create_run(Run(id="r1", workflow="w"))
        await _sql(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'td-dropped'",
        )
        with pytest.raises(StoreError) as caught:
            await store.create_run(Run(id="r2", workflow="w"))
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        # The broken connection was dropped; the next call opens another.
        assert (await store.create_run(Run(id="r2", workflow="w")))[1] is True
        assert [run.id for run in await store.list_runs()] == ["r1", "r2"]


async def test_a_database_that_goes_away_mid_run_fails_calls_until_it_is_back(
    tmp_path: Path,
) -> None:
    installed("postgres")
    workdir = tmp_path / "private"
    workdir.mkdir()
    base = await trio.to_thread.run_sync(postgres_server.start, workdir)
    try:
        url = base.replace("postgres@", "postgres:hunter2@")
        async with open_postgres_store(url) as store:
            await store.create_run(Run(id="before", workflow="w"))
            await trio.to_thread.run_sync(
                functools.partial(postgres_server.stop, workdir, keep_data=True)
            )
            for _ in range(2):
                with pytest.raises(StoreError) as caught:
                    await store.get_run("before")
                assert "hunter2" not in str(caught.value)
                assert "postgres:***@127.0.0.1" in str(caught.value)
            assert await trio.to_thread.run_sync(postgres_server.start, workdir) == base
            assert await store.get_run("before") == Run(id="before", workflow="w")
    finally:
        await trio.to_thread.run_sync(postgres_server.stop, workdir)


# -- query plans --------------------------------------------------------------------


async def _plan(url: str, statement: str, params: list[Any]) -> str:
    rows = await _sql(url, f"EXPLAIN (COSTS OFF) {statement}", *params)
    return "\n".join(row[0] for row in rows)


async def test_hot_reads_use_indexes(url: str) -> None:
    async with open_postgres_store(url):
        pass
    # Enough rows that a sequential scan would be the planner's choice if no
    # index served: 2,000 runs (most completed), 100 checkpoints each.
    await _sql(
        url,
        "INSERT INTO runs (id, workflow, version, namespace, status, input, tags, compensate,"
        " recoveries, created_at, updated_at, wake_at)"
        " SELECT 'r' || i, 'w', '1', 'default',"
        " CASE WHEN i % 10 = 0 THEN 'suspended' ELSE 'completed' END, '[]', '[]', false, 0,"
        " i, i, CASE WHEN i % 20 = 0 THEN i END"
        " FROM generate_series(1, 2000) AS i",
    )
    await _sql(
        url,
        "INSERT INTO checkpoints (run_id, seq, name, kind, status, attempts)"
        " SELECT 'r' || (i / 100 + 1), i % 100, 's', 'local',"
        " CASE WHEN i % 3 = 0 THEN 'pending' ELSE 'completed' END, 0"
        " FROM generate_series(0, 199999) AS i",
    )
    await _sql(url, "ANALYZE")

    count, params = count_checkpoints_query("r7", 1, 50, ["completed", "failed"], None)
    plan = await _plan(url, count, params)
    assert "checkpoints_status" in plan, plan
    assert "Seq Scan" not in plan, plan
    limited, params = count_checkpoints_query("r7", 1, 50, ["completed"], 10)
    plan = await _plan(url, limited, params)
    assert "checkpoints_status" in plan, plan
    assert "Seq Scan" not in plan, plan

    plan = await _plan(url, LIST_DUE_RUNS, [1000.0, 100])
    assert "runs_due" in plan, plan
    assert "Seq Scan" not in plan, plan
    plan = await _plan(url, NEXT_DUE_TIME, [])
    assert "runs_due" in plan, plan
    assert "Seq Scan" not in plan, plan

    async with open_postgres_store(url) as store:
        # Seqs 1..50 of r7 are rows 601..650, pending when divisible by 3.
        assert await store.count_checkpoints("r7", 1, 50, ["completed"]) == 34
        assert await store.list_due_runs(1000.0, 3) == ["r20", "r40", "r60"]
        stalled = await store.list_stalled_runs(limit=1000)
    plan = await _plan(url, LIST_STALLED, [100])
    assert "runs_waiting" in plan, plan
    assert "Seq Scan" not in plan, plan
    # Every suspended run without a wake time still has pending checkpoints.
    assert stalled == []


# -- the pool -----------------------------------------------------------------------


@pytest.mark.parametrize("pool_size", [1, 3])
async def test_the_pool_opens_at_most_pool_size_connections(url: str, pool_size: int) -> None:
    name = f"td-pool-{pool_size}"
    async with open_postgres_store(f"{url}&pool_size={pool_size}&application_name={name}") as store:
        assert store.pool_size == pool_size
        await store.create_run(Run(id="r", workflow="w"))

        async def busy(i: int) -> None:
            await store.save_checkpoint(Checkpoint(run_id="r", seq=i, name="s", kind="local"))
            await store.get_checkpoints("r", i, i)

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(busy, i)
        [(connections,)] = await _sql(
            url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", name
        )
        # Two hundred callers at once: the pool grew to its size, no further.
        assert connections == pool_size
        assert len(await store.get_checkpoints("r")) == 200
    # A backend leaves pg_stat_activity a moment after its client hangs up.
    await _until(
        url,
        "SELECT 1 WHERE NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = %s)",
        name,
    )


async def test_the_default_pool_size_and_the_fleet_scope(url: str) -> None:
    async with (
        open_postgres_store(url) as first,
        open_postgres_store(url.replace("postgresql://", "postgres://") + "&pool_size=2") as second,
    ):
        assert isinstance(first, PostgresStore)
        assert first.pool_size == DEFAULT_POOL_SIZE
        # Engines on one database (and schema) share a results queue.
        assert first.scope == second.scope
        assert first.scope.startswith("postgres-")
        assert first.url == url
    async with scratch_schema(url.partition("?")[0]) as other, open_postgres_store(other) as third:
        assert third.scope != first.scope


async def test_sessions_commit_durably(url: str) -> None:
    async with open_postgres_store(url + "&application_name=td-durable") as store:
        await store.create_run(Run(id="r", workflow="w"))
        # The session setting, read back through the store's own connection.
        conn = store._idle[0]
        setting = await trio.to_thread.run_sync(
            lambda: conn.execute("SHOW synchronous_commit").fetchone()
        )
        assert setting == ("on",)


# -- the engine on PostgreSQL -------------------------------------------------------

app = td.App("postgres-e2e")


@app.step()
async def add(x: int, y: int) -> int:
    return x + y


@app.step()
async def describe(total: int) -> str:
    return f"total={total}"


@app.workflow()
async def kid(ctx: td.Context, x: int) -> int:
    return await ctx.step(add, x, 100)


@app.workflow()
async def parent(ctx: td.Context, x: int) -> dict[str, Any]:
    first = await ctx.step(add, x, 1)
    await ctx.sleep(0.3)
    child = await ctx.child(kid, first)
    text = await ctx.step(describe, child)
    return {"first": first, "child": child, "text": text}


async def test_an_engine_runs_workflows_to_completion_on_postgres(url: str) -> None:
    async with td.open_engine(app, store=url, reconcile_interval=1.0) as engine:
        with trio.fail_after(PATIENCE):
            runs = [await engine.start(parent, i, run_id=f"p{i}") for i in range(5)]
            results = [await engine.result(run.id) for run in runs]
        assert results == [
            {"first": i + 1, "child": i + 101, "text": f"total={i + 101}"} for i in range(5)
        ]
        stored = await engine.get("p3")
        assert stored.status == "completed"
        assert json.loads(stored.output or "null")["child"] == 104

    # Everything is in the database: another engine (a new process, say)
    # sees the finished runs and their children.
    async with open_postgres_store(url) as store:
        children = await store.list_runs(parent_id="p3")
        assert [(run.workflow, run.status) for run in children] == [("kid", "completed")]
        checkpoints = await store.get_checkpoints("p3")
        assert [cp.kind for cp in checkpoints] == ["local", "timer", "child", "local"]
        timer, child = checkpoints[1], checkpoints[2]
        assert timer.wake_at is not None
        assert timer.enqueued_at is not None
        assert timer.wake_at - timer.enqueued_at == pytest.approx(0.3)
        # The body went on only once the timer was due.
        assert child.enqueued_at is not None
        assert child.enqueued_at >= timer.wake_at


# -- group commit -------------------------------------------------------------------


async def test_concurrent_batches_share_transactions_and_fail_alone(url: str) -> None:
    async with open_postgres_store(url + "&pool_size=1") as store:
        outcomes: dict[str, str] = {}

        async def write(i: int) -> None:
            ops: list[Any] = [CreateRun(Run(id=f"r{i}", workflow="w"))]
            if i % 5 == 4:
                # Fails after its first write: that write must vanish with it.
                ops.append(UpdateRun("missing", {"status": "running"}))
            try:
                await store.apply(ops)
            except WriteConflict:
                outcomes[f"r{i}"] = "conflict"
            else:
                outcomes[f"r{i}"] = "written"

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(write, i)

        written = sorted(run_id for run_id, outcome in outcomes.items() if outcome == "written")
        assert len(written) == 32
        assert sorted(run.id for run in await store.list_runs()) == written
        stats = store.statistics()
        assert stats.batches == 32
        # One connection: the first caller's trip, then one for the rest.
        assert stats.transactions <= 3


def _waits(trace: str) -> int:
    """How often the client waited for the server, in a libpq trace: once
    per simple ``Query`` and once per ``Sync`` (which ends a statement of the
    extended protocol, or a whole pipeline of them)."""
    sent = [line.split("\t")[2].split(" ")[0] for line in trace.splitlines() if line[:2] == "F\t"]
    return sum(1 for message in sent if message in ("Query", "Sync"))


async def test_batch_claims_and_settles_take_one_round_trip(url: str) -> None:
    async with open_postgres_store(url + "&pool_size=1") as store:
        await store.create_run(Run(id="r", workflow="w", status="suspended"))
        pending = [Checkpoint(run_id="r", seq=seq, name="s", kind="remote") for seq in range(200)]
        await store.apply([PutCheckpoint(cp) for cp in pending])
        [conn] = store._idle

        async def traced(ops: list[Any]) -> tuple[list[Any], int]:
            with tempfile.TemporaryFile("w+") as trace:
                conn.pgconn.trace(trace.fileno())
                conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
                try:
                    results = await store.apply(ops)
                finally:
                    conn.pgconn.untrace()
                trace.seek(0)
                text = trace.read()
                return results, _waits(text)

        claims = [ClaimCheckpoint(attrs.evolve(cp, status="completed")) for cp in pending]
        settles = [SettleCheckpoint("r", seq, "completed", output="1") for seq in range(200)]
        # A few times first: psycopg prepares a statement (a wait of its own,
        # once per connection) on its fifth use, BEGIN and COMMIT included.
        for _ in range(6):
            await store.apply([*claims[:2], *settles[:2]])
        few, few_claims = await traced(claims[20:25])
        many, many_claims = await traced([*claims[25:100], claims[25]])
        assert few == [True] * 5
        assert many == [True] * 75 + [False]
        _, few_settles = await traced(settles[100:103])
        settled, many_settles = await traced(settles[103:])
        assert all(cp is not None and cp.status == "completed" for cp in settled)
        # Begin, lock the run, the batch, commit: as many waits for 76 claims
        # as for 5.
        assert few_claims == many_claims == 4
        assert few_settles == many_settles == 4


async def test_two_engines_share_the_store_without_deadlocks(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Each run is started on both engines at once (one run results) and
    # awaited on the other; children and timers land on either engine, so
    # their transactions touch the same runs in every order.
    outputs: dict[int, Any] = {}
    async with (
        td.open_engine(app, store=url, engine_id="a", reconcile_interval=0.5) as a,
        td.open_engine(app, store=url, engine_id="b", reconcile_interval=0.5) as b,
    ):

        async def both(i: int) -> None:
            first, second = (a, b) if i % 2 else (b, a)
            run = await first.start(parent, i, run_id=f"p{i}")
            assert (await second.start(parent, i, run_id=f"p{i}")).id == run.id
            outputs[i] = await second.result(run.id)

        with trio.fail_after(PATIENCE):
            async with trio.open_nursery() as nursery:
                for i in range(100):
                    nursery.start_soon(both, i)
    assert outputs == {
        i: {"first": i + 1, "child": i + 101, "text": f"total={i + 101}"} for i in range(100)
    }
    async with open_postgres_store(url) as store:
        assert len(await store.list_runs(limit=1000)) == 200
    assert not [r for r in caplog.records if "lost a race" in r.getMessage()]
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()]


async def test_a_transaction_that_deadlocks_runs_again(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_postgres_store(url + "&pool_size=1&application_name=td-victim") as store:
        await store.create_run(Run(id="r", workflow="w", status="suspended"))
        await store.save_checkpoint(Checkpoint(run_id="r", seq=1, name="s", kind="remote"))
        other = await trio.to_thread.run_sync(
            lambda: psycopg.connect(url.partition("?")[0], autocommit=True)
        )
        try:
            # Another client takes the checkpoint's row first. It waits 10 s
            # before it checks for deadlocks, so the store's transaction (1 s,
            # the default) is the one PostgreSQL aborts.
            await trio.to_thread.run_sync(
                lambda: [
                    other.execute(statement)
                    for statement in (
                        f'SET search_path = "{_schema_of(url)}"',
                        "BEGIN",
                        "SET LOCAL deadlock_timeout = '10s'",
                        "UPDATE checkpoints SET attempts = 0 WHERE run_id = 'r' AND seq = 1",
                    )
                ]
            )
            settled: list[Any] = []

            async def settle() -> None:
                settled.extend(
                    await store.apply([SettleCheckpoint("r", 1, "completed", output='"ok"')])
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(settle)
                # The store locked the run and now waits for the checkpoint.
                await _until(
                    url,
                    "SELECT 1 FROM pg_stat_activity"
                    " WHERE application_name = 'td-victim' AND wait_event_type = 'Lock'",
                )
                # Now the other client wants the run: a deadlock, which aborts
                # the store's transaction; it runs again once the other commits.
                await trio.to_thread.run_sync(
                    lambda: other.execute("UPDATE runs SET recoveries = 7 WHERE id = 'r'")
                )
                await trio.to_thread.run_sync(lambda: other.execute("COMMIT"))
        finally:
            await trio.to_thread.run_sync(other.close)
        [checkpoint] = settled
        assert (checkpoint.status, checkpoint.output) == ("completed", '"ok"')
        run = await store.get_run("r")
        assert run is not None
        assert run.recoveries == 7
        assert [
            r for r in caplog.records if "DeadlockDetected); running it again" in r.getMessage()
        ]
