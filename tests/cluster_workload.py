"""The workload of the broker-cluster failover tests
(tests/integration/test_nats_cluster.py, test_rabbitmq_cluster.py): a fan
of 5,000 remote steps and 300 one-step runs on the worker group
``cluster``, whose step counts its executions and stamps its first start,
so a test can kill a node after ``KILL_AFTER`` steps and then count the
steps that ran twice and the latency of those around the kill."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from typing import Final

import trio

import trio_durable as td

FAN: Final = 5_000
RUNS: Final = 300
KILL_AFTER: Final = 1_500
"""Steps run before the leader is killed."""
DOWN_FOR: Final = 8.0
"""Seconds the killed node stays down."""
ONE_BASE: Final = 1_000_000
"""One-step runs square ``ONE_BASE + i``: their steps count apart from the fan's."""
GROUP: Final = "cluster"
"""The worker group, and so the task queue's (or stream subject's) name."""

app = td.App("broker-cluster")

executed: Counter[int] = Counter()
"""How many times each step's input was squared."""
first_started: dict[int, float] = {}
"""When each input's first execution began (wall time, to compare with the
store's settle stamps)."""
progress: dict[int, trio.Event] = {}


@app.step(group=GROUP)
async def square(x: int) -> int:
    executed[x] += 1
    first_started.setdefault(x, time.time())
    done = len(executed)
    if done in progress:
        progress[done].set()
    return x * x


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    return sum(await ctx.all(square, list(range(n))))


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


async def start_ones(engine: td.Engine) -> None:
    """Start the one-step runs, ``one-0`` to ``one-299``, one after another."""
    for i in range(RUNS):
        await engine.start(one, ONE_BASE + i, run_id=f"one-{i}")


def reset() -> trio.Event:
    """Forget the last run's executions; return the event set once
    ``KILL_AFTER`` distinct steps have run."""
    executed.clear()
    first_started.clear()
    progress.clear()
    progress[KILL_AFTER] = trio.Event()
    return progress[KILL_AFTER]


def p99(values: list[float]) -> float:
    """The 99th percentile of ``values`` (the largest, for fewer than two)."""
    return statistics.quantiles(values, n=100)[98] if len(values) >= 2 else max(values)
