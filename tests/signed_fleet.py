"""Signed tasks and results between an engine and a worker, shared by the
tests over the memory broker (tests/test_signing.py) and over real RabbitMQ
and NATS (tests/integration/test_signing_brokers.py).

Each scenario takes an open broker and a namespace of its own (its queues
are fresh on a shared server), and checks what a fleet with ``signing=``
does with messages that someone without the key published: they are
rejected before they are decoded, counted by reason, and change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import trio

import trio_durable as td
from hostile import valid_result, valid_task
from prometheus_samples import sample
from trio_durable._wire._signing import TAG, sign
from trio_durable.brokers import Broker, Outgoing

PATIENCE: Final = 30.0
"""Seconds a scenario waits for something a real broker delivers."""

K1: Final = b"k1-secret-key-of-32-bytes-length"
K2: Final = b"k2-secret-key-of-32-bytes-length"
K3: Final = b"k3-secret-key-of-32-bytes-length"

ENGINE_RING: Final = td.Keyring({"k2": K2, "k1": K1}, current="k2")
"""The engines' ring in the middle of a rotation: k2 signs, k1 still verifies."""

WORKER_RING: Final = td.Keyring({"k1": K1, "k2": K2}, current="k1")
"""The workers' ring, one deploy behind: k1 signs, k2 already verifies."""

STRANGER_RING: Final = td.Keyring.single(K3, "k3")
"""A ring that shares no key with the fleet."""

FORGER_RING: Final = td.Keyring.single(b"not-the-fleet's-key-but-named-k1", "k1")
"""A forger who knows the fleet's key id (k1), but not its key."""

signing_app = td.App("signing")

RAN: list[int] = []
"""The arguments `add_one` was called with, in every scenario."""

GATES: dict[int, trio.Event] = {}
"""`add_one` of an argument with a gate here waits for it to be set."""


@signing_app.step(group="g")
async def add_one(x: int) -> int:
    RAN.append(x)
    if x in GATES:
        await GATES[x].wait()
    return x + 1


@signing_app.workflow()
async def use(ctx: td.Context, x: int) -> int:
    return await ctx.step(add_one, x)


@signing_app.workflow(group="deciders")
async def decided(ctx: td.Context, x: int) -> int:
    """A remote workflow: its decision tasks and results are signed too."""
    return await ctx.step(add_one, x) * 10


engine_app = td.App("signing-engine")
decided_by_name = engine_app.remote_workflow("decided", group="deciders")


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (counters on the far side of a broker, which
    nothing here signals) until it holds, for at most `PATIENCE` seconds."""
    with trio.fail_after(PATIENCE):
        while not predicate():  # noqa: ASYNC110 -- the broker delivers on its own time
            await trio.sleep(0.05)


def raw(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def tampered(signed: bytes, old: bytes, new: bytes) -> bytes:
    """A signed message whose body was changed after it was signed."""
    assert signed.startswith(TAG)
    assert signed.count(old) == 1
    return signed.replace(old, new)


def rejections(stats: Any) -> tuple[int, int, int, int]:
    """(unsigned, forged, unknown key, undecodable) rejections in ``stats``."""
    return (
        stats.rejected_unsigned,
        stats.rejected_forged,
        stats.rejected_unknown_key,
        stats.rejected,
    )


def unauthenticated(metrics: str, kind: str) -> tuple[float | None, ...]:
    """The ``trio_durable_messages_unauthenticated_total`` samples of
    ``kind`` by reason: unsigned, forged, unknown_key."""
    name = "trio_durable_messages_unauthenticated_total"
    return tuple(
        sample(metrics, name, kind=kind, reason=reason)
        for reason in ("unsigned", "forged", "unknown_key")
    )


async def forged_results_settle_nothing(broker: Broker, namespace: str) -> None:
    """Results for a pending step, unsigned, forged, signed with an unknown
    key or changed after signing, each claiming the step returned 999: the
    engine rejects and counts each, and the step stays pending until the
    worker's genuine result completes it."""
    route = f"g@{namespace}"
    x = 7
    gate = GATES[x] = trio.Event()
    ran = RAN.count(x)
    async with (
        td.open_engine(signing_app, broker=broker, signing=ENGINE_RING, seed=1) as engine,
        td.open_worker(signing_app, broker=broker, groups=[route], signing=WORKER_RING),
    ):
        run = await engine.start(use, x, run_id=f"{namespace}.forged", namespace=namespace)
        # The worker holds the task: the step is pending, as an attacker wants.
        await wait_until(lambda: RAN.count(x) > ran)
        claim = valid_result(run_id=run.id, seq=1) | {"step": "add_one", "output": 999}
        genuine = sign(WORKER_RING, "result", raw(claim))
        await broker.dispatch(
            [
                Outgoing(queue=engine.results_queue, body=body)
                for body in (
                    raw(claim),
                    sign(FORGER_RING, "result", raw(claim)),
                    sign(td.Keyring.single(K3, "k9"), "result", raw(claim)),
                    tampered(genuine, b'"worker":"w"', b'"worker":"x"'),
                    # A genuine task's signature does not make it a result.
                    sign(WORKER_RING, "task", raw(claim)),
                )
            ]
        )
        await wait_until(lambda: sum(rejections(engine.statistics())) >= 5)
        assert rejections(engine.statistics()) == (1, 3, 1, 0)
        assert unauthenticated(engine.metrics(), "result") == (1.0, 3.0, 1.0)
        [step] = [cp for cp in await engine.store.get_checkpoints(run.id) if cp.seq == 1]
        assert step.status == "pending"
        gate.set()
        with trio.fail_after(PATIENCE):
            assert await engine.result(run.id) == x + 1
        assert rejections(engine.statistics()) == (1, 3, 1, 0)


