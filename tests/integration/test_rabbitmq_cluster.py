"""A 3-node RabbitMQ cluster on loopback with quorum queues
(``?queue_type=quorum``, the other nodes as ``?seeds=``) loses nothing when
the node leading the task queue (a worker's node), or the one leading the
engine's results queue (the engine's node), is SIGKILLed in the middle of a
fan of 5,000 remote steps and 300 one-step runs, and is restarted later:
every run completes with its output and every checkpoint holds one result.
The test prints the stall the failover caused (the longest stretch without
a settle, and the p99 latency of the steps that started around the kill).

The cluster, started once for this module, also runs the one conformance
check that cannot run with quorum queues on the shared server (its fixed
queue name is a classic queue there).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_durable as td
from cluster_workload import (
    DOWN_FOR,
    FAN,
    GROUP,
    ONE_BASE,
    RUNS,
    app,
    executed,
    fan,
    first_started,
    p99,
    reset,
    start_ones,
)
from servers.fixture import installed
from servers.rabbitmq_cluster import RabbitCluster
from trio_durable.testing.conformance import check_the_results_queue_is_a_queue
from trio_durable_rabbitmq import open_amqp_broker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitCluster]:
    """A 3-node cluster for this module's tests, stopped after them."""
    installed("rabbitmq")
    cluster = RabbitCluster(tmp_path_factory.mktemp("rabbitmq-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def test_the_results_queue_is_a_quorum_queue_like_any_other(cluster: RabbitCluster) -> None:
    await check_the_results_queue_is_a_queue(lambda: open_amqp_broker(cluster.url()))


@pytest.mark.parametrize("victim", ["task queue", "results queue"])
async def test_a_fan_survives_a_queue_leader_killed_and_restarted(
    tmp_path: Path, cluster: RabbitCluster, victim: str
) -> None:
    kill_moment = reset()
    # The cluster's calls do not queue behind the store's threads.
    own_thread = trio.CapacityLimiter(1)
    # A fleet of three workers, each connected first to another node (the
    # first of them, which declares the task queue, to the second node).
    engine_url, *worker_urls = [
        cluster.url(first=i, reconnect_interval="0.2", connect_timeout="5") for i in (0, 1, 2, 0)
    ]
    async with (
        td.open_engine(app, store=f"sqlite:///{tmp_path / 'runs.db'}", broker=engine_url) as engine,
        td.open_worker(app, broker=worker_urls[0], groups=[GROUP], concurrency=64),
        td.open_worker(app, broker=worker_urls[1], groups=[GROUP], concurrency=64),
        td.open_worker(app, broker=worker_urls[2], groups=[GROUP], concurrency=64),
    ):
        # The workers declared the task queue, the engine its results queue:
        # find the leader now, so that the kill below lands at once.
        queue = GROUP if victim == "task queue" else engine.results_queue
        leader = await trio.to_thread.run_sync(cluster.queue_leader, queue, limiter=own_thread)
        started = trio.current_time()
        await engine.start(fan, FAN, run_id="fan")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start_ones, engine)
            with trio.fail_after(120):
                await kill_moment.wait()
            cluster.kill(leader)  # SIGKILL, then a wait for the dead process
            killed_at, killed_at_wall = trio.current_time(), time.time()
            done_at_kill = len(executed)
        new_leader = await trio.to_thread.run_sync(cluster.queue_leader, queue, limiter=own_thread)

        async def restart_later() -> None:
            await trio.sleep_until(killed_at + DOWN_FOR)
            await trio.to_thread.run_sync(
                functools.partial(cluster.restart, leader), limiter=own_thread
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(restart_later)
            with trio.fail_after(150):
                total = await engine.result("fan")
                ones = [await engine.result(f"one-{i}") for i in range(RUNS)]
            finished = trio.current_time()
        fan_checkpoints = await engine.store.get_checkpoints("fan", 1, FAN)
        one_checkpoints = [
            (await engine.store.get_checkpoints(f"one-{i}", 1, 1))[0] for i in range(RUNS)
        ]
    # The restarted node is back in the cluster.
    assert await trio.to_thread.run_sync(cluster.running_nodes, limiter=own_thread) == set(
        cluster.names
    )
    assert total == sum(x * x for x in range(FAN))
    assert ones == [(ONE_BASE + i) ** 2 for i in range(RUNS)]
    # Every checkpoint holds one result: the right one, settled once.
    assert [cp.status for cp in fan_checkpoints] == ["completed"] * FAN
    assert [cp.output for cp in fan_checkpoints] == [str(x * x) for x in range(FAN)]
    assert [cp.status for cp in one_checkpoints] == ["completed"] * RUNS
    assert [cp.output for cp in one_checkpoints] == [str((ONE_BASE + i) ** 2) for i in range(RUNS)]
    # Every step ran; a step whose ack or result died with the node may run again.
    assert set(executed) == set(range(FAN)) | {ONE_BASE + i for i in range(RUNS)}
    twice = sum(1 for n in executed.values() if n > 1)
    # The stall: the longest stretch with no step settled, against the usual
    # gap between two settles; and the latency (first start on a worker to
    # settle) of the steps that started within a second of the kill or in
    # the stall after it.
    settled = {
        x: cp.finished_at
        for x, cp in itertools.chain(
            enumerate(fan_checkpoints),
            ((ONE_BASE + i, cp) for i, cp in enumerate(one_checkpoints)),
        )
        if cp.finished_at is not None
    }
    ends = sorted(settled.values())
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    stall = max(gaps)
    latencies = [settled[x] - first_started[x] for x in settled]
    around = [
        settled[x] - first_started[x]
        for x in settled
        if killed_at_wall - 1.0 <= first_started[x] <= killed_at_wall + stall + 1.0
    ]
    print(
        f"\n{FAN} fan members + {RUNS} one-step runs in {finished - started:.1f} s;"
        f" {victim} leader {leader} killed after {done_at_kill} steps, {killed_at - started:.1f} s in"
        f" ({new_leader} led next), down {DOWN_FOR:.0f} s; steps run twice: {twice};"
        f" longest stretch without a settle {stall:.2f} s ({len(ends) / (ends[-1] - ends[0]):.0f}"
        f" settles/s on average); step latency p99 {p99(latencies):.2f} s"
        f" overall, {p99(around):.2f} s for the {len(around)} steps started around the kill"
    )
    # Work goes on within seconds of the kill; a stall as long as a publish
    # timeout (30 s) means a publish waited for a confirm that the dead
    # node's connection could never bring.
    assert stall < 20.0
