"""Tasks and results over a real broker's size limit: NATS tells its
``max_payload`` (1 MB on a default server), RabbitMQ's comes from the URL's
``?max_payload=`` (its ``max_message_size`` cannot be asked). A step whose
input or output is over it fails with code ``payload_too_large``, at once
and for good, and its neighbours complete."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final

import pytest
import trio

import trio_durable as td

AMQP_LIMIT: Final = 200_000
"""The ``?max_payload=`` given to RabbitMQ here (bytes)."""

app = td.App("payload-limits")


@app.step(group="blobs", retry=td.Retry(attempts=3, backoff=0.1, jitter=0))
async def measure(text: str) -> int:
    return len(text)


@app.step(group="blobs", retry=td.Retry(attempts=3, backoff=0.1, jitter=0))
async def inflate(size: int) -> str:
    return "x" * size


@app.workflow()
async def measure_all(ctx: td.Context, texts: list[str]) -> list[dict[str, Any]]:
    return await ctx.all_settled(measure, texts)


@app.workflow()
async def inflate_all(ctx: td.Context, sizes: list[int]) -> list[dict[str, Any]]:
    return await ctx.all_settled(inflate, sizes)


def check_too_large(outcome: dict[str, Any], limit: int, of: str) -> None:
    assert outcome["status"] == "rejected", outcome
    assert outcome["code"] == "payload_too_large"
    assert outcome["details"]["limit"] == limit
    assert outcome["details"]["of"] == of
    assert outcome["details"]["size"] > limit
    assert f"over the broker's max_payload of {limit} bytes" in outcome["error"]


@pytest.mark.parametrize("broker", ["nats", "rabbitmq"])
async def test_a_step_over_the_limit_fails_and_its_neighbours_complete(
    real_server: Callable[[str], str], broker: str
) -> None:
    url = real_server(broker)
    if broker == "rabbitmq":
        url = f"{url}{'&' if '?' in url else '?'}max_payload={AMQP_LIMIT}"
    namespace = f"payload-{secrets.token_hex(4)}"
    with trio.fail_after(60):
        async with td.open_engine(app, broker=url, serve=[f"blobs@{namespace}"], seed=0) as engine:
            limit = engine.broker.max_payload
            assert limit is not None
            if broker == "nats":
                # The server's default (1 MB) less the room kept for headers.
                assert limit == 1024 * 1024 - 1024
            else:
                assert limit == AMQP_LIMIT
            big = limit + 1000
            await engine.start(
                measure_all, ["a", "b" * big, "cc"], run_id=f"{namespace}.in", namespace=namespace
            )
            await engine.start(
                inflate_all, [10, big, 20], run_id=f"{namespace}.out", namespace=namespace
            )
            inputs = await engine.result(f"{namespace}.in")
            outputs = await engine.result(f"{namespace}.out")
            attempts = [
                cp.attempts
                for run in ("in", "out")
                for cp in await engine.store.get_checkpoints(f"{namespace}.{run}", 1, 3)
            ]
    assert [inputs[0], inputs[2]] == [
        {"status": "fulfilled", "value": 1},
        {"status": "fulfilled", "value": 2},
    ]
    check_too_large(inputs[1], limit, "input")
    assert [outputs[0], outputs[2]] == [
        {"status": "fulfilled", "value": "x" * 10},
        {"status": "fulfilled", "value": "x" * 20},
    ]
    check_too_large(outputs[1], limit, "result")
    # Not retried: one attempt each.
    assert attempts == [1] * 6
