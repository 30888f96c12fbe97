"""Calls ``mypy --strict`` must refuse: each line marked ``# E: <code>``
must get exactly that error, and no other line any.

`tests/test_typing.py` checks it; the project's own ``mypy`` run leaves it
out (see ``exclude`` in pyproject.toml).
"""

from __future__ import annotations

import attrs

import trio_durable as td

app = td.App("bad")


@attrs.define(frozen=True)
class Order:
    sku: str


@app.step
async def validate(order: Order) -> bool:
    return True


@app.step
async def undo_other(sku: str) -> None: ...


@app.step(group="g")
async def two(a: int, b: int) -> int:
    return a + b


@app.workflow
async def square(ctx: td.Context, x: int) -> int:
    return x * x


async def not_a_step(order: Order) -> bool:
    return False


@app.workflow
async def body(ctx: td.Context, order: Order) -> None:
    await ctx.step(validate, "wrong-type")  # E: arg-type
    await ctx.step(validate)  # E: arg-type
    await ctx.step(validate, order, order)  # E: arg-type
    await ctx.step(validate, order, compensate=undo_other)  # E: arg-type
    await ctx.step(not_a_step, order)  # E: call-overload
    flag: str = await ctx.step(validate, order)  # E: arg-type
    await ctx.child(square, "3")  # E: arg-type
    child: str = await ctx.child(square, 3)  # E: arg-type
    started: int = await ctx.start_child(square, 3)  # E: assignment
    await ctx.all(square, ["3"])  # E: arg-type
    await ctx.all(two, [1, 2])  # E: arg-type
    squares: list[str] = await ctx.all(square, [1, 2])  # E: arg-type
    await ctx.all_settled(square, [None])  # E: arg-type
    print(flag, child, started, squares)


@app.workflow  # E: arg-type
async def no_context(order: Order) -> None: ...


@app.step  # E: arg-type
def not_async(order: Order) -> bool:
    return True


async def main() -> None:
    async with td.open_engine(app) as engine:
        await engine.start(square, "3")  # E: arg-type
        await engine.start(square)  # E: arg-type
        await engine.start(square, 3, run_id=7)  # E: call-overload
        run = await engine.start(square, 3)
        text: str = await run.result()  # E: assignment
        print(text)
