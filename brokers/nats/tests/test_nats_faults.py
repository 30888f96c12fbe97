"""Faults of a real NATS deployment: the server crashes and comes back, a
worker process is killed holding tasks, a task kills every worker that runs
it.

Each test runs its own nats-server (``tests/servers/nats.py`` on free ports,
its store in the test's tmp dir), so it can kill and restart it. Workers that
must die are separate processes running `open_worker` (this module's
`worker_main`). Whatever happens, every run ends with its fault-free result
and every checkpoint is settled exactly once.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio

import trio_durable as td
from trio_durable.brokers import open_broker
from trio_durable_nats import DEAD_STREAM, DEAD_SUBJECT, TASKS_STREAM, NatsBroker, token

EVENTUALLY: Final = 60.0
ACK_WAIT: Final = 2.0
"""Seconds before the server redelivers what a dead worker held."""

app = td.App("nats-faults")

HANG: Final = "TD_NATS_FAULTS_HANG"
"""Set in a worker process: its steps block (so it holds them) after
writing a marker file into the directory this names."""


@app.step(group="calc")
async def slow_double(x: int) -> int:
    marker_dir = os.environ.get(HANG)
    if marker_dir:
        await trio.Path(marker_dir, f"{x}-{os.getpid()}").write_text("")
        await trio.sleep_forever()
    await trio.sleep(0.005)
    return 2 * x


@app.step(group="calc")
async def deadly(x: int) -> int:
    # A step that takes its worker down with it, every time.
    os.kill(os.getpid(), signal.SIGKILL)
    return x  # pragma: no cover


@app.workflow()
async def fan(ctx: td.Context, n: int, concurrency: int) -> list[int]:
    return await ctx.all(slow_double, list(range(n)), concurrency=concurrency)


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(slow_double, x)


@app.workflow()
async def doomed(ctx: td.Context, x: int) -> str | None:
    try:
        await ctx.step(deadly, x)
    except td.RemoteStepError as exc:
        return exc.code
    return None


def worker_main(url: str, route: str, instance_id: str, max_deliveries: int) -> None:
    """A worker process: serve ``route`` until killed."""

    async def serve() -> None:
        async with td.open_worker(
            app,
            broker=url,
            groups=[route],
            concurrency=4,
            instance_id=instance_id,
            max_deliveries=max_deliveries,
            heartbeat=1.0,
            ttl=3.0,
        ):
            await trio.sleep_forever()

    trio.run(serve)


def spawn_worker(
    url: str, route: str, instance_id: str, *, max_deliveries: int = 5, hang_dir: Path | None = None
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop(HANG, None)
    if hang_dir is not None:
        env[HANG] = str(hang_dir)
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path.insert(0, {str(here)!r}); import test_nats_faults as m; "
        f"m.worker_main({url!r}, {route!r}, {instance_id!r}, {max_deliveries})"
    )
    return subprocess.Popen([sys.executable, "-c", code], env=env)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A nats-server of this test's own: its URL and workdir."""
    from servers.fixture import installed

    server = installed("nats")
    workdir = tmp_path / "nats"
    url = server.start(workdir, port=server.free_port(), monitor_port=server.free_port())
    try:
        yield url, workdir
    finally:
        server.stop(workdir)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Worker processes a test started; killed after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)


def broker_url(url: str, bridge: str = "thread") -> str:
    return f"{url}?bridge={bridge}&ack_wait={ACK_WAIT:g}&reconnect_wait=0.1&timeout=5"


async def poll_until(condition: Callable[[], bool]) -> None:
    """Wait (polling a real condition; the caller bounds the time) until
    ``condition()`` holds."""
    while True:
        if condition():
            return
        await trio.sleep(0.05)


def process_ended(process: subprocess.Popen[bytes]) -> bool:
    return process.poll() is not None


def final_settles(events: list[td.Event]) -> Counter[tuple[str, int]]:
    settled: Counter[tuple[str, int]] = Counter()
    for event in events:
        if event.kind == "step.completed" or (
            event.kind == "step.failed" and event.data.get("final")
        ):
            assert event.seq is not None
            settled[(event.run_id, event.seq)] += 1
    return settled


