"""Remote steps over NATS JetStream, against the raw ceiling of nats-py.

Prints, in one run:

(a) the raw round-trip ceiling of plain asyncio nats-py over JetStream, no
    Trio: a driver publishes a task, a worker process pulls it and publishes
    a result, the driver pulls the result (a task stream and a result
    stream as the adapter has, file storage, work-queue retention,
    acknowledged publishes, explicit acks; ``--raw`` round trips of 200
    bytes, 1,000 in flight, pull batches of 256);
(b) trio-durable's remote steps per second for one fan of ``--fan`` steps,
(c) and for ``--runs`` concurrent runs of one remote step each,

for each bridge mode, and their ratios to (a). The engine runs in this
process on a memory store (so the figures measure the broker path, not a
database); the worker is a separate process (`open_worker`, concurrency 256),
as the raw worker is. Usage:
``python bench/bench_nats.py [--url nats://...] [--raw 20000] [--fan 10000] [--runs 1000]``
(the URL defaults to ``$NATS_URL``, else a local server on 4222).

Cases: ``raw.nats_round_trips`` (a), ``nats.fan`` (b) and ``nats.runs``
(c) for the default bridge (``thread``; ``....bridge_<mode>`` for another),
and each as ``....of_raw`` (percent of (a)). ``--prefix nats_always`` names them
``nats_always.*`` for a server with ``sync_interval: always`` (the test
servers'; `bench/all.py` runs both). It prints figures (with
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
from typing import Any

import trio
from _figures import add_json_option, add_names_option, figure, use_args
from _remote_figures import PREFETCH, report

BENCH = "bench_nats"
BODY_SIZE = 200
WINDOW = 1000

# -- (a) plain asyncio nats-py -----------------------------------------------------------


def raw_names(tag: str) -> tuple[str, str, str, str]:
    """The raw benchmark's task stream and subject, and its result stream and
    subject: two streams, as the adapter has (each stream writes, and with
    ``sync_interval: always`` fsyncs, on its own)."""
    return f"BENCH_RAW_{tag}_T", f"bench.{tag}.tasks", f"BENCH_RAW_{tag}_R", f"bench.{tag}.results"


async def raw_setup(url: str, tag: str, *, delete: bool = False) -> None:
    import nats
    from nats.js import api

    task_stream, tasks, result_stream, results = raw_names(tag)
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for stream, subject in ((task_stream, tasks), (result_stream, results)):
            if delete:
                await js.delete_stream(stream)
            else:
                await js.add_stream(
                    name=stream,
                    subjects=[subject],
                    retention=api.RetentionPolicy.WORK_QUEUE,
                    storage=api.StorageType.FILE,
                )
    finally:
        await nc.close()


async def raw_worker(url: str, tag: str) -> None:
    """Pull tasks in batches of PREFETCH (at most PREFETCH unacked); for each,
    publish its result (acknowledged by the server), then ack the task."""
    import nats
    from nats.aio.msg import Msg

    task_stream, tasks, _, results = raw_names(tag)
    nc = await nats.connect(url)
    js = nc.jetstream()
    pull = await js.pull_subscribe(tasks, durable="tasks", stream=task_stream)
    room = asyncio.Semaphore(PREFETCH)
    running: set[asyncio.Task[None]] = set()

    async def handle(msg: Msg) -> None:
        try:
            await js.publish(results, msg.data)
            await msg.ack()
        finally:
            room.release()

    async def serve() -> None:
        while True:
            await room.acquire()
            free = 1
            while free < PREFETCH and not room.locked():
                await room.acquire()
                free += 1
            try:
                msgs = await pull.fetch(free, timeout=1.0)
            except TimeoutError:  # nats-py raises both kinds
                msgs = []
            for _ in range(free - len(msgs)):
                room.release()
            for msg in msgs:
                task = asyncio.get_running_loop().create_task(handle(msg))
                running.add(task)
                task.add_done_callback(running.discard)

    serving = asyncio.get_running_loop().create_task(serve())
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    serving.cancel()
    await asyncio.gather(serving, *running, return_exceptions=True)
    await nc.close()


async def raw_driver(url: str, tag: str, count: int) -> float:
    """Keep WINDOW tasks in flight until ``count`` results came back; the
    round trips per second. Results are pulled in batches of PREFETCH; each
    one received sends the next task without waiting for that publish."""
    import nats

    _, tasks, result_stream, results = raw_names(tag)
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        pull = await js.pull_subscribe(results, durable="results", stream=result_stream)
        body = b"x" * BODY_SIZE
        sent = received = 0
        sending: set[asyncio.Task[Any]] = set()

        def send(n: int) -> None:
            nonlocal sent
            batch = min(n, count - sent)
            sent += batch
            for _ in range(batch):
                task = asyncio.get_running_loop().create_task(js.publish(tasks, body))
                sending.add(task)
                task.add_done_callback(sending.discard)

        start = time.perf_counter()
        send(WINDOW)
        while received < count:
            try:
                msgs = await pull.fetch(PREFETCH, timeout=1.0)
            except TimeoutError:  # nats-py raises both kinds
                continue
            for msg in msgs:
                await msg.ack()
            received += len(msgs)
            send(len(msgs))
        return count / (time.perf_counter() - start)
    finally:
        await nc.close()


def raw_ceiling(url: str, count: int) -> float:
    tag = secrets.token_hex(4)
    asyncio.run(raw_setup(url, tag))
    worker = subprocess.Popen(
        [sys.executable, __file__, "--role", "raw-worker", "--url", url, "--queues", tag],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
        return asyncio.run(raw_driver(url, tag, count))
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait(timeout=30)
        asyncio.run(raw_setup(url, tag, delete=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--raw", type=int, default=20_000)
    parser.add_argument("--fan", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=1_000)
    add_names_option(parser, "--bridges", ("thread", "trio-asyncio"))
    parser.add_argument("--role", default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--queues", nargs="*", default=[], help=argparse.SUPPRESS)
    parser.add_argument(
        "--prefix",
        default="nats",
        help="the cases' prefix: nats.fan, nats.runs, raw.nats_round_trips",
    )
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    if args.role == "raw-worker":
        asyncio.run(raw_worker(args.url, *args.queues))
        return

    print(
        f"NATS JetStream benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}, {args.url}"
    )
    print(
        f"round trips of {BODY_SIZE} B, file storage, acknowledged publishes, explicit acks;"
        f" pull batches / worker concurrency {PREFETCH}; engine on a memory store"
    )
    ceiling = None
    if args.raw:
        ceiling = raw_ceiling(args.url, args.raw)
        figure(
            BENCH,
            f"raw.{args.prefix}_round_trips",
            ceiling,
            "round trips/s",
            label=f"(a) raw nats-py, asyncio, {args.raw} round trips, window {WINDOW}",
        )
    report(BENCH, args.prefix, args.url, ceiling, args.bridges, args.fan, args.runs)


if __name__ == "__main__":
    main()
