"""The App that the tests of the ``trio-durable`` command run in real engine
and worker processes (``trio-durable engine cli_app:app``).

Each step returns the id of the process that ran it, so a test can tell
which process did the work. The tests start runs through a client
(`cli_processes.start_runs`), which executes nothing: the engine under test
runs every turn.
"""

from __future__ import annotations

import gc
import logging
import os
import sys

import trio

import trio_durable as td

GROUP = "cli"

app = td.App("cli-test")


@app.step()
async def greet(name: str) -> str:
    return f"hello {name} from {os.getpid()}"


@app.workflow()
async def hello(ctx: td.Context, name: str) -> str:
    return await ctx.step(greet, name)


@app.step()
async def linger(seconds: float) -> int:
    # The line the tests wait for before they signal the engine mid-step.
    print(f"linger started in {os.getpid()}", file=sys.stderr, flush=True)
    await trio.sleep(seconds)
    return os.getpid()


@app.workflow()
async def lingering(ctx: td.Context, seconds: float) -> int:
    return await ctx.step(linger, seconds)


@app.step(group=GROUP)
async def double(x: int) -> str:
    return f"{2 * x} from {os.getpid()}"


@app.workflow()
async def doubled(ctx: td.Context, x: int) -> str:
    return await ctx.step(double, x)


@app.step(group=GROUP)
async def hang(seconds: float) -> int:
    # A remote step whose result does not come while a test looks.
    await trio.sleep(seconds)
    return os.getpid()


@app.workflow()
async def hanging(ctx: td.Context, seconds: float) -> int:
    return await ctx.step(hang, seconds)


# Another deploy of the same application that disagrees with `app`: its
# `double` requires a capability, and its `doubled` routes failures to a
# handler that nothing runs.
rollout = td.App("cli-test", version="2")


@rollout.step(name="double", group=GROUP, requires=["gpu"])
async def double_on_gpu(x: int) -> str:
    return f"{2 * x} on a gpu from {os.getpid()}"


@rollout.workflow(name="doubled", on_error=[td.OnError(workflow="page_oncall")])
async def doubled_v2(ctx: td.Context, x: int) -> str:
    return await ctx.step(double_on_gpu, x)


not_an_app = "a string, not a td.App"


@app.workflow()
async def collector_settings(ctx: td.Context) -> list[object]:
    # How the engine process set its garbage collector: its thresholds,
    # and whether it froze what loading the app made.
    return [list(gc.get_threshold()), gc.get_freeze_count() > 0]


@app.step(retry=td.Retry(attempts=1))
async def flop(reason: str) -> None:
    # A step's own log record: the process's JSON lines name its run and step.
    logging.getLogger("cli_app").warning("flopping: %s", reason)
    raise ValueError(reason)


@app.workflow()
async def failing(ctx: td.Context, reason: str) -> None:
    await ctx.step(flop, reason)