def drain_events(receive: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    events: list[td.Event] = []
    while True:
        try:
            events.append(receive.receive_nowait())
        except trio.WouldBlock:
            return events


async def assert_settled_once(
    store: td.MemoryStore, run_ids: list[str], events: list[td.Event]
) -> dict[tuple[str, int], td.Checkpoint]:
    checkpoints: dict[tuple[str, int], td.Checkpoint] = {}
    for run_id in run_ids:
        for cp in await store.get_checkpoints(run_id):
            checkpoints[(run_id, cp.seq)] = cp
    assert [key for key, cp in checkpoints.items() if cp.status == "pending"] == []
    assert final_settles(events) == Counter(dict.fromkeys(checkpoints, 1))
    return checkpoints


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_a_server_restarted_mid_fan_loses_nothing(
    nats_server: tuple[str, Path], bridge: str
) -> None:
    from servers import nats as server

    url, workdir = nats_server
    size = 400
    store = td.MemoryStore()
    async with (
        open_broker(broker_url(url, bridge)) as broker,
        td.open_engine(
            app,
            store=store,
            broker=broker,
            serve=["calc"],
            worker_concurrency=32,
            engine_id="engine",
            seed=1,
        ) as engine,
    ):
        with engine.subscribe(buffer=math.inf) as receive:
            await engine.start(fan, size, 40, run_id="fan")
            before: list[td.Event] = []
            with trio.fail_after(EVENTUALLY):
                while sum(e.kind == "step.completed" for e in before) < size // 4:
                    before.append(await receive.receive())
            completed = sum(e.kind == "step.completed" for e in before)
            # A crash, not a shutdown: what the server acknowledged must be on
            # disk (sync_interval: always), and it comes back on the same store.
            await trio.to_thread.run_sync(server.kill, workdir)
            await trio.to_thread.run_sync(server.start, workdir)
            with trio.fail_after(EVENTUALLY):
                assert await engine.result("fan") == [2 * i for i in range(size)]
                await engine.drain()
            events = before + drain_events(receive)
            # The fan was in flight when the server died: the crash hit it.
            assert completed < size
    checkpoints = await assert_settled_once(store, ["fan"], events)
    assert len(checkpoints) == size


async def test_a_killed_worker_process_tasks_go_to_another_worker(
    nats_server: tuple[str, Path], processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    url, _ = nats_server
    markers = tmp_path / "markers"
    markers.mkdir()
    runs = 8
    store = td.MemoryStore()
    async with (
        open_broker(broker_url(url)) as broker,
        td.open_engine(app, store=store, broker=broker, engine_id="engine", seed=2) as engine,
    ):
        victim = spawn_worker(broker_url(url), "calc", "victim", hang_dir=markers)
        processes.append(victim)
        with engine.subscribe(buffer=math.inf) as receive:
            for x in range(runs):
                await engine.start(one, x, run_id=f"one-{x}")
            # The victim holds as many as its concurrency lets it (4).
            with trio.fail_after(EVENTUALLY):
                await poll_until(lambda: len(list(markers.iterdir())) >= 4)
            held = sorted(int(marker.name.split("-")[0]) for marker in markers.iterdir())
            victim.send_signal(signal.SIGKILL)
            await trio.to_thread.run_sync(victim.wait)
            # Another worker takes them once ack_wait has passed.
            async with td.open_worker(
                app, broker=broker, groups=["calc"], instance_id="rescuer", concurrency=8
            ):
                with trio.fail_after(EVENTUALLY):
                    results = {x: await engine.result(f"one-{x}") for x in range(runs)}
                    await engine.drain()
            events = drain_events(receive)
    assert results == {x: 2 * x for x in range(runs)}
    await assert_settled_once(store, [f"one-{x}" for x in range(runs)], events)
    completed_by = {
        event.run_id: event.data.get("worker") for event in events if event.kind == "step.completed"
    }
    assert {completed_by[f"one-{x}"] for x in held} == {"rescuer"}
    assert len(held) == 4


async def test_a_poison_task_fails_after_max_deliveries(
    nats_server: tuple[str, Path], processes: list[subprocess.Popen[bytes]]
) -> None:
    url, _ = nats_server
    max_deliveries = 2
    store = td.MemoryStore()
    async with (
        open_broker(broker_url(url)) as broker,
        td.open_engine(app, store=store, broker=broker, engine_id="engine", seed=3) as engine,
    ):
        with engine.subscribe(buffer=math.inf) as receive:
            await engine.start(doomed, 7, run_id="doomed")
            deaths = 0

            async def keep_a_worker_alive() -> None:
                # Each worker dies running the step; the next one gets it
                # again after ack_wait, until one fails it as poison.
                nonlocal deaths
                for n in range(max_deliveries + 3):
                    process = spawn_worker(
                        broker_url(url), "calc", f"w{n}", max_deliveries=max_deliveries
                    )
                    processes.append(process)
                    # Polled, not waited for in a thread: a cancelled wait
                    # must not block on a worker that lives on.
                    await poll_until(functools.partial(process_ended, process))
                    if process.returncode == -signal.SIGKILL:
                        deaths += 1

            assert isinstance(broker, NatsBroker)
            js = broker._js

            async def consumer_counts() -> tuple[int, int]:
                info: Any = await broker._bridge.run(
                    lambda: js.consumer_info(TASKS_STREAM, token("calc"))
                )
                return info.num_pending, info.num_ack_pending

            async with trio.open_nursery() as nursery:
                nursery.start_soon(keep_a_worker_alive)
                with trio.fail_after(EVENTUALLY):
                    assert await engine.result("doomed") == "poison"
                    # The task is gone from its queue (terminated by the
                    # worker after it published the poison result), not
                    # waiting for another delivery.
                    counts = await consumer_counts()
                    while counts != (0, 0):
                        await trio.sleep(0.05)
                        counts = await consumer_counts()
                nursery.cancel_scope.cancel()
            await engine.drain()
            events = drain_events(receive)
        assert deaths == max_deliveries
        # A copy waits on the dead-letter stream.
        dead: Any = await broker._bridge.run(
            lambda: js.get_last_msg(DEAD_STREAM, f"{DEAD_SUBJECT}.{token('calc')}")
        )
        assert dead.headers["Trio-Durable-Queue"] == "calc"
        assert int(dead.headers["Trio-Durable-Deliveries"]) == max_deliveries + 1
    checkpoints = await assert_settled_once(store, ["doomed"], events)
    [cp] = checkpoints.values()
    assert cp.status == "failed"
    assert cp.error is not None
    assert cp.error.code == "poison"
