"""Hostile messages over real brokers: the messages that crashed workers and
engines (issue 12, item 1) are published raw to a worker's task queue and to
an engine's results queue on RabbitMQ and on NATS. Each is rejected, counted
and dead-lettered; the worker and the engine keep running and still run a
workflow to its end.

They use the shared servers (``tests/servers``), on queues of a namespace of
their own.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

import pytest
import trio

import trio_durable as td
from hostile import item_one_results, item_one_tasks
from trio_durable._brokers import open_broker
from trio_durable._brokers._base import Broker, Outgoing

PATIENCE: Final = 60.0

app = td.App("hostile")


@app.step(group="g")
async def act(x: int) -> int:
    return x + 1


@app.workflow()
async def use(ctx: td.Context, x: int) -> int:
    return await ctx.step(act, x)


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (counters on the far side of a real broker, which
    nothing here signals) until it holds, for at most `PATIENCE` seconds."""
    with trio.fail_after(PATIENCE):
        while not predicate():  # noqa: ASYNC110 -- the broker delivers on its own time
            await trio.sleep(0.05)


async def dead_letters_amqp(broker: Broker, queue: str, expected: list[bytes]) -> Counter[bytes]:
    """Take ``expected``'s messages off ``queue``'s dead-letter queue."""
    got: Counter[bytes] = Counter()
    want = Counter(expected)
    async with broker.open_consumer(f"{queue}.dead", prefetch=50) as consumer:
        with trio.fail_after(PATIENCE):
            while not want <= got:
                deliveries = await consumer.receive(50)
                got.update(d.body for d in deliveries)
                await consumer.ack(deliveries)
    return got


async def dead_letter_count_nats(broker: Any, queue: str) -> int:
    """How many copies the NATS dead-letter stream holds for ``queue``."""
    from trio_durable.brokers._nats_url import DEAD_STREAM, DEAD_SUBJECT, token

    subject = f"{DEAD_SUBJECT}.{token(queue)}"
    js = broker._js
    info = await broker._bridge.run(lambda: js.stream_info(DEAD_STREAM, subjects_filter=subject))
    return int((info.state.subjects or {}).get(subject, 0))


async def delete_amqp_queues(broker: Any, queues: list[str]) -> None:
    connection = broker._connection

    async def delete() -> None:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        await channel.close()

    await broker.bridge.run(delete)


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_hostile_messages_are_rejected_counted_and_dead_lettered(
    real_server: Callable[[str], str], server: str
) -> None:
    url = real_server(server)
    namespace = f"hostile{secrets.token_hex(4)}"
    route = f"g@{namespace}"
    tasks = item_one_tasks(route)
    results = item_one_results()
    async with (
        open_broker(url) as broker,
        td.open_engine(app, broker=broker, engine_id=f"engine-{namespace}") as engine,
        td.open_worker(app, broker=broker, groups=[route]) as worker,
    ):
        results_queue = engine.results_queue
        if server == "nats":
            dead_before = (
                await dead_letter_count_nats(broker, route),
                await dead_letter_count_nats(broker, results_queue),
            )
        await broker.dispatch(
            [Outgoing(queue=route, body=body) for body in tasks]
            + [Outgoing(queue=results_queue, body=body) for body in results]
        )
        await wait_until(
            lambda: worker.statistics().rejected >= len(tasks)
            and engine.statistics().rejected >= len(results)
        )
        # Both still work: a run of the same namespace goes through the
        # same queues to its end.
        run = await engine.start(use, 41, run_id=f"{namespace}.after", namespace=namespace)
        with trio.fail_after(PATIENCE):
            assert await engine.result(run.id) == 42
        # Each was rejected once: never requeued, never delivered again.
        assert worker.statistics().rejected == len(tasks)
        assert engine.statistics().rejected == len(results)
        assert worker.statistics().received == len(tasks) + 1
        metrics = engine.metrics()
        assert f'trio_durable_messages_rejected_total{{kind="result"}} {len(results)}' in metrics
        assert (
            f'trio_durable_messages_rejected_total{{kind="task"}} {len(tasks)}' in worker.metrics()
        )
        # And each went to its queue's dead-letter place.
        if server == "rabbitmq":
            assert Counter(tasks) <= await dead_letters_amqp(broker, route, tasks)
            assert Counter(results) <= await dead_letters_amqp(broker, results_queue, results)
        else:
            expected = (dead_before[0] + len(tasks), dead_before[1] + len(results))

            async def dead_now() -> tuple[int, int]:
                return (
                    await dead_letter_count_nats(broker, route),
                    await dead_letter_count_nats(broker, results_queue),
                )

            with trio.fail_after(PATIENCE):
                while (counts := await dead_now()) != expected:
                    assert all(c <= e for c, e in zip(counts, expected, strict=True)), counts
                    await trio.sleep(0.05)
    if server == "rabbitmq":
        # Leave the shared server as it was (its consumers are gone now).
        async with open_broker(url) as broker:
            await delete_amqp_queues(
                broker, [route, f"{route}.dead", results_queue, f"{results_queue}.dead"]
            )
