"""The operations a remote workflow's body carries out as a local body does
(tests/test_remote_workflow_operations.py), over a real RabbitMQ and NATS:
one body signals a run, publishes an event, emits, sets search attributes,
starts a child cancelled with it, calls an entity, sends a step with a
dedup key and continues as new; its decisions travel in envelope version 2.
A child of it, whose body only the worker holds, answers queries and takes
an update there.
Each run is in a namespace of its own on the shared server."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest
import trio

import trio_durable as td
from trio_durable.brokers import open_broker

PATIENCE = 60.0

workers = td.App("remote-ops-brokers-workers")
workers.queue("once", concurrency=1)
workers.search_attribute("stage", str)


@workers.step(group="steps")
async def shout(text: str) -> str:
    return text.upper()


class Tally:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @td.exclusive
    async def add(self, item: str) -> int:
        self.seen.append(item)
        return len(self.seen)


workers.entity("tally")(Tally)


@workers.workflow(group="deciders")
async def idle(ctx: td.Context) -> None:
    notes: list[str] = []

    @ctx.query("me")
    def me() -> str:
        return f"{ctx.workflow} {ctx.run_id} {notes}"

    @ctx.update("note")
    def note(text: str) -> int:
        notes.append(text)
        return len(notes)

    await ctx.wait_signal("never")


@workers.workflow(group="deciders")
async def everything(ctx: td.Context, target: str, generation: int) -> dict[str, object]:
    await ctx.signal(target, "note", generation)
    await ctx.set_event("stage", generation)
    ctx.emit({"generation": generation})
    ctx.upsert_search_attributes({"stage": f"gen{generation}"})
    kid = await ctx.start_child(idle, cancel_with_parent=True)
    count = await ctx.entity("tally", target).add(f"g{generation}")
    shouted = await ctx.step(shout, "a", queue="once", dedup_key=f"k{generation}")
    if generation == 1:
        ctx.continue_as_new(target, 2)
    return {"kid": kid, "count": count, "shouted": shouted}


service = td.App("remote-ops-brokers-service")
service.remote_workflow("everything", group="deciders")
service.remote_workflow("idle", group="deciders")
service.entity("tally")(Tally)


@service.workflow()
async def receiver(ctx: td.Context) -> list[object]:
    return [await ctx.wait_signal("note"), await ctx.wait_signal("note")]


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_every_operation_in_a_remote_body_over_a_real_broker(
    real_server: Callable[[str], str], server: str
) -> None:
    ns = f"remoteops{secrets.token_hex(4)}"
    async with (
        open_broker(real_server(server)) as broker,
        td.open_engine(service, broker=broker, seed=5) as engine,
        td.open_worker(workers, broker=broker, groups=[f"deciders@{ns}", f"steps@{ns}"]),
    ):
        target = f"{ns}.target"
        await engine.start(receiver, run_id=target, namespace=ns)
        run = await engine.start("everything", target, 1, run_id=f"{ns}.e", namespace=ns)
        with trio.fail_after(PATIENCE):
            # result() on the first generation waits for the second.
            result = await engine.result(run.id)
            assert result == {"kid": f"{ns}.e.gen.2.child.4", "count": 2, "shouted": "A"}
            assert await engine.result(target) == [1, 2]
            assert await engine.get_event(f"{ns}.e", "stage", timeout=0) == 1
            assert await engine.get_event(f"{ns}.e.gen.2", "stage", timeout=0) == 2
            values = [v async for v in engine.stream(f"{ns}.e.gen.2")]
            assert values == [(0, {"generation": 2})]
            found = await engine.list_runs(search_attributes={"stage": "gen2"})
            assert [r.id for r in found.runs] == [f"{ns}.e.gen.2"]
        # The first generation's child was cancelled with nothing: that
        # generation completed. The second's ended with its parent too.
        kids = {
            r.id: r.status
            for r in (await engine.list_runs(namespace=ns)).runs
            if r.workflow == "idle"
        }
        assert kids == {f"{ns}.e.child.4": "suspended", f"{ns}.e.gen.2.child.4": "suspended"}
        # The engine's app lacks the body: a worker answers its queries.
        with trio.fail_after(PATIENCE):
            kid = f"{ns}.e.child.4"
            assert await engine.query(kid, "me") == f"idle {kid} []"
            # And takes updates, which a worker validates and applies.
            assert await engine.update(kid, "note", "hi") == 1
            assert await engine.query(kid, "me") == f"idle {kid} ['hi']"