async def unsigned_tasks_never_run(broker: Broker, namespace: str) -> None:
    """Tasks that are unsigned, forged, signed with an unknown key or
    changed after signing: the worker rejects and counts each without
    running it, and still runs the engine's genuine tasks (whose ring is a
    rotation ahead of its own)."""
    route = f"g@{namespace}"

    def task(x: int) -> bytes:
        return raw(valid_task(route=route, run_id=f"{namespace}.t{x}") | {"step": "add_one"})

    ran = len(RAN)
    async with (
        td.open_engine(signing_app, broker=broker, signing=ENGINE_RING, seed=2) as engine,
        td.open_worker(signing_app, broker=broker, groups=[route], signing=WORKER_RING) as worker,
    ):
        await broker.dispatch(
            [
                Outgoing(queue=route, body=body)
                for body in (
                    task(100),
                    sign(FORGER_RING, "task", task(101)),
                    sign(STRANGER_RING, "task", task(102)),
                    tampered(sign(ENGINE_RING, "task", task(103)), b'"input":[1]', b'"input":[2]'),
                    sign(ENGINE_RING, "result", task(104)),
                )
            ]
        )
        await wait_until(lambda: sum(rejections(worker.statistics())) >= 5)
        assert rejections(worker.statistics()) == (1, 3, 1, 0)
        assert unauthenticated(worker.metrics(), "task") == (1.0, 3.0, 1.0)
        run = await engine.start(use, 41, run_id=f"{namespace}.genuine", namespace=namespace)
        with trio.fail_after(PATIENCE):
            assert await engine.result(run.id) == 42
        # Only the genuine task ran: none of those published.
        assert RAN[ran:] == [41]
        assert worker.statistics().completed == 1
        assert rejections(engine.statistics()) == (0, 0, 0, 0)


async def a_stranger_worker_is_rejected(broker: Broker, namespace: str) -> None:
    """A worker whose ring shares no key with the engine's rejects its task
    (unknown key) without running it; once a worker of the fleet serves the
    route, the engine's redispatch (signed too) completes the step."""
    route = f"g@{namespace}"
    x = 23
    async with td.open_engine(
        signing_app, broker=broker, signing=ENGINE_RING, seed=3, remote_redispatch=(2.0, 5)
    ) as engine:
        ran = len(RAN)
        async with td.open_worker(
            signing_app, broker=broker, groups=[route], signing=STRANGER_RING
        ) as stranger:
            run = await engine.start(use, x, run_id=f"{namespace}.stranger", namespace=namespace)
            await wait_until(lambda: stranger.statistics().rejected_unknown_key >= 1)
            assert rejections(stranger.statistics()) == (0, 0, 1, 0)
            assert unauthenticated(stranger.metrics(), "task") == (None, None, 1.0)
        assert RAN[ran:] == []
        async with td.open_worker(signing_app, broker=broker, groups=[route], signing=WORKER_RING):
            with trio.fail_after(PATIENCE):
                assert await engine.result(run.id) == x + 1
        assert RAN[ran:] == [x]


async def remote_workflows_decide_signed(broker: Broker, namespace: str) -> None:
    """A remote workflow's decision tasks and results are signed: the run
    completes between an engine that knows the workflow by name only and a
    worker of the rotation."""
    async with (
        td.open_engine(engine_app, broker=broker, signing=ENGINE_RING, seed=4) as engine,
        td.open_worker(
            signing_app,
            broker=broker,
            groups=[f"deciders@{namespace}", f"g@{namespace}"],
            signing=WORKER_RING,
        ) as worker,
    ):
        run = await engine.start(
            decided_by_name, 5, run_id=f"{namespace}.decided", namespace=namespace
        )
        with trio.fail_after(PATIENCE):
            assert await engine.result(run.id) == 60
        assert rejections(engine.statistics()) == (0, 0, 0, 0)
        assert rejections(worker.statistics()) == (0, 0, 0, 0)
