"""Remote workflows against local workflows with remote steps.

The workload: ``--runs`` runs of a three-step workflow (three remote steps
in sequence, group ``work``), all started at once, measured two ways side
by side:

(a) a local workflow: the engine holds the body and dispatches the steps;
(b) the same body as a remote workflow (``group="deciders"``): the engine's
    app declares it by name only (`App.remote_workflow`), and each turn is a
    decision task that a worker answers by replaying the body.

Both use the same worker: one `open_worker` in this process (over NATS on
a broker connection of its own), serving ``work`` and ``deciders``
(concurrency 256); each measurement opens a fresh engine, worker and
store. For each broker in ``--brokers`` (the memory broker; NATS
JetStream at ``--nats-url``) and each store in ``--stores`` (the memory
store; a SQLite file), it prints for (a) and for (b) the runs per second
and the CPU time of this process per run (engine, worker and broker
client together); per run, the broker messages (tasks and results,
counted as the engine and the worker dispatch them), the decision tasks,
the engine's turns and the store's batches (`Store.apply` calls); then
(b)'s runs per second and CPU per run as ratios to (a)'s.

Each invocation uses a namespace of its own, so over NATS its queues
collide with no one's. It prints figures and never passes or fails. Usage:
``python bench/bench_remote_workflows.py [--runs 1000] [--nats-runs 500]
[--brokers memory,nats] [--stores memory,sqlite] [--nats-url nats://...]
[--repeat 1] [--json PATH]`` (``--nats-url`` defaults to ``$NATS_URL``,
else a local server on 4222). Cases: ``<broker>.<store>.remote_workflows.local``
and ``.remote`` (runs/s, with ``.cpu`` and the counts per run), and
``.remote_over_local``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import trio
from _figures import add_json_option, add_names_option, figure, use_args

import trio_durable as td
from trio_durable.brokers import Consumer, Outgoing

BENCH = "bench_remote_workflows"

WORK = "work"
DECIDERS = "deciders"
CONCURRENCY = 256
"""The worker's concurrency (so its prefetch), as in the other broker benches."""
NAMESPACE = f"bench{secrets.token_hex(4)}"
"""This invocation's namespace: over NATS, its queues are its own."""
MEASUREMENTS = itertools.count()


async def _inc(x: int) -> int:
    return x + 1


def three_steps(inc: td.Step[[int], int]) -> Callable[[td.Context, int], Awaitable[int]]:
    """The body both ways: three remote steps in sequence."""

    async def body(ctx: td.Context, x: int) -> int:
        x = await ctx.step(inc, x)
        x = await ctx.step(inc, x)
        return await ctx.step(inc, x)

    return body


# The workers' app: the steps and the remote workflow's body.
workers = td.App("bench-remote-workflows")
_worker_inc = workers.step(group=WORK, name="inc")(_inc)
workers.workflow(group=DECIDERS, name="remote_three")(three_steps(_worker_inc))

# The engine's app: the local workflow's body, and the remote one by name.
service = td.App("bench-remote-workflows-service")
_service_inc = service.step(group=WORK, name="inc")(_inc)
service.workflow(name="local_three")(three_steps(_service_inc))
service.remote_workflow("remote_three", group=DECIDERS)


@attrs.define
class Tally:
    """Messages dispatched, by kind: step tasks (to ``work``), decision
    tasks (to ``deciders``), and results (to the engine's results queue)."""

    step_tasks: int = 0
    decision_tasks: int = 0
    results: int = 0


@attrs.define(eq=False)
class Counted:
    """A broker that counts into ``tally`` the messages dispatched through
    it, and otherwise is the broker it wraps."""

    broker: td.Broker
    tally: Tally

    @property
    def durable(self) -> bool:
        return self.broker.durable

    @property
    def max_payload(self) -> int | None:
        return self.broker.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.broker.dispatch(messages)
        for message in messages:
            group = message.queue.partition("@")[0]
            if group == WORK:
                self.tally.step_tasks += 1
            elif group == DECIDERS:
                self.tally.decision_tasks += 1
            else:
                self.tally.results += 1

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.broker.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: td.WorkerDescriptor, ttl: float) -> None:
        await self.broker.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.broker.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[td.WorkerDescriptor]:
        return await self.broker.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.broker.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.broker.quiet(queues)

    async def aclose(self) -> None:
        await self.broker.aclose()


@attrs.frozen
class Figures:
    runs_per_s: float
    cpu_ms_per_run: float
    tasks_per_run: float
    results_per_run: float
    decision_tasks_per_run: float
    turns_per_run: float
    store_batches_per_run: float


@asynccontextmanager
async def connections(url: str | None, tally: Tally) -> AsyncIterator[tuple[Counted, Counted]]:
    """The engine's broker and the worker's: one memory broker for both
    (``url`` None), or a connection each to ``url``."""
    if url is None:
        memory = td.MemoryBroker()
        yield Counted(memory, tally), Counted(memory, tally)
        return
    async with td.open_broker(url) as engine_side, td.open_broker(url) as worker_side:
        yield Counted(engine_side, tally), Counted(worker_side, tally)


