"""Writes a store at SQLite schema version 2, with the release that had it."""

import trio

import trio_durable as td

app = td.App("schema-2")


@app.step()
async def add_one(x: int) -> int:
    return x + 1


@app.workflow()
async def counted(ctx: td.Context, x: int) -> int:
    return await ctx.step(add_one, x)


@app.workflow()
async def waits(ctx: td.Context) -> str:
    payload: str = await ctx.wait_signal("go")
    return payload


async def main() -> None:
    async with td.open_engine(app, store="sqlite:///s2.db", seed=2) as engine:
        for i in range(3):
            run = await engine.start(counted, i, run_id=f"counted-{i}")
            await engine.result(run.id)
        await engine.start(waits, run_id="waiting")
        await engine.drain()


if __name__ == "__main__":
    trio.run(main)
