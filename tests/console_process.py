"""An engine serving its console in a process of its own, for tests that
measure that process from outside (its memory): run as ``python
console_process.py STORE``, it prints the console's URL and a live
webhook's token on one line, then serves until it is killed."""

from __future__ import annotations

import sys
from typing import Any

import trio

import trio_durable as td

app = td.App("console-process")
TOKENS: dict[str, str] = {}


@app.workflow()
async def hooked(ctx: td.Context) -> Any:
    TOKENS[ctx.run_id] = await ctx.webhook("reply")
    return await ctx.wait_signal("reply")


async def main(store: str) -> None:
    console = td.ConsoleOptions(port=0, token="process-t0ken")
    async with td.open_engine(app, store=store, console=console) as engine:
        await engine.start(hooked, run_id="hooked")
        await engine.drain()
        print(engine.console_url, TOKENS["hooked"], flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
