"""Remote steps over RabbitMQ, against the raw ceiling of aio-pika.

Prints, in one run:

(a) the raw round-trip ceiling of plain asyncio aio-pika, no Trio: a driver
    publishes a task, a worker process consumes it and publishes a result,
    the driver consumes the result (persistent messages, publisher confirms,
    manual acks; ``--raw`` round trips of 200 bytes, 1,000 in flight, the
    worker's prefetch 256);
(b) trio-durable's remote steps per second for one fan of ``--fan`` steps,
(c) and for ``--runs`` concurrent runs of one remote step each,

for each bridge mode, and their ratios to (a). The engine runs in this
process on a memory store (so the figures measure the broker path, not a
database); the worker is a separate process (`open_worker`, concurrency 256),
as the raw worker is. Usage:
``python bench/bench_amqp.py [--url amqp://...] [--raw 20000] [--fan 10000] [--runs 1000]``
(the URL defaults to ``$AMQP_URL``, else a local RabbitMQ on 5672).

Cases: ``raw.amqp_round_trips`` (a), ``amqp.fan`` (b) and ``amqp.runs``
(c) for the default bridge (``thread``; ``....bridge_<mode>`` for another),
and each as ``....of_raw`` (percent of (a)). It prints figures (with
``--json PATH``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import time

import trio
from _figures import add_json_option, add_names_option, figure, use_args
from _remote_figures import PREFETCH, report

BENCH = "bench_amqp"
BODY_SIZE = 200
WINDOW = 1000

# -- (a) plain asyncio aio-pika ----------------------------------------------------------


async def raw_worker(url: str, tasks: str, results: str) -> None:
    """Consume tasks; for each, publish a result (confirmed), then ack the task."""
    import aio_pika

    connection = await aio_pika.connect(url)
    async with connection:
        consume = await connection.channel(publisher_confirms=False)
        await consume.set_qos(prefetch_count=PREFETCH)
        publish = await connection.channel(publisher_confirms=True)
        queue = await consume.declare_queue(tasks, durable=True)
        await publish.declare_queue(results, durable=True)

        async def handle(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            await publish.default_exchange.publish(
                aio_pika.Message(message.body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=results,
            )
            await message.ack()

        await queue.consume(handle)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def raw_driver(url: str, tasks: str, results: str, count: int) -> float:
    """Keep WINDOW tasks in flight until ``count`` results came back; the
    round trips per second."""
    import aio_pika

    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        consume = await connection.channel(publisher_confirms=False)
        await consume.set_qos(prefetch_count=WINDOW)
        await channel.declare_queue(tasks, durable=True)
        result_queue = await consume.declare_queue(results, durable=True)
        body = b"x" * BODY_SIZE
        done = asyncio.Event()
        received = 0
        sent = 0

        async def send(n: int) -> None:
            nonlocal sent
            batch = min(n, count - sent)
            sent += batch
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=tasks,
                    )
                    for _ in range(batch)
                )
            )

        async def on_result(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal received
            await message.ack()
            received += 1
            if received == count:
                done.set()
            elif sent < count:
                await send(1)

        await result_queue.consume(on_result)
        start = time.perf_counter()
        await send(WINDOW)
        await done.wait()
        return count / (time.perf_counter() - start)


def raw_ceiling(url: str, count: int) -> float:
    tag = secrets.token_hex(4)
    tasks, results = f"bench.raw.{tag}.tasks", f"bench.raw.{tag}.results"
    worker = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "raw-worker",
            "--url",
            url,
            "--queues",
            tasks,
            results,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        return asyncio.run(raw_driver(url, tasks, results, count))
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", default=os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    )
    parser.add_argument("--raw", type=int, default=20_000)
    parser.add_argument("--fan", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000)
    add_names_option(parser, "--bridges", ("thread", "trio-asyncio"))
    parser.add_argument("--role", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--queues", nargs="*", default=[], help=argparse.SUPPRESS)
    parser.add_argument(
        "--prefix",
        default="amqp",
        help="the cases' prefix: amqp.fan, amqp.runs, raw.amqp_round_trips",
    )
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    if args.role == "raw-worker":
        asyncio.run(raw_worker(args.url, *args.queues))
        return

    print(
        f"RabbitMQ benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}, {args.url}"
    )
    print(
        f"round trips of {BODY_SIZE} B, persistent, confirmed, manually acked; worker prefetch {PREFETCH}"
    )
    ceiling = None
    if args.raw:
        ceiling = raw_ceiling(args.url, args.raw)
        figure(
            BENCH,
            f"raw.{args.prefix}_round_trips",
            ceiling,
            "round trips/s",
            label=f"(a) raw aio-pika, asyncio, {args.raw} round trips, window {WINDOW}",
        )
    report(BENCH, args.prefix, args.url, ceiling, args.bridges, args.fan, args.runs)


if __name__ == "__main__":
    main()
