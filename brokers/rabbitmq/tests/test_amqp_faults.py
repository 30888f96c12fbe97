"""RabbitMQ under faults: a restarted server, a killed worker, a poison task.

These run against a private RabbitMQ node of their own (port 5673, state in a
temporary directory) so they can stop and start it without disturbing the
shared server of the other tests. The engine runs in the test process on a
memory store; workers run either in it or, where a process must die, as
subprocesses of this file (``python test_amqp_faults.py worker ...``), which
append what their steps do to a ledger file.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable.brokers import BrokerUnavailable, Delivery, Outgoing, open_broker

PORT: Final = 5673
PATIENCE: Final = 120.0
"""Seconds a test waits at most for its runs (restarts take a few)."""

app = td.App("amqp-faults")


def _ledger(line: str) -> None:
    path = os.environ.get("TD_LEDGER")
    if path:
        with open(path, "a") as ledger:
            ledger.write(f"{line} {os.getpid()}\n")


@app.step(group="work")
async def slow(key: str) -> str:
    _ledger(f"start {key}")
    await trio.sleep(float(os.environ.get("TD_STEP_SECONDS", "0.01")))
    _ledger(f"done {key}")
    return f"ok:{key}"


@app.step(group="work")
async def crash(key: str) -> str:
    _ledger(f"crash {key}")
    os._exit(3)


@app.workflow()
async def fan(ctx: td.Context, keys: list[str]) -> list[str]:
    return await ctx.all(slow, keys, concurrency=50)


@app.workflow()
async def poisoned(ctx: td.Context, key: str) -> str | None:
    try:
        await ctx.step(crash, key)
    except td.RemoteStepError as exc:
        return exc.code
    return None


# -- the private server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A private RabbitMQ node: its URL and its workdir (for stop/start)."""
    from servers.fixture import installed

    server = installed("rabbitmq")
    workdir = tmp_path_factory.mktemp("rabbitmq-faults")
    url = server.start(workdir, port=PORT)
    if (workdir / "reused").exists():
        message = f"something else listens on {PORT}; these tests need a node of their own"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield url, workdir
    finally:
        server.stop(workdir)


def settled_once(events: list[td.Event]) -> Counter[tuple[str, int]]:
    settled: Counter[tuple[str, int]] = Counter()
    for event in events:
        if event.kind == "step.completed" or (
            event.kind == "step.failed" and event.data.get("final")
        ):
            assert event.seq is not None
            settled[(event.run_id, event.seq)] += 1
    return settled


