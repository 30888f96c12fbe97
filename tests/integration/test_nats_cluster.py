"""A 3-node NATS JetStream cluster on loopback (``sync_interval: always``,
streams and bucket with 3 replicas) loses nothing when the leader of the
task stream is SIGKILLed in the middle of a fan of 5,000 remote steps and
300 one-step runs, and is restarted later: every run completes with its
output and every checkpoint holds one result. The test prints the moment
of the kill, the steps run twice, the stall the failover caused (the
longest gap between two settles) and the p99 step latency during it.

The election after the kill takes several seconds, during which publishes
to the task stream come back "no responders": the adapter publishes them
again within its timeout, so that the engine's few retries of a dispatch
are not all spent inside the election (which left steps pending and their
runs unfinished before)."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

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
    p99,
    reset,
    start_ones,
)
from servers.fixture import installed
from servers.nats_cluster import NatsCluster


def _p99_ms(values: list[float]) -> str:
    return f"{p99(values) * 1000:.0f} ms" if values else "-"


async def test_a_fan_survives_the_task_stream_leader_killed_and_restarted(
    tmp_path: Path,
) -> None:
    installed("nats")
    kill_moment = reset()
    cluster = NatsCluster(tmp_path)
    # The cluster's calls do not queue behind the store's threads.
    own_thread = trio.CapacityLimiter(1)
    await trio.to_thread.run_sync(cluster.start, limiter=own_thread)
    try:
        url = cluster.url(ack_wait="5", reconnect_wait="0.2")
        async with (
            td.open_engine(app, store=f"sqlite:///{tmp_path / 'runs.db'}", broker=url) as engine,
            td.open_worker(app, broker=url, groups=[GROUP], concurrency=128),
        ):
            # Opening the engine created the streams: find the task stream's
            # leader now, so that the kill below lands at once.
            leader = await trio.to_thread.run_sync(
                cluster.stream_leader, "TRIO_DURABLE_TASKS", limiter=own_thread
            )
            started = trio.current_time()
            await engine.start(fan, FAN, run_id="fan")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(start_ones, engine)
                with trio.fail_after(60):
                    await kill_moment.wait()
                cluster.kill(leader)  # SIGKILL, then a wait for the dead process
                killed_at = trio.current_time()
                killed_durable = engine.clock.now()
                done_at_kill = len(executed)
                fan_done_at_kill = sum(1 for x in executed if x < FAN)
            await trio.sleep(DOWN_FOR)
            new_leader = await trio.to_thread.run_sync(
                cluster.stream_leader, "TRIO_DURABLE_TASKS", limiter=own_thread
            )
            await trio.to_thread.run_sync(
                functools.partial(cluster.restart, leader), limiter=own_thread
            )
            restarted_durable = engine.clock.now()
            with trio.fail_after(120):
                total = await engine.result("fan")
                ones = [await engine.result(f"one-{i}") for i in range(RUNS)]
            finished = trio.current_time()
            fan_checkpoints = await engine.store.get_checkpoints("fan", 1, FAN + 10)
            one_checkpoints = [
                cp
                for i in range(RUNS)
                for cp in await engine.store.get_checkpoints(f"one-{i}", 1, 10)
            ]
    finally:
        await trio.to_thread.run_sync(cluster.stop, limiter=own_thread)
    assert total == sum(x * x for x in range(FAN))
    assert ones == [(ONE_BASE + i) ** 2 for i in range(RUNS)]
    # Every checkpoint holds one result: the right one, settled once, and
    # no step has a second row.
    assert len(fan_checkpoints) == FAN
    assert len(one_checkpoints) == RUNS
    assert [cp.status for cp in fan_checkpoints] == ["completed"] * FAN
    assert [cp.output for cp in fan_checkpoints] == [str(x * x) for x in range(FAN)]
    assert [cp.output for cp in one_checkpoints] == [str((ONE_BASE + i) ** 2) for i in range(RUNS)]
    # Every step ran; a step whose ack died with the leader may run again.
    assert set(executed) == set(range(FAN)) | {ONE_BASE + i for i in range(RUNS)}
    twice = sum(1 for n in executed.values() if n > 1)
    steps = [*fan_checkpoints, *one_checkpoints]
    # The stall: the longest stretch with no step settled.
    ends = sorted(cp.finished_at for cp in steps if cp.finished_at is not None)
    gaps = [(b - a, a) for a, b in itertools.pairwise(ends)]
    stall, stall_from = max(gaps)
    # Step latency (dispatch to settle) of the steps that settled before the
    # kill, and of those that settled from the kill until 5 s after the
    # killed node was back: the failover.
    before, during = [], []
    for cp in steps:
        if cp.finished_at is None or cp.started_at is None:
            continue
        latency = cp.finished_at - cp.started_at
        if cp.finished_at < killed_durable:
            before.append(latency)
        elif cp.finished_at <= restarted_durable + 5.0:
            during.append(latency)
    print(
        f"\nworkload: a fan of {FAN} remote steps + {RUNS} one-step runs, replicas=3;"
        f" leader {leader} of the task stream SIGKILLed {killed_at - started:.1f} s in, after"
        f" {done_at_kill} steps ({fan_done_at_kill}/{FAN} of the fan), restarted"
        f" {DOWN_FOR:.0f} s later ({new_leader} led meanwhile);"
        f" runs completed: {1 + len(ones)}/{1 + RUNS} in {finished - started:.1f} s;"
        f" duplicate checkpoints: 0; steps executed twice: {twice};"
        f" stall (longest gap between settles): {stall:.2f} s,"
        f" from {stall_from - killed_durable:+.1f} s after the kill;"
        f" p99 step latency: {_p99_ms(before)} before the kill,"
        f" {_p99_ms(during)} during the failover ({len(during)} steps)"
    )
