"""The workflow code of tests/integration/test_remote_workflow_processes.py,
which only its worker processes can import (their working directory is this
folder; the engine's is another, see remote_service.py).

``order`` is a remote workflow of the ``orders`` group: a local step (run on
the worker during a decision), a remote step of the ``payments`` group, a
durable timer of a few seconds, another remote step and another local step.
Every execution of a step appends ``<step> <key> <pid>`` to the markers file
(``$REMOTE_MARKERS``), so the test sees which worker process ran what, and
how often.

The local step of the run keyed `HANG_KEY` hangs the first time it runs
(whichever worker runs it): the test kills that worker while it is in the
middle of that decision, and the decision task must be delivered again to
the other worker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import trio

import trio_durable as td

HANG_KEY: Final = "r0"

app = td.App("remote-orders")


def mark(step: str, key: str) -> None:
    """Record one execution of ``step`` for the run ``key`` (one short
    ``O_APPEND`` write: the two workers' lines never mix)."""
    line = f"{step} {key} {os.getpid()}\n".encode()
    fd = os.open(os.environ["REMOTE_MARKERS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def first_time(what: str) -> bool:
    """True for the first caller across the processes (an exclusive create)."""
    flag = Path(os.environ["REMOTE_MARKERS"]).with_name(f"first-{what}")
    try:
        flag.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


@app.step()
async def reserve(key: str, x: int) -> int:
    mark("reserve", key)
    if key == HANG_KEY and first_time(key):
        mark("hang", key)
        await trio.sleep_forever()  # until the test kills this worker
    await trio.sleep(0.05)
    return x + 1


@app.step(group="payments", retry=td.Retry(attempts=5, backoff=0.2))
async def charge(key: str, x: int) -> int:
    await trio.sleep(0.1)
    mark("charge", key)
    return x * x


@app.step(group="payments", retry=td.Retry(attempts=5, backoff=0.2))
async def notify(key: str, x: int) -> int:
    await trio.sleep(0.05)
    mark("notify", key)
    return x + 7


@app.step()
async def finish(key: str, x: int) -> int:
    mark("finish", key)
    return 2 * x


@app.workflow(group="orders")
async def order(ctx: td.Context, key: str, x: int) -> int:
    held = await ctx.step(reserve, key, x)
    charged = await ctx.step(charge, key, held)
    await ctx.sleep(1.0 + x % 3)
    notified = await ctx.step(notify, key, charged)
    return await ctx.step(finish, key, notified)


def expected(x: int) -> int:
    """What ``order(key, x)`` returns."""
    return 2 * ((x + 1) ** 2 + 7)
