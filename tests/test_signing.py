"""Message signing (docs/message-signing.md): the envelope, and engines and
workers with ``signing=`` over the memory broker. The same scenarios run
over RabbitMQ and NATS in tests/integration/test_signing_brokers.py."""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from signed_fleet import (
    ENGINE_RING,
    K1,
    K2,
    STRANGER_RING,
    WORKER_RING,
    a_stranger_worker_is_rejected,
    forged_results_settle_nothing,
    remote_workflows_decide_signed,
    signing_app,
    unsigned_tasks_never_run,
    use,
)
from trio_durable._wire._messages import Result, Task
from trio_durable._wire._payload import PAYLOAD_TOO_LARGE, result_message, task_message
from trio_durable._wire._signing import (
    SIGNATURE_OVERHEAD,
    TAG,
    SignatureRejected,
    open_signed,
    sign,
)
from trio_durable.brokers import Consumer, Outgoing, WorkerDescriptor

BODY = b'{"v":1,"run_id":"r"}'


def reason(ring: td.Keyring | None, role: Any, message: Any) -> str:
    with pytest.raises(SignatureRejected) as caught:
        open_signed(ring, role, message)
    return caught.value.reason


# -- the envelope ----------------------------------------------------------------------


def test_a_signed_message_opens_under_every_key_of_the_ring() -> None:
    signed = sign(WORKER_RING, "task", BODY)
    assert signed.startswith(TAG + b"k1 ")
    assert len(signed) - len(BODY) <= SIGNATURE_OVERHEAD
    assert open_signed(ENGINE_RING, "task", signed) == BODY
    assert open_signed(td.Keyring.single(K1), "task", signed) == BODY
    assert open_signed(ENGINE_RING, "task", sign(ENGINE_RING, "task", BODY)) == BODY
    # Signing is deterministic: the same body, key and role, the same bytes.
    assert sign(WORKER_RING, "task", BODY) == signed


def test_what_is_not_signed_by_the_ring_is_rejected_with_its_reason() -> None:
    signed = sign(WORKER_RING, "result", BODY)
    assert reason(ENGINE_RING, "result", BODY) == "unsigned"
    assert reason(ENGINE_RING, "result", b"") == "unsigned"
    assert reason(STRANGER_RING, "result", signed) == "unknown_key"
    # Another role, another key under the same id, a changed body or MAC.
    assert reason(ENGINE_RING, "task", signed) == "forged"
    assert reason(td.Keyring.single(K2, "k1"), "result", signed) == "forged"
    assert reason(ENGINE_RING, "result", signed + b" ") == "forged"
    mac_start = len(TAG) + len(b"k1 ")
    flipped = b"A" if signed[mac_start : mac_start + 1] != b"A" else b"B"
    assert (
        reason(ENGINE_RING, "result", signed[:mac_start] + flipped + signed[mac_start + 1 :])
        == "forged"
    )
    # A malformed header: no newline, a short MAC, a bad key id.
    assert reason(ENGINE_RING, "result", TAG + b"k1 abc\n" + BODY) == "forged"
    assert reason(ENGINE_RING, "result", signed.replace(b"\n", b" ")) == "forged"
    assert reason(ENGINE_RING, "result", signed.replace(b"k1", b"k!", 1)) == "forged"
    assert reason(ENGINE_RING, "result", "text") == "forged"


def test_verifying_is_total() -> None:
    # Whatever bytes arrive, only SignatureRejected comes out (or a body).
    rng = random.Random(18)
    signed = sign(WORKER_RING, "task", BODY)
    reasons: set[str] = set()
    for _ in range(3000):
        cut = rng.randrange(len(signed) + 1)
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
        message = rng.choice([signed[:cut] + noise + signed[cut:], TAG + noise, noise])
        try:
            body = open_signed(ENGINE_RING, "task", message)
        except SignatureRejected as exc:
            reasons.add(exc.reason)
        else:
            assert message == signed
            assert body == BODY
    assert reasons == {"unsigned", "forged", "unknown_key"}


def test_without_a_ring_a_signed_message_is_read_unchecked() -> None:
    # A process without signing= accepts unsigned messages anyway; it reads
    # a signer's too, so signing can be rolled out one side first.
    assert open_signed(None, "task", sign(STRANGER_RING, "task", BODY)) == BODY
    assert open_signed(None, "task", BODY) == BODY
    assert sign(None, "task", BODY) == BODY
    # A broken header is left for the decoder to reject.
    assert open_signed(None, "task", TAG + b"junk") == TAG + b"junk"


