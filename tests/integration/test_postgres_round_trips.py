"""The PostgreSQL store answers a trip of many jobs in a few statements.

A trip takes every job queued while the one before it ran; with a pool of
one connection, N calls made at once ride two trips: the first caller's
alone, then all the others. These tests pin what the others cost
(`PostgresStore.round_trips`): one statement for every run read, and, for
the writes, a few statements per kind of operation rather than one per
operation. They also pin that the few-statements path gives every caller
the answer, and the error, one statement per operation gives.
"""

from __future__ import annotations

import functools
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import psycopg
import pytest
import trio
import trio.testing

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._base._exceptions import LeaseLostError
from trio_durable._base._records import Checkpoint, Run, RunStatus
from trio_durable._stores._base import WriteConflict
from trio_durable._stores._ops import Announce, CreateRun, Op, PutCheckpoint, UpdateRun
from trio_durable._stores._postgres import PostgresStore, open_postgres_store

N = 100

app = td.App("postgres-round-trips")


@app.step()
async def one(x: int) -> int:
    return x + 1


@app.step()
async def two(x: int) -> int:
    return x * 2


@app.step()
async def three(x: int) -> int:
    return x - 3


@app.workflow()
async def three_steps(ctx: td.Context, x: int) -> int:
    a = await ctx.step(one, x)
    b = await ctx.step(two, a)
    return await ctx.step(three, b)


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """A fresh schema, reached through a pool of one connection."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield f"{scratch}&pool_size=1"


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    async with open_postgres_store(url) as opened:
        yield opened


def _run(i: int, **changes: Any) -> Run:
    return Run(
        id=f"run-{i:03}",
        workflow="wf",
        version="1",
        namespace="default",
        input=str(i),
        status="running",
        lease_owner="engine-a",
        lease_expiry=100.0,
        tags=("t",) if i % 2 else (),
        created_at=float(i),
        updated_at=float(i),
        **changes,
    )


def _checkpoint(i: int, seq: int) -> Checkpoint:
    return Checkpoint(
        run_id=f"run-{i:03}",
        seq=seq,
        name="step",
        kind="local",
        status="completed",
        output=str(i * seq),
        enqueued_at=1,  # an int among floats: stored as a float
        finished_at=2.5,
    )


def _turn_end(i: int) -> list[Any]:
    return [
        CreateRun(_run(i)),
        PutCheckpoint(_checkpoint(i, 1)),
        PutCheckpoint(_checkpoint(i, 2)),
        UpdateRun(
            f"run-{i:03}",
            {"status": "completed", "output": str(i), "lease_owner": None, "updated_at": 3},
            expect_status=frozenset({"running"}),
            expect_owner="engine-a",
            now=50.0,
        ),
        Announce(run_id=f"run-{i:03}", kind="end", origin="engine-a"),
    ]


async def _at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Make the calls at once; return each one's result or exception."""
    results: list[Any] = [None] * len(calls)

    async def call(i: int) -> None:
        try:
            results[i] = await calls[i]()
        except Exception as exc:
            results[i] = exc

    async with trio.open_nursery() as nursery:
        for i in range(len(calls)):
            nursery.start_soon(call, i)
    return results


async def test_run_reads_of_a_trip_are_one_statement(store: PostgresStore) -> None:
    await store.apply([CreateRun(_run(i)) for i in range(0, N, 2)])
    before = store.round_trips
    found = await _at_once(
        [lambda i=i: store.get_run(f"run-{i % (N // 2) * 2:03}") for i in range(N)]
        + [lambda: store.get_run("missing")]
    )
    # The first caller's trip, then one for the others.
    assert store.round_trips - before == 2
    assert [run.id for run in found[:N]] == [f"run-{i % (N // 2) * 2:03}" for i in range(N)]
    assert found[N] is None
    assert found[0] == _run(0)


async def test_writes_of_a_trip_are_a_few_statements(store: PostgresStore) -> None:
    before = store.round_trips
    results = await _at_once([functools.partial(store.apply, _turn_end(i)) for i in range(N)])
    # One by one: 5 statements per call. Layered, each trip is BEGIN, the
    # lock of its runs, the creates, the updates, the puts, the NOTIFY and
    # COMMIT.
    assert store.round_trips - before <= 2 * 7
    assert store.statistics().transactions == 2
    for i, result in enumerate(results):
        assert result == [(_run(i), True), None, None, True, None]
    run = await store.get_run("run-007")
    assert run is not None
    assert (run.status, run.output, run.lease_owner, run.updated_at) == ("completed", "7", None, 3)
    assert run.tags == ("t",)
    assert await store.get_checkpoints("run-007") == [_checkpoint(7, 1), _checkpoint(7, 2)]
    stored = await store.get_checkpoints("run-007", 1, 1)
    assert stored[0].enqueued_at == 1.0


