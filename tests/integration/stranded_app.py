"""The App of tests/integration/test_stranded_processes.py, which runs it
in ``trio-durable engine`` processes on the embedded ``memory://`` broker
and kills them.

Every call of `work` appends a line, its key, to the ledger file that
``STRANDED_LEDGER`` names (one ``write`` of an ``O_APPEND`` file: lines
never mix), so the test counts how often each step ran, across kills.
"""

from __future__ import annotations

import os
from typing import Final

import trio

import trio_durable as td

LEDGER: Final = "STRANDED_LEDGER"
STEP_SECONDS: Final = 0.25
"""How long a call of `work` takes: long enough that a kill hits the fan
and the one-step runs mid-way."""

app = td.App("stranded-processes")


@app.step(group="g")
async def work(key: str) -> str:
    line = f"{key}\n".encode()
    fd = os.open(os.environ[LEDGER], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    await trio.sleep(STEP_SECONDS)
    return f"done {key}"


def fan_key(x: int) -> str:
    return f"fan-{x}"


def one_key(x: int) -> str:
    return f"one-{x}"


@app.workflow()
async def fan(ctx: td.Context, n: int) -> list[str]:
    return await ctx.all(work, [fan_key(x) for x in range(n)])


@app.workflow()
async def one(ctx: td.Context, x: int) -> str:
    return await ctx.step(work, one_key(x))
