"""The App that the tests of the ``trio-durable`` command's families (runs
count, execute, signal --start, query and update; schedules, events,
entities, queues) run against, as ``cli_families_app:app`` from the tests
folder.

- ``order(order_id)`` registers the query ``lines`` and the update
  ``add_line`` (whose validator rejects a quantity below 1), emits each
  line added, waits for the signal ``submit`` and returns its lines;
- ``parent(n)`` awaits ``n`` children of ``child``, and ``failing(reason)``
  fails with the code ``declined``, handed to its on-error handler
  ``on_declined``; ``refuse(reason)`` fails with the code ``refused``;
- ``greet(name)`` returns at once, after emitting two values;
- ``on_placed(order)`` subscribes to the event ``order.placed``;
- the entities ``cart`` (str keys) and ``counter`` (int keys).
"""

from __future__ import annotations

from typing import Any

import trio_durable as td

app = td.App("cli-families")


def _positive(sku: str, quantity: int) -> None:
    if quantity < 1:
        raise td.FatalError("quantity must be positive", code="bad_quantity")


@app.workflow()
async def order(ctx: td.Context, order_id: str) -> dict[str, int]:
    lines: dict[str, int] = {}

    @ctx.query("lines")
    def get_lines() -> dict[str, int]:
        return lines

    @ctx.update("add_line", validator=_positive)
    def add_line(sku: str, quantity: int) -> int:
        lines[sku] = lines.get(sku, 0) + quantity
        return sum(lines.values())

    await ctx.wait_signal("submit")
    return lines


@app.workflow()
async def child(ctx: td.Context, i: int) -> int:
    return i * 10


@app.workflow()
async def parent(ctx: td.Context, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.child(child, i)
    return total


@app.workflow()
async def on_declined(ctx: td.Context, failure: Any) -> str:
    return "handled"


@app.workflow(on_error=[td.OnError("declined", workflow="on_declined")])
async def failing(ctx: td.Context, reason: str) -> None:
    raise td.FatalError(reason, code="declined")


@app.workflow()
async def refuse(ctx: td.Context, reason: str) -> None:
    raise td.FatalError(reason, code="refused")


@app.workflow()
async def greet(ctx: td.Context, name: str) -> str:
    ctx.emit({"hello": name})
    ctx.emit("done")
    return f"hello {name}"


@app.workflow(events=["order.placed"])
async def on_placed(ctx: td.Context, placed: dict[str, str]) -> str:
    return f"placed {placed['sku']}"


@app.entity("cart", key=str)
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    @td.exclusive
    async def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @td.shared
    async def count(self) -> int:
        return len(self.items)


@app.entity("counter", key=int)
class Counter:
    def __init__(self) -> None:
        self.value = 0

    @td.exclusive
    async def bump(self) -> int:
        self.value += 1
        return self.value

    @td.shared
    async def read(self) -> int:
        return self.value