def drain_events(receive: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    events = []
    while True:
        try:
            events.append(receive.receive_nowait())
        except trio.WouldBlock:
            return events


@asynccontextmanager
async def worker_process(
    url: str, route: str, ledger: Path, *, step_seconds: float = 0.01, max_deliveries: int = 5
) -> AsyncIterator[trio.Process]:
    """A worker subprocess serving ``route``, ready (announced) on entry,
    killed on exit if still running."""
    env = {**os.environ, "TD_LEDGER": str(ledger), "TD_STEP_SECONDS": str(step_seconds)}
    process = await trio.lowlevel.open_process(
        [sys.executable, __file__, "worker", url, route, str(max_deliveries)],
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                if not chunk:
                    break
                line += chunk
            # A worker may die running a task before it says it is ready
            # (the poison test's do); the caller looks at its return code.
            assert line.strip() == b"ready" or (not line and await process.wait()), line
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


def read_ledger(ledger: Path) -> list[tuple[str, str, int]]:
    if not ledger.exists():
        return []
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return [(what, key, int(pid)) for what, key, pid in lines]


async def wait_for(predicate: Callable[[], bool], patience: float = PATIENCE) -> None:
    """Poll ``predicate`` (about a ledger file or a stream of events, which
    nothing signals) until it holds, for at most ``patience`` seconds."""
    with trio.fail_after(patience):
        while not predicate():  # noqa: ASYNC110 -- a file has no event to wait on
            await trio.sleep(0.05)


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_a_fan_completes_across_a_broker_restart(
    rabbitmq: tuple[str, Path], bridge: str
) -> None:
    from servers import rabbitmq as server

    url, workdir = rabbitmq
    url = f"{url}?bridge={bridge}"
    namespace = f"restart{secrets.token_hex(3)}"
    route = f"work@{namespace}"
    keys = [f"k{i}" for i in range(300)]
    async with td.open_engine(
        app, broker=url, serve=[route], worker_concurrency=20, seed=1
    ) as engine:
        with engine.subscribe(buffer=math.inf) as receive:
            run = await engine.start(fan, keys, run_id=f"{namespace}.fan", namespace=namespace)
            done: list[td.Event] = []

            def some_done() -> bool:
                done.extend(drain_events(receive))
                return sum(e.kind == "step.completed" for e in done) >= 30

            await wait_for(some_done)
            # Mid-fan: every connection drops; the queues and their
            # persistent messages wait on disk until the node is back.
            await trio.to_thread.run_sync(server.stop_app, workdir)
            await trio.to_thread.run_sync(server.start_app, workdir)
            with trio.fail_after(PATIENCE):
                assert await engine.result(run.id) == [f"ok:{k}" for k in keys]
            await engine.drain()
            events = done + drain_events(receive)
        checkpoints = await engine.store.get_checkpoints(run.id)
    assert len(checkpoints) == len(keys)
    assert {cp.status for cp in checkpoints} == {"completed"}
    assert settled_once(events) == Counter({(run.id, cp.seq): 1 for cp in checkpoints})


async def test_a_dispatch_while_the_broker_is_down_waits_or_fails_clearly(
    rabbitmq: tuple[str, Path],
) -> None:
    from servers import rabbitmq as server

    url, workdir = rabbitmq
    queue = f"down.{secrets.token_hex(3)}"
    async with (
        open_broker(f"{url}?publish_timeout=1&reconnect_interval=0.2") as impatient,
        open_broker(f"{url}?publish_timeout=60&reconnect_interval=0.2") as patient,
    ):
        await patient.dispatch([Outgoing(queue=queue, body=b"before")])
        await trio.to_thread.run_sync(server.stop_app, workdir)
        try:
            # Bounded: it gives up after publish_timeout, with the client's
            # error as the cause.
            with trio.fail_after(10), pytest.raises(BrokerUnavailable):
                await impatient.dispatch([Outgoing(queue=queue, body=b"refused")])
            # Patient: it waits for the connection and then sends.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(patient.dispatch, [Outgoing(queue=queue, body=b"waited")])
                await trio.testing.wait_all_tasks_blocked()
                await trio.to_thread.run_sync(server.start_app, workdir)
        finally:
            await trio.to_thread.run_sync(server.start_app, workdir)
        async with patient.open_consumer(queue, prefetch=10) as consumer:
            received: list[Delivery] = []
            with trio.fail_after(PATIENCE):
                while len(received) < 2:
                    received.extend(await consumer.receive(10))
            with trio.move_on_after(0.5):
                received.extend(await consumer.receive(10))
            # The persistent message survived the restart; the refused one
            # was never sent.
            assert sorted(d.body for d in received) == [b"before", b"waited"]
            await consumer.ack(received)


async def test_tasks_of_a_killed_worker_go_to_another(
    rabbitmq: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = rabbitmq
    namespace = f"kill{secrets.token_hex(3)}"
    route = f"work@{namespace}"
    ledger = tmp_path / "ledger"
    keys = [f"k{i}" for i in range(40)]
    async with (
        worker_process(url, route, ledger, step_seconds=0.5) as doomed,
        worker_process(url, route, ledger, step_seconds=0.05) as survivor,
        td.open_engine(app, broker=url, seed=2) as engine,
    ):
        with engine.subscribe(buffer=math.inf) as receive:
            run = await engine.start(fan, keys, run_id=f"{namespace}.fan", namespace=namespace)

            def doomed_is_busy() -> bool:
                entries = read_ledger(ledger)
                started = {k for w, k, p in entries if w == "start" and p == doomed.pid}
                finished = {k for w, k, p in entries if w == "done" and p == doomed.pid}
                return len(started - finished) >= 3

            await wait_for(doomed_is_busy)
            doomed.kill()  # SIGKILL: no withdraw, no acks, the socket just closes
            await doomed.wait()
            with trio.fail_after(PATIENCE):
                assert await engine.result(run.id) == [f"ok:{k}" for k in keys]
            await engine.drain()
            events = drain_events(receive)
        checkpoints = await engine.store.get_checkpoints(run.id)
        assert survivor.returncode is None
    entries = read_ledger(ledger)
    unfinished = {k for w, k, p in entries if w == "start" and p == doomed.pid} - {
        k for w, k, p in entries if w == "done" and p == doomed.pid
    }
    assert unfinished
    # What the killed worker held was run again by the survivor.
    assert unfinished <= {k for w, k, p in entries if w == "done" and p == survivor.pid}
    assert {cp.status for cp in checkpoints} == {"completed"}
    assert settled_once(events) == Counter({(run.id, cp.seq): 1 for cp in checkpoints})


async def test_a_poison_task_is_dead_lettered_and_fails_its_step(
    rabbitmq: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = rabbitmq
    namespace = f"poison{secrets.token_hex(3)}"
    route = f"work@{namespace}"
    ledger = tmp_path / "ledger"
    max_deliveries = 2
    async with td.open_engine(app, broker=url, seed=3) as engine:
        run = await engine.start(
            poisoned, "bad", run_id=f"{namespace}.poisoned", namespace=namespace
        )
        # Each worker that takes the task dies running it; the next one sees
        # it delivered once more, until the count passes max_deliveries.
        workers = 0
        with trio.fail_after(PATIENCE):
            while (await engine.get(run.id)).status not in ("completed", "failed"):
                async with worker_process(
                    url, route, ledger, max_deliveries=max_deliveries
                ) as worker:
                    workers += 1
                    with trio.move_on_after(20):
                        while worker.returncode is None:
                            if (await engine.get(run.id)).status == "completed":
                                break
                            await trio.sleep(0.05)
            assert await engine.result(run.id) == "poison"
        crashes = [e for e in read_ledger(ledger) if e[0] == "crash"]
        assert len(crashes) == max_deliveries
        assert workers == max_deliveries + 1
        [cp] = await engine.store.get_checkpoints(run.id)
        assert (cp.status, cp.error and cp.error.code) == ("failed", "poison")

    # The message is in the dead-letter queue, and not on the task queue.
    async with open_broker(url) as broker:
        async with broker.open_consumer(f"{route}.dead", prefetch=10) as consumer:
            with trio.fail_after(10):
                [dead] = await consumer.receive(10)
            task = json.loads(dead.body)
            assert (task["run_id"], task["step"]) == (run.id, "crash")
            await consumer.ack([dead])
        async with broker.open_consumer(route, prefetch=10) as consumer:
            with trio.move_on_after(1.0):
                leftover = await consumer.receive(10)
                pytest.fail(f"the poison task is still on its queue: {leftover}")


# -- the worker subprocess ------------------------------------------------------------------


async def _serve(url: str, route: str, max_deliveries: int) -> None:
    async with td.open_worker(
        app, broker=url, groups=[route], concurrency=4, max_deliveries=max_deliveries
    ):
        print("ready", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    trio.run(_serve, sys.argv[2], sys.argv[3], int(sys.argv[4]))
