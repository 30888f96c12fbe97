"""A run with a 20 MB input and a 20 MB output, through a remote step on a
worker, over real RabbitMQ and NATS (whose default ``max_payload`` is
1 MB) and on every store, PostgreSQL included: it completes through the
blob store while every broker message stays under 64 KB."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from sized_broker import SizedBroker
from test_blobs import is_reference
from trio_durable._front._undecodable import payload_layers_under
from trio_durable.brokers import RESULTS

MB: Final = 1024 * 1024
SMALL: Final = 64 * 1024

app = td.App("blobs-brokers")


@app.step(group="big")
async def shout(text: str) -> str:
    return text.upper() + "!"


@app.workflow()
async def big_round_trip(ctx: td.Context, text: str) -> str:
    return await ctx.step(shout, text)


@asynccontextmanager
async def store_url(
    kind: str, real_server: Callable[[str], str], tmp_path: Path
) -> AsyncIterator[str]:
    if kind == "postgres":
        async with scratch_schema(real_server("postgres")) as url:
            yield url
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield "memory://"


@pytest.mark.parametrize(
    ("broker", "store"),
    [
        ("rabbitmq", "memory"),
        ("rabbitmq", "sqlite"),
        ("rabbitmq", "postgres"),
        ("nats", "memory"),
        ("nats", "sqlite"),
        ("nats", "postgres"),
        ("memory", "postgres"),
    ],
)
async def test_a_20_mb_round_trip_keeps_broker_messages_small(
    real_server: Callable[[str], str], tmp_path: Path, broker: str, store: str
) -> None:
    namespace = f"blobs-{secrets.token_hex(4)}"
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "a" * (20 * MB)
    broker_url = "memory://" if broker == "memory" else real_server(broker)
    with trio.fail_after(120):
        async with (
            store_url(store, real_server, tmp_path) as url,
            td.open_broker(broker_url) as opened,
        ):
            sized = SizedBroker(opened)
            async with (
                td.open_engine(app, store=url, broker=sized, seed=0, blobs=blobs) as engine,
                td.open_worker(app, broker=sized, groups=[f"big@{namespace}"], blobs=blobs),
            ):
                run = await engine.start(
                    big_round_trip, text, run_id=f"{namespace}.run", namespace=namespace
                )
                assert await engine.result(run.id) == "A" * (20 * MB) + "!"
                # One task and one result at least, each far under 64 KB.
                queues = {queue for queue, _ in sized.sizes}
                assert any(q.startswith("big") for q in queues), sized.sizes
                assert any(q.startswith(RESULTS) for q in queues), sized.sizes
                assert sized.largest() < SMALL, sized.sizes
                stored = await payload_layers_under(engine.store).get_run(run.id)
                assert stored is not None
                assert is_reference(stored.input)
                assert stored.output is not None
                assert is_reference(stored.output)
                assert (await engine.get(run.id)).input == json.dumps([text])


@app.workflow()
async def echo(ctx: td.Context, text: str) -> str:
    return text


async def test_pruning_on_postgres_deletes_only_unreferenced_blobs(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "p" * 100_000
    with trio.fail_after(60):
        async with (
            scratch_schema(real_server("postgres")) as url,
            td.open_engine(app, store=url, seed=0, blobs=blobs, blob_grace=0) as engine,
        ):
            for run_id in ("first", "second"):
                await engine.start(echo, text, run_id=run_id)
                assert await engine.result(run_id) == text
            # One blob for both inputs, one for both outputs.
            assert len(await blobs.list()) == 2
            assert await engine.prune(td.Retention(completed=0), limit=1) == 1
            assert len(await blobs.list()) == 2
            [left] = (await engine.list_runs()).runs
            assert await engine.result(left.id) == text
            assert await engine.prune(td.Retention(completed=0)) == 1
            assert await blobs.list() == []
            assert await engine.store.list_values("blob") == []