def test_the_signature_counts_toward_the_brokers_limit() -> None:
    text = '["' + "x" * 1000 + '"]'
    task = Task(run_id="r", seq=1, attempt=1, step="s", workflow="w", route="g", input=text)
    size = len(task.encode())
    assert task_message(task, "g", size, 0.0) is not None
    standin = task_message(task, "g", size, 0.0, ENGINE_RING)
    # Too large once signed: a failure goes back in its place, signed too.
    assert standin is not None
    assert standin.queue == task.reply_to
    failure = Result.decode(open_signed(ENGINE_RING, "result", standin.body))
    assert failure.code == PAYLOAD_TOO_LARGE
    result = Result(
        run_id="r", seq=1, attempt=1, step="s", workflow="w", status="completed", output="2"
    )
    message = result_message(result, "results", None, WORKER_RING)
    assert message is not None
    assert Result.decode(open_signed(ENGINE_RING, "result", message.body)) == result


async def test_signing_takes_a_keyring() -> None:
    with pytest.raises(td.UsageError, match=r"signing takes a td\.Keyring or None, not bytes"):
        async with td.open_engine(signing_app, signing=K1):  # type: ignore[arg-type]
            pass  # pragma: no cover
    with pytest.raises(td.UsageError, match=r"signing takes a td\.Keyring or None, not str"):
        async with td.open_worker(
            signing_app,
            groups=["g"],
            signing="k1:" + "A" * 24,  # type: ignore[arg-type]
        ):
            pass  # pragma: no cover


# -- engines and workers over the memory broker -------------------------------------


async def test_a_forged_result_is_rejected_counted_and_settles_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await forged_results_settle_nothing(td.MemoryBroker(), "mem")


async def test_an_unsigned_task_is_rejected_counted_and_never_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await unsigned_tasks_never_run(td.MemoryBroker(), "mem")


async def test_a_worker_with_no_key_of_the_ring_is_rejected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await a_stranger_worker_is_rejected(td.MemoryBroker(), "mem")


async def test_a_remote_workflows_decisions_are_signed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await remote_workflows_decide_signed(td.MemoryBroker(), "mem")


async def test_an_unsigning_worker_gets_nothing_settled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A worker without signing= reads the signed task (unchecked), but the
    # engine rejects its unsigned result: the step waits for a signed one.
    broker = td.MemoryBroker()
    async with (
        td.open_engine(signing_app, broker=broker, signing=ENGINE_RING) as engine,
        td.open_worker(signing_app, broker=broker, groups=["g"]) as plain,
    ):
        run = await engine.start(use, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert plain.statistics().completed == 1
        assert engine.statistics().rejected_unsigned == 1
        [step] = [cp for cp in await engine.store.get_checkpoints(run.id) if cp.seq == 1]
        assert step.status == "pending"


class SigningWitness:
    """A memory broker that checks every message sent through it: each is
    signed by a key of ``ring``, in the role its queue says."""

    def __init__(self, ring: td.Keyring, inner: td.MemoryBroker) -> None:
        self.ring = ring
        self.inner = inner
        self.tasks = 0
        self.results = 0

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        for message in messages:
            if message.queue.startswith(td.brokers.RESULTS):
                Result.decode(open_signed(self.ring, "result", message.body))
                self.results += 1
            else:
                Task.decode(open_signed(self.ring, "task", message.body))
                self.tasks += 1
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


handoff_app = td.App("signing-handoff")


@handoff_app.step(group="g")
async def shout(text: str) -> str:
    if text == "lost":
        # Never answers: the engine's redispatch sends the task again.
        await trio.sleep_forever()
    if text == "refuse":
        raise td.FatalError("refused", code="refused")
    return text.upper()


@handoff_app.workflow(group="deciders")
async def remote_handler(ctx: td.Context, failure: dict[str, Any]) -> str:
    return await ctx.step(shout, "handled")


@handoff_app.workflow(on_error=[td.OnError("refused", workflow="remote_handler")])
async def shouting(ctx: td.Context, text: str) -> str:
    return await ctx.step(shout, text)


async def test_everything_a_fleet_publishes_is_signed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Tasks and results of remote steps, a remote workflow's decisions (the
    # on-error handler), redispatched tasks, and the failure standing in for
    # a task too large to send: the witness checks each is signed.
    witness = SigningWitness(td.Keyring.single(K1), td.MemoryBroker(max_payload=4000))
    ring = td.Keyring.single(K1)
    async with (
        td.open_engine(
            handoff_app, broker=witness, signing=ring, remote_redispatch=(5.0, 1)
        ) as engine,
        td.open_worker(handoff_app, broker=witness, groups=["g", "deciders"], signing=ring),
    ):
        assert await engine.result((await engine.start(shouting, "hi")).id) == "HI"
        # Handed off: the remote handler's result is the run's.
        refused = await engine.start(shouting, "refuse")
        assert await engine.result(refused.id) == "HANDLED"
        lost = await engine.start(shouting, "lost")
        with pytest.raises(td.RunFailed, match="no result after 2 dispatches"):
            await engine.result(lost.id)
        big = await engine.start(shouting, "x" * 5000)
        with pytest.raises(td.RunFailed, match="max_payload"):
            await engine.result(big.id)
        assert engine.statistics().rejected_unsigned == 0
    assert witness.tasks >= 6
    assert witness.results >= 5