async def measure(workflow: str, runs: int, url: str | None, store: str) -> Figures:
    """Start ``runs`` runs of ``workflow`` at once and wait for them all."""
    tally = Tally()
    prefix = f"{NAMESPACE}.{workflow}.{next(MEASUREMENTS)}"
    async with AsyncExitStack() as stack:
        engine_broker, worker_broker = await stack.enter_async_context(connections(url, tally))
        worker = await stack.enter_async_context(
            td.open_worker(
                workers,
                broker=worker_broker,
                groups=[f"{WORK}@{NAMESPACE}", f"{DECIDERS}@{NAMESPACE}"],
                concurrency=CONCURRENCY,
                seed=2,
            )
        )
        engine = await stack.enter_async_context(
            td.open_engine(service, store=store, broker=engine_broker, seed=1)
        )

        async def one(i: int) -> None:
            run = await engine.start(workflow, i, run_id=f"{prefix}.{i}", namespace=NAMESPACE)
            assert await engine.result(run.id) == i + 3

        cpu = time.process_time()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(runs):
                nursery.start_soon(one, i)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        await engine.drain()
        await worker.wait_idle()
        turns = engine.statistics().turns
        batches = engine.store.statistics().batches
    return Figures(
        runs_per_s=runs / elapsed,
        cpu_ms_per_run=1000 * cpu / runs,
        tasks_per_run=(tally.step_tasks + tally.decision_tasks) / runs,
        results_per_run=tally.results / runs,
        decision_tasks_per_run=tally.decision_tasks / runs,
        turns_per_run=turns / runs,
        store_batches_per_run=batches / runs,
    )


def report(case: str, label: str, f: Figures) -> None:
    print(f"    {label}:")
    figure(BENCH, case, f.runs_per_s, "runs/s", label="      runs")
    figure(BENCH, f"{case}.cpu", f.cpu_ms_per_run, "ms/run", better="lower", label="      CPU")
    per_run = (
        ("broker_messages", f.tasks_per_run + f.results_per_run, "broker messages"),
        ("step_tasks", f.tasks_per_run - f.decision_tasks_per_run, "  step tasks"),
        ("decision_tasks", f.decision_tasks_per_run, "  decision tasks"),
        ("results", f.results_per_run, "  results"),
        ("turns", f.turns_per_run, "turns"),
        ("store_batches", f.store_batches_per_run, "store batches"),
    )
    for name, value, what in per_run:
        figure(BENCH, f"{case}.{name}", value, "per run", better="lower", label=f"      {what}")


async def compare(
    broker: str, label: str, url: str | None, store_name: str, runs: int, directory: Path
) -> None:
    print(f"  {label}, {store_name} store, {runs} three-step runs at once:")
    figures: dict[str, Figures] = {}
    prefix = f"{broker}.{store_name.lower()}.remote_workflows"
    for what, workflow, case in (
        ("(a) local workflow, remote steps", "local_three", f"{prefix}.local"),
        ("(b) remote workflow", "remote_three", f"{prefix}.remote"),
    ):
        store = "memory://"
        if store_name == "SQLite":
            store = f"sqlite:///{directory / f'{workflow}-{secrets.token_hex(4)}.db'}"
        figures[workflow] = await measure(workflow, runs, url, store)
        report(case, what, figures[workflow])
    a, b = figures["local_three"], figures["remote_three"]
    figure(
        BENCH,
        f"{prefix}.remote_over_local",
        b.runs_per_s / a.runs_per_s,
        "x",
        label="    (b)/(a) runs/s",
    )
    figure(
        BENCH,
        f"{prefix}.remote_over_local.cpu",
        b.cpu_ms_per_run / a.cpu_ms_per_run,
        "x",
        better="lower",
        label="    (b)/(a) CPU per run",
    )


async def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable remote-workflow benchmark, Python {sys.version.split()[0]},"
        f" trio {trio.__version__}"
    )
    print(
        f"one worker in this process, groups {WORK} and {DECIDERS}, concurrency {CONCURRENCY};"
        " a fresh engine, worker and store for each measurement"
    )
    stores = {"memory": "memory", "sqlite": "SQLite"}
    brokers = {
        "memory": ("memory broker", None, args.runs),
        "nats": (f"NATS {args.nats_url}", args.nats_url, args.nats_runs),
    }
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.repeat):
            for broker in args.brokers:
                label, url, runs = brokers[broker]
                for store in args.stores:
                    await compare(broker, label, url, stores[store], runs, Path(directory))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs on the memory broker")
    parser.add_argument("--nats-runs", type=int, default=500, help="runs over NATS")
    add_names_option(parser, "--brokers", ("memory", "nats"))
    add_names_option(parser, "--stores", ("memory", "sqlite"))
    parser.add_argument("--nats-url", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--repeat", type=int, default=1, help="measure everything this often")
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