async def test_non_finite_times_and_any_text_go_through_a_layered_trip(
    store: PostgresStore,
) -> None:
    # The layered statements take their rows as one JSON parameter: JSON
    # has no infinities or NaN, and text may hold quotes, backslashes,
    # escapes and any Unicode.
    text = 'q"uo\\te \\u0041 \u00e9\u4e2d\U0001f600 ,{}[]'
    batches: list[list[Op]] = [
        [
            CreateRun(attrs.evolve(_run(i), input=text, lease_expiry=math.inf)),
            PutCheckpoint(
                attrs.evolve(_checkpoint(i, 1), output=text, wake_at=-math.inf, started_at=None)
            ),
            UpdateRun(f"run-{i:03}", {"wake_at": math.inf, "output": text}),
        ]
        for i in range(N)
    ]
    before = store.round_trips
    await _at_once([functools.partial(store.apply, ops) for ops in batches])
    assert store.round_trips - before <= 2 * 7  # layered, not one by one
    run = await store.get_run("run-042")
    assert run is not None
    assert (run.input, run.output, run.lease_expiry, run.wake_at) == (
        text,
        text,
        math.inf,
        math.inf,
    )
    [cp] = await store.get_checkpoints("run-042")
    assert (cp.output, cp.wake_at) == (text, -math.inf)


async def test_operations_on_one_run_keep_their_order(url: str, store: PostgresStore) -> None:
    """Three calls of one trip on the same run: each sees the writes of the
    one before, as one by one."""
    await store.apply([CreateRun(_run(0))])
    # Another connection holds the run's row, so that the first call's trip
    # waits for it while the others queue, in order, for the next trip.
    blocker = await trio.to_thread.run_sync(functools.partial(psycopg.connect, _libpq(url)))
    try:
        await trio.to_thread.run_sync(
            blocker.execute, "SELECT FROM runs WHERE id = 'run-000' FOR UPDATE"
        )
        calls: list[list[Op]] = [
            [UpdateRun("run-000", {"output": "a"})],
            [
                PutCheckpoint(_checkpoint(0, 1)),
                UpdateRun("run-000", {"status": "suspended"}, expect_status=frozenset({"running"})),
            ],
            [
                UpdateRun("run-000", {"wake_at": 7.0}, expect_status=frozenset({"suspended"})),
                PutCheckpoint(_checkpoint(0, 2)),
                UpdateRun("run-000", {"output": "b"}, expect_status=frozenset({"suspended"})),
            ],
        ]
        done: list[Any] = [None] * len(calls)

        async def call(i: int) -> None:
            done[i] = await store.apply(calls[i])

        before = store.round_trips
        async with trio.open_nursery() as nursery:
            for i in range(len(calls)):
                nursery.start_soon(call, i)
                await trio.testing.wait_all_tasks_blocked()
            await trio.to_thread.run_sync(blocker.commit)
    finally:
        await trio.to_thread.run_sync(blocker.close)
    assert done == [[True], [None, True], [True, None, True]]
    # The first trip: BEGIN, the lock, its update, COMMIT. The second: BEGIN,
    # the lock, a statement for each of its five operations (each follows
    # one on the same run), COMMIT.
    assert store.round_trips - before == 4 + 8
    run = await store.get_run("run-000")
    assert run is not None
    assert (run.output, run.status, run.wake_at) == ("b", "suspended", 7.0)
    assert [cp.seq for cp in await store.get_checkpoints("run-000")] == [1, 2]


def _libpq(url: str) -> str:
    """The libpq connection string of a store URL, its search path set to
    the store's schema."""
    base, _, options = url.partition("?")
    schema = dict(option.split("=", 1) for option in options.split("&"))["schema"]
    return f"{base}?options=-csearch_path%3D{schema}"


async def test_a_broken_expectation_fails_its_batch_alone(store: PostgresStore) -> None:
    await store.apply([CreateRun(_run(i)) for i in range(N)])
    calls: list[Callable[[], Any]] = [lambda: store.get_run("run-000")]
    for i in range(N):
        owner = "engine-b" if i == 40 else "engine-a"
        status: frozenset[RunStatus] = frozenset({"suspended" if i == 60 else "running"})
        ops: list[Op] = [
            PutCheckpoint(_checkpoint(i, 1)),
            UpdateRun(
                f"run-{i:03}",
                {"status": "completed"},
                expect_status=status,
                expect_owner=owner,
                now=50.0,
            ),
        ]
        calls.append(functools.partial(store.apply, ops))
    results = (await _at_once(calls))[1:]
    assert isinstance(results[40], LeaseLostError)
    assert isinstance(results[60], WriteConflict)
    assert [r for i, r in enumerate(results) if i not in (40, 60)] == [[None, True]] * (N - 2)
    assert await store.get_checkpoints("run-040") == []
    lost = await store.get_run("run-040")
    assert lost is not None
    assert lost.status == "running"
    kept = await store.get_run("run-041")
    assert kept is not None
    assert kept.status == "completed"


async def test_three_step_runs_cost_under_one_round_trip_each(url: str) -> None:
    """An engine's start, turn and result of a three-step run: one
    statement each for its start's read, its creation, its checkpoints, its
    end and its result's read, one by one; a fraction of one here."""
    async with (
        open_postgres_store(url) as store,
        td.open_engine(app, store=store, broker="memory://") as engine,
    ):
        before = store.round_trips

        async def one_run(i: int) -> None:
            run = await engine.start(three_steps, i, run_id=f"r-{i}")
            assert await engine.result(run.id) == (i + 1) * 2 - 3

        async with trio.open_nursery() as nursery:
            for i in range(N):
                nursery.start_soon(one_run, i)
        assert (store.round_trips - before) / N < 1
