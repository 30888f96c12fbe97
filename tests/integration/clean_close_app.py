"""The App of tests/integration/test_clean_close_processes.py, and, run as
a script, its engine "a": on the embedded ``memory://`` broker and a SQLite
file, with a worker of its own.

``python clean_close_app.py STORE_URL RUNS`` starts ``RUNS`` one-step runs,
waits until the even steps have their results and the odd ones hang on
its worker, prints ``ready``, then waits for a line on its standard input,
closes the engine cleanly, prints ``closed``, and lives on until killed.

Every call of `work` appends its input to the ledger file that
``CLEAN_CLOSE_LEDGER`` names (one ``write`` of an ``O_APPEND`` file), so
the test counts how often each step ran, in either process.
"""

from __future__ import annotations

import os
import sys
from typing import Final

import trio

import trio_durable as td

LEDGER: Final = "CLEAN_CLOSE_LEDGER"
HOLD: Final = "CLEAN_CLOSE_HOLD"
"""Set (to anything) in engine a's process: its odd steps never return."""

app = td.App("clean-close-processes")


@app.step(group="g")
async def work(x: int) -> int:
    fd = os.open(os.environ[LEDGER], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{x}\n".encode())
    finally:
        os.close(fd)
    if x % 2 and os.environ.get(HOLD):
        await trio.sleep_forever()
    return 10 * x


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(work, x)


def _ledger_lines() -> int:
    try:
        with open(os.environ[LEDGER]) as ledger:
            return len(ledger.read().split())
    except FileNotFoundError:
        return 0


async def main(store: str, runs: int) -> None:
    async with td.open_engine(app, store=store, serve=["g"], engine_id="a") as engine:
        for x in range(runs):
            await engine.start(one, x, run_id=f"run-{x}")
        for x in range(0, runs, 2):
            await engine.result(f"run-{x}")
        while _ledger_lines() < runs:  # noqa: ASYNC110 (another file, no event to wait on)
            await trio.sleep(0.05)
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)
    print("closed", flush=True)
    await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
