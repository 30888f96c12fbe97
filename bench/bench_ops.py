"""Store operations, transactions, rows read and broker messages per unit of work.

Counts, not speed: each figure is what one workflow, one local step, one
remote step, one timer or one fan member costs the store (operations
applied, batches, transactions committed, run and checkpoint rows read,
from the store's `statistics()`) and the broker (messages published,
delivered, acked, through a counting wrapper over the broker). Each shape
runs ``--repeat`` (5) times, one run after another, each awaited and
drained before the next, and the per-unit cost is a difference, so that
what every run costs cancels out:

- ``workflow``: a workflow of one local step, less one local step;
- ``local_step``, ``remote_step``, ``timer``: (11 of them - 1) / 10;
- ``child_member``, ``step_member``: a fan of children, of remote steps
  (``ctx.all``), (110 members - 10) / 100.

It counts on SQLite (a fresh file; ``--stores``) and on PostgreSQL
(``--url``, default ``$POSTGRES_URL``, a fresh schema dropped at the end;
skipped with a message when neither is set), over the memory broker and,
with ``--brokers memory,amqp,nats``, over RabbitMQ (``$AMQP_URL``) and NATS
(``$NATS_URL``), each with an embedded worker. Cases:
``ops.<store>.<unit>.<counter>``, for example
``ops.sqlite.local_step.transactions``, and
``ops.<broker>.remote_step.published``.

On PostgreSQL it also measures what `bench/sizing.py` needs:

- ``ops.postgres.connections``: the most connections the engine held at
  once (``pg_stat_activity``, sampled while ``--concurrent`` runs go at
  once): its ``pool_size`` and the one its store's watch listens on;
- ``ops.postgres.load.*`` and ``ops.postgres.sequential.*``: per
  three-step workflow (`bench_postgres`'s), started ``--concurrent`` at
  once and ``--sequential`` one after another: transactions, operations,
  engine and server CPU (ms); and from the two, by least squares on
  ``server = a * transactions + b * operations``, the server's CPU per
  transaction (``ops.postgres.server_ms_per_transaction``) and per
  operation (``ops.postgres.server_ms_per_op``);
- ``ops.postgres.commits_per_s``: commits per second of one connection,
  one small insert each (what the disk's flushes allow in a row).

The server must run on this host for its CPU to be read. Usage:
``python bench/bench_ops.py [--stores sqlite,postgres] [--brokers memory]
[--repeat 5] [--concurrent 1000] [--sequential 300] [--json PATH]``. It
prints figures (with ``--json PATH``, also as JSON lines) and never passes
or fails.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from _figures import add_json_option, add_names_option, figure, use_args

import trio_durable as td
from trio_durable.brokers import (
    RESULTS,
    Broker,
    Consumer,
    Delivery,
    Outgoing,
    WorkerDescriptor,
    open_broker,
)

BENCH = "bench_ops"
TIMER = 0.05
"""Seconds each timer sleeps: the poller, not a test clock, wakes the run,
as in production. Not shorter: a timer that comes due between the poller's
listing of due runs and its reading of the next due time waits a third of
the lease TTL (10 s) for its wake; 2 ms timers met that often."""

app = td.App("bench-ops")


@app.step()
async def inc(x: int) -> int:
    return x + 1


@app.step(group="ops")
async def echo(x: int) -> int:
    return x


@app.workflow()
async def local_steps(ctx: td.Context, n: int) -> int:
    x = 0
    for _ in range(n):
        x = await ctx.step(inc, x)
    return x


@app.workflow()
async def remote_steps(ctx: td.Context, n: int) -> int:
    x = 0
    for i in range(n):
        x += await ctx.step(echo, i)
    return x


@app.workflow()
async def timers(ctx: td.Context, n: int) -> int:
    for _ in range(n):
        await ctx.sleep(TIMER)
    return n


@app.workflow()
async def member(ctx: td.Context, x: int) -> int:
    return x


@app.workflow()
async def child_fan(ctx: td.Context, n: int) -> int:
    return sum(await ctx.all(member, list(range(n))))


@app.workflow()
async def step_fan(ctx: td.Context, n: int) -> int:
    return sum(await ctx.all(echo, list(range(n))))


@app.workflow()
async def three_steps(ctx: td.Context, x: int) -> int:
    # bench_postgres's workflow: what its fleets and bench/sizing.py measure.
    a = await ctx.step(inc, x)
    b = await ctx.step(inc, a)
    return await ctx.step(inc, b)


# -- counting broker messages --------------------------------------------------------


@attrs.define
class MessageCounts:
    """Messages through a broker: published to worker groups (tasks) and to
    the results queue, delivered to consumers, acked and rejected."""

    tasks: int = 0
    results: int = 0
    delivered: int = 0
    acked: int = 0
    rejected: int = 0

    def copy(self) -> MessageCounts:
        return attrs.evolve(self)


class _CountingConsumer:
    def __init__(self, inner: Consumer, counts: MessageCounts) -> None:
        self._inner = inner
        self._counts = counts

    async def receive(self, max_items: int) -> list[Delivery]:
        found = await self._inner.receive(max_items)
        self._counts.delivered += len(found)
        return found

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self._counts.acked += len(deliveries)
        await self._inner.ack(deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        self._counts.rejected += len(deliveries)
        await self._inner.reject(deliveries, requeue=requeue)


class CountingBroker:
    """Any `Broker`, with the messages that pass through it counted (in
    `counts`). Announcements and their reads pass uncounted: they follow the
    clock, not the work."""

    def __init__(self, inner: Broker) -> None:
        self.inner = inner
        self.counts = MessageCounts()

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        for message in messages:
            # Results go to RESULTS, or to RESULTS.<scope> for a store
            # with a scope (a PostgreSQL schema, a SQLite file).
            if message.queue == RESULTS or message.queue.startswith(f"{RESULTS}."):
                self.counts.results += 1
            else:
                self.counts.tasks += 1
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        @asynccontextmanager
        async def counted() -> AsyncIterator[Consumer]:
            async with self.inner.open_consumer(queue, prefetch=prefetch) as consumer:
                yield _CountingConsumer(consumer, self.counts)

        return counted()

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- counting store operations -------------------------------------------------------

COUNTERS = ("ops", "batches", "transactions", "rows_read")
MESSAGES = ("tasks", "results", "delivered", "acked")


def snapshot(engine: td.Engine, broker: CountingBroker) -> dict[str, int]:
    """The store's and the broker's counters now."""
    stats = engine.store.statistics()
    counts = broker.counts
    return {
        "ops": stats.ops,
        "batches": stats.batches,
        "transactions": stats.transactions,
        "rows_read": stats.run_rows_read + stats.checkpoint_rows_read,
        "tasks": counts.tasks,
        "results": counts.results,
        "delivered": counts.delivered,
        "acked": counts.acked,
    }


async def cost_of_runs(
    engine: td.Engine, broker: CountingBroker, workflow: Any, n: int, repeat: int
) -> dict[str, float]:
    """The counters' growth per run, over ``repeat`` runs of ``workflow(n)``
    one after another, each awaited and drained before the next."""
    before = snapshot(engine, broker)
    for _ in range(repeat):
        run = await engine.start(workflow, n)
        await engine.result(run.id)
        await engine.drain()
    after = snapshot(engine, broker)
    return {key: (after[key] - before[key]) / repeat for key in before}


@attrs.frozen
class Unit:
    """A unit of work, costed as (runs of ``large`` - runs of ``small``) /
    (``large`` - ``small``)."""

    name: str
    workflow: Any
    small: int
    large: int
    remote: bool = False


UNITS = (
    Unit("local_step", local_steps, 1, 11),
    Unit("remote_step", remote_steps, 1, 11, remote=True),
    Unit("timer", timers, 1, 11),
    Unit("child_member", child_fan, 10, 110),
    Unit("step_member", step_fan, 10, 110, remote=True),
)


async def unit_costs(
    engine: td.Engine, broker: CountingBroker, repeat: int, *, remote: bool = True
) -> dict[str, dict[str, float]]:
    """What each unit of `UNITS` costs (``workflow``: a one-local-step
    workflow less its step). ``remote`` False leaves remote units out."""
    # A first run of each shape warms caches and connections up.
    for unit in UNITS:
        if remote or not unit.remote:
            await cost_of_runs(engine, broker, unit.workflow, unit.small, 1)
    found: dict[str, dict[str, float]] = {}
    for unit in UNITS:
        if unit.remote and not remote:
            continue
        small = await cost_of_runs(engine, broker, unit.workflow, unit.small, repeat)
        large = await cost_of_runs(engine, broker, unit.workflow, unit.large, repeat)
        found[unit.name] = {
            key: (large[key] - small[key]) / (unit.large - unit.small) for key in small
        }
        if unit.name == "local_step":
            found["one_step_workflow"] = small
            found["workflow"] = {key: small[key] - found[unit.name][key] for key in small}
    return found


def report_units(store: str, found: dict[str, dict[str, float]]) -> None:
    for unit, costs in found.items():
        for counter in COUNTERS:
            figure(
                BENCH,
                f"ops.{store}.{unit}.{counter}",
                costs[counter],
                f"per {unit.replace('_', ' ')}",
                better="lower",
                label=f"{store}: {counter.replace('_', ' ')} per {unit.replace('_', ' ')}",
            )


def report_messages(broker: str, found: dict[str, dict[str, float]]) -> None:
    for unit in ("remote_step", "step_member"):
        if unit not in found:
            continue
        for counter in MESSAGES:
            figure(
                BENCH,
                f"ops.{broker}.{unit}.{counter}",
                found[unit][counter],
                f"messages per {unit.replace('_', ' ')}",
                better="lower",
                label=f"{broker} broker: messages {counter} per {unit.replace('_', ' ')}",
            )


@asynccontextmanager
async def counted_engine(
    store: str, broker: Broker, **options: Any
) -> AsyncIterator[tuple[td.Engine, CountingBroker]]:
    counting = CountingBroker(broker)
    async with td.open_engine(
        app, store=store, broker=counting, serve=["ops"], seed=1, **options
    ) as engine:
        yield engine, counting


# -- SQLite --------------------------------------------------------------------------


async def bench_sqlite(repeat: int) -> None:
    print("SQLite store (a fresh file), memory broker, embedded worker")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'ops.db'}"
        async with counted_engine(url, td.MemoryBroker()) as (engine, broker):
            found = await unit_costs(engine, broker, repeat)
    report_units("sqlite", found)
    report_messages("memory", found)


async def bench_broker(name: str, url: str, repeat: int) -> None:
    print(f"{name} broker ({url.split('@')[-1]}), memory store, embedded worker")
    async with open_broker(url) as inner, counted_engine("memory://", inner) as (engine, broker):
        found = await unit_costs(engine, broker, repeat)
    report_messages(name, found)


# -- PostgreSQL ----------------------------------------------------------------------


def engine_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_connections(base: str, application: str, stop: threading.Event) -> int:
    """Sample ``pg_stat_activity`` until ``stop``: the most connections of
    ``application`` seen at once."""
    import psycopg

    most = 0
    with psycopg.connect(base, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (application,),
            ).fetchone()
            most = max(most, row[0] if row else 0)
            stop.wait(0.005)
    return most


def commits_per_second(base: str, schema: str, seconds: float = 1.0) -> float:
    """Commits per second of one connection, one small insert each."""
    import psycopg
    from psycopg import sql

    table = sql.Identifier(schema, "commit_probe")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute(sql.SQL("CREATE TABLE {} (n integer)").format(table))
        insert = sql.SQL("INSERT INTO {} VALUES (%s)").format(table)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            conn.execute(insert, (count,))
            count += 1
        return count / (time.perf_counter() - start)


async def three_step_costs(
    engine: td.Engine, postmaster: int, n: int, *, at_once: bool
) -> dict[str, float]:
    """Per three-step workflow: transactions, operations, engine and server
    CPU (ms), for ``n`` runs at once or one after another."""
    import bench_postgres

    stats = engine.store.statistics()
    before = (stats.transactions, stats.ops, engine_cpu(), bench_postgres.server_cpu(postmaster))

    async def one(i: int) -> None:
        run = await engine.start(three_steps, i)
        assert await engine.result(run.id) == i + 3

    if at_once:
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
    else:
        for i in range(n):
            await one(i)
    server = bench_postgres.server_cpu(postmaster)
    return {
        "transactions": (stats.transactions - before[0]) / n,
        "ops": (stats.ops - before[1]) / n,
        "engine_ms": 1000 * (engine_cpu() - before[2]) / n,
        "server_ms": 1000 * (server - before[3]) / n,
    }


def fit_server_costs(
    points: Sequence[dict[str, float]],
) -> tuple[float, float]:
    """``server_ms = a * transactions + b * ops`` by least squares (through
    the origin); returns ``(a, b)``, each at least 0."""
    stt = sum(p["transactions"] ** 2 for p in points)
    soo = sum(p["ops"] ** 2 for p in points)
    sto = sum(p["transactions"] * p["ops"] for p in points)
    sts = sum(p["transactions"] * p["server_ms"] for p in points)
    sos = sum(p["ops"] * p["server_ms"] for p in points)
    det = stt * soo - sto * sto
    if det == 0:
        return 0.0, (sos / soo if soo else 0.0)
    a = (sts * soo - sos * sto) / det
    b = (stt * sos - sto * sts) / det
    if a < 0:
        return 0.0, sos / soo
    if b < 0:
        return sts / stt, 0.0
    return a, b


async def bench_postgres_ops(args: argparse.Namespace, base: str) -> None:
    import bench_postgres

    schema = f"bench_{secrets.token_hex(4)}"
    application = f"bench_ops_{schema}"
    url = (
        f"{base}{'&' if '?' in base else '?'}schema={schema}"
        f"&pool_size={args.pool_size}&application_name={application}"
    )
    postmaster = await trio.to_thread.run_sync(bench_postgres.postmaster_pid, base)
    print(f"PostgreSQL store ({base}, schema {schema}, pool_size={args.pool_size}), memory broker")
    try:
        async with counted_engine(url, td.MemoryBroker()) as (engine, broker):
            found = await unit_costs(engine, broker, args.repeat)
            report_units("postgres", found)

            # Connections: sampled while runs go at once.
            stop = threading.Event()
            async with trio.open_nursery() as nursery:

                async def sample() -> None:
                    most = await trio.to_thread.run_sync(peak_connections, base, application, stop)
                    figure(
                        BENCH,
                        "ops.postgres.connections",
                        most,
                        "connections",
                        better="lower",
                        label=f"most connections of one engine at once (pool_size={args.pool_size})",
                        pool_size=args.pool_size,
                    )

                nursery.start_soon(sample)
                await three_step_costs(engine, postmaster, args.concurrent, at_once=True)
                stop.set()

            points = []
            for what, at_once, n in (
                ("load", True, args.concurrent),
                ("sequential", False, args.sequential),
            ):
                costs = await three_step_costs(engine, postmaster, n, at_once=at_once)
                points.append(costs)
                how = f"{n} at once" if at_once else f"{n} one after another"
                if costs["transactions"]:
                    print(f"    ({1 / costs['transactions']:,.1f} workflows per transaction)")
                for key, value in costs.items():
                    unit = "ms/workflow" if key.endswith("_ms") else "per workflow"
                    figure(
                        BENCH,
                        f"ops.postgres.{what}.{key}",
                        value,
                        unit,
                        better="lower",
                        label=f"three-step workflows, {how}: {key.replace('_', ' ')}",
                    )
        a, b = fit_server_costs(points)
        figure(
            BENCH,
            "ops.postgres.server_ms_per_transaction",
            a,
            "ms/transaction",
            better="lower",
            label="server CPU per transaction (fit)",
        )
        figure(
            BENCH,
            "ops.postgres.server_ms_per_op",
            b,
            "ms/op",
            better="lower",
            label="server CPU per operation (fit)",
        )
        rate = await trio.to_thread.run_sync(commits_per_second, base, schema)
        figure(
            BENCH,
            "ops.postgres.commits_per_s",
            rate,
            "commits/s",
            label="commits per second of one connection (one small insert each)",
        )
    finally:
        await trio.to_thread.run_sync(bench_postgres._drop_schema, base, schema)


async def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable operation counts, Python {sys.version.split()[0]},"
        f" trio {trio.__version__}, {os.cpu_count()} CPUs, {args.repeat} runs of each shape"
    )
    stores = list(args.stores)
    brokers = list(args.brokers)
    if "sqlite" in stores:
        await bench_sqlite(args.repeat)
    for name, env in (("amqp", "AMQP_URL"), ("nats", "NATS_URL")):
        if name in brokers:
            if os.environ.get(env):
                await bench_broker(name, os.environ[env], args.repeat)
            else:
                print(f"(no ${env}: {name} broker messages not counted)")
    if "postgres" in stores:
        base = args.url or os.environ.get("POSTGRES_URL")
        if base:
            await bench_postgres_ops(args, base)
        else:
            print("(no --url and no $POSTGRES_URL: PostgreSQL skipped)")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_names_option(parser, "--stores", ("sqlite", "postgres"))
    add_names_option(parser, "--brokers", ("memory", "amqp", "nats"), default=("memory",))
    parser.add_argument("--url", default=None, help="PostgreSQL (default $POSTGRES_URL)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--pool-size", type=int, default=4)
    add_json_option(parser)
    args = parser.parse_args(argv)
    use_args(args)
    return args


if __name__ == "__main__":
    trio.run(main, parse())
