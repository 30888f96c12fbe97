"""Run streams over a real RabbitMQ and NATS: a workflow whose steps run on
a remote worker emits between them, and a client reading the stream gets
each value while the next step runs (the step waits until the reader has
it), in order and once, until the run ends. The store is a SQLite file, the
client a reader of its own, told of new values by the store's watch."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
import trio

import trio_durable as td

EVENTUALLY: Final = 60.0
STEPS: Final = 5

app = td.App("streams-brokers")
# Offset i was read by the test's client: set by the reader, awaited by
# step i + 1, so the run goes on only once each value was streamed live.
seen: dict[int, trio.Event] = {}


@app.step(group="gen")
async def generate(index: int) -> str:
    if index > 0:
        await seen[index - 1].wait()
    return f"chunk-{index}"


@app.workflow()
async def writer(ctx: td.Context, steps: int) -> int:
    for index in range(steps):
        chunk = await ctx.step(generate, index)
        ctx.emit({"index": index, "chunk": chunk})
    return steps


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_a_client_reads_values_emitted_between_remote_steps_as_they_come(
    real_server: Callable[[str], str], server: str, tmp_path: Path
) -> None:
    url = real_server(server)
    namespace = f"streams{secrets.token_hex(4)}"
    store = f"sqlite:///{tmp_path / 'streams.db'}"
    seen.clear()
    seen.update({index: trio.Event() for index in range(STEPS)})
    items: list[tuple[int, Any]] = []
    with trio.fail_after(EVENTUALLY):
        async with (
            td.open_engine(app, store=store, broker=url, seed=1) as engine,
            td.open_worker(app, broker=url, groups=[f"gen@{namespace}"]),
            td.open_client(store) as client,
        ):
            run = await engine.start(writer, STEPS, run_id=f"{namespace}.w", namespace=namespace)
            async for offset, value in client.stream(run.id):
                items.append((offset, value))
                seen[offset].set()
            assert await client.result(run.id) == STEPS
    assert items == [(i, {"index": i, "chunk": f"chunk-{i}"}) for i in range(STEPS)]
