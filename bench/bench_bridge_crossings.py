"""Crossings of the Trio/asyncio bridge per message, on the NATS and RabbitMQ
adapters.

The engine and a worker run in this process, each over a broker of its own
(two connections, as two processes would have), and every call of the
broker protocol goes through a counting wrapper. For each side it prints,
per 1,000 messages:

- ``dispatch``: bridge crossings made to publish tasks (engine) or results
  (worker);
- ``consume``: receive batches (each at most one wake-up of the Trio side);
- ``ack``: bridge crossings made to ack results (engine) or tasks (worker);

and the steps per second of the fan and of the one-step runs (figures of a
busy shared machine: compare ratios, not values). Crossings are counted by
wrapping ``Bridge.run`` and tagging each call with the protocol method it
serves, so the script measures any commit of the adapters the same way.

Usage: ``python bench/bench_bridge_crossings.py [--nats URL] [--amqp URL]
[--fan 2000] [--runs 500] [--json PATH]`` (a URL ``off`` skips that broker).
It prints figures and never passes or fails.
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td
from trio_durable.brokers import Bridge, Broker, Consumer, Delivery, Outgoing, open_broker

T = TypeVar("T")
BENCH = "bench_bridge_crossings"
CONCURRENCY = 256

app = td.App("bench-crossings")


@app.step(group="square")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def one_step(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    return sum(await ctx.all(square, list(range(n))))


_purpose: contextvars.ContextVar[str] = contextvars.ContextVar("purpose", default="dispatch")
# (side, purpose) -> crossings; the publisher task of an adapter that
# coalesces dispatches runs outside any protocol call, so it counts as
# "dispatch" (the default).
_crossings: collections.Counter[tuple[str, str]] = collections.Counter()
_side: contextvars.ContextVar[str] = contextvars.ContextVar("side", default="?")
_original_run = Bridge.run


async def _counted_run(self: Bridge, fn: Callable[[], Awaitable[T]]) -> T:
    _crossings[_side.get(), _purpose.get()] += 1
    return await _original_run(self, fn)


Bridge.run = _counted_run  # type: ignore[method-assign]


class CountingConsumer:
    def __init__(self, inner: Consumer, counts: collections.Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    async def receive(self, max_items: int) -> list[Delivery]:
        token = _purpose.set("consume")
        try:
            batch = await self._inner.receive(max_items)
        finally:
            _purpose.reset(token)
        self._counts["receive"] += 1
        self._counts["received"] += len(batch)
        return batch

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        token = _purpose.set("ack")
        try:
            await self._inner.ack(deliveries)
        finally:
            _purpose.reset(token)
        self._counts["acked"] += len(deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        token = _purpose.set("reject")
        try:
            await self._inner.reject(deliveries, requeue=requeue)
        finally:
            _purpose.reset(token)


class CountingBroker:
    """A `Broker` that counts what goes through it."""

    def __init__(self, inner: Broker) -> None:
        self._inner = inner
        self.counts: collections.Counter[str] = collections.Counter()

    @property
    def durable(self) -> bool:
        return self._inner.durable

    @property
    def max_payload(self) -> int | None:
        return self._inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self._inner.dispatch(messages)
        self.counts["dispatched"] += len(messages)

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        token: contextvars.Token[str] | None = _purpose.set("open")
        try:
            async with self._inner.open_consumer(queue, prefetch=prefetch) as consumer:
                assert token is not None
                _purpose.reset(token)
                token = None
                yield CountingConsumer(consumer, self.counts)
        finally:
            if token is not None:
                _purpose.reset(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def _figures_for(name: str, url: str, fan_size: int, runs: int) -> None:
    namespace = f"cross{secrets.token_hex(4)}"
    route = f"square@{namespace}"
    _crossings.clear()
    side = _side.set("engine")
    async with open_broker(url) as engine_inner:
        engine_broker = CountingBroker(engine_inner)
        _side.set("worker")
        async with open_broker(url) as worker_inner:
            worker_broker = CountingBroker(worker_inner)
            async with td.open_worker(
                app, broker=worker_broker, groups=[route], concurrency=CONCURRENCY
            ):
                _side.set("engine")
                async with td.open_engine(app, broker=engine_broker, seed=1) as engine:
                    # Setup crossings (connect, consumers) are not per message.
                    _crossings.clear()
                    engine_broker.counts.clear()
                    worker_broker.counts.clear()
                    start = time.perf_counter()
                    run = await engine.start(
                        fan, fan_size, run_id=f"{namespace}.fan", namespace=namespace
                    )
                    await engine.result(run.id)
                    fan_rate = fan_size / (time.perf_counter() - start)

                    async def one(i: int) -> None:
                        handle = await engine.start(
                            one_step, i, run_id=f"{namespace}.r{i}", namespace=namespace
                        )
                        await engine.result(handle.id)

                    start = time.perf_counter()
                    async with trio.open_nursery() as nursery:
                        for i in range(runs):
                            nursery.start_soon(one, i)
                    runs_rate = runs / (time.perf_counter() - start)
                    await engine.drain()
                    crossings = dict(_crossings)
                    engine_counts = dict(engine_broker.counts)
                    worker_counts = dict(worker_broker.counts)
    _side.reset(side)
    steps = fan_size + runs
    print(f"{name}: {url}")
    figure(BENCH, f"{name}.fan", fan_rate, "steps/s", label=f"fan of {fan_size}")
    figure(BENCH, f"{name}.runs", runs_rate, "steps/s", label=f"{runs} one-step runs")
    for side_name, counts in (("engine", engine_counts), ("worker", worker_counts)):
        for purpose in ("dispatch", "consume", "ack"):
            value = crossings.get((side_name, purpose), 0)
            if purpose == "consume":
                value = counts.get("receive", 0)
            figure(
                BENCH,
                f"{name}.{side_name}.{purpose}",
                1000 * value / steps,
                "crossings/1000 messages",
                better="lower",
                label=f"{side_name} {purpose}",
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument(
        "--amqp", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--fan", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=500)
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    for name, url in (("nats", args.nats), ("amqp", args.amqp)):
        if url != "off":
            trio.run(_figures_for, name, url, args.fan, args.runs)


if __name__ == "__main__":
    main()
