"""The broker suite, second part: worker descriptors (announce, withdraw,
lookup by group, every field, time to live, and announcements that need no
heartbeat)."""

from __future__ import annotations

import math

import attrs
import trio

from ..._brokers._base import Broker, WorkerDescriptor, WorkerLoad, needs_heartbeat
from ._broker_factory import (
    EVENTUALLY,
    BrokerFactory,
    BrokerMaker,
    as_factory,
    descriptor,
    eventually,
    unique_name,
)
from ._outcomes import skip


async def check_announce_withdraw_and_lookup_by_group(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Announced descriptors are listed by instance id and found by group;
    announcing again replaces one; a withdrawn one is gone (withdrawing an
    unknown one is a no-op); `Broker.worker_groups` follows."""
    factory = as_factory(factory)
    queue = unique_name("announce")
    async with factory() as broker:
        # A shared server may hold other checks' workers: look only at ours.
        async def ours(group: str | None = None) -> list[str]:
            return [
                d.instance_id
                for d in await broker.worker_descriptors(group)
                if d.instance_id.startswith(queue)
            ]

        async def our_groups() -> list[str]:
            return [g for g in await broker.worker_groups() if g.startswith(queue)]

        payments, shipping, mail = f"{queue}.payments", f"{queue}.shipping", f"{queue}.mail"
        c = descriptor(f"{queue}.w-c", payments, mail)
        a = descriptor(f"{queue}.w-a", shipping)
        b = descriptor(f"{queue}.w-b", payments)
        try:
            for worker in (c, a, b):  # not in id order
                await broker.announce(worker, 60.0)
            await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], factory)
            assert await ours(payments) == [b.instance_id, c.instance_id]
            assert await ours(shipping) == [a.instance_id]
            assert await ours(mail) == [c.instance_id]
            assert await ours(f"{queue}.nobody") == []
            assert await our_groups() == sorted([mail, payments, shipping])
            assert await broker.worker_groups() == sorted(await broker.worker_groups())

            # Announcing again replaces the worker's descriptor.
            moved = attrs.evolve(c, groups=(shipping,), app_version="2")
            await broker.announce(moved, 60.0)
            await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], factory)
            await eventually(lambda: ours(shipping), [a.instance_id, c.instance_id], factory)
            assert [
                d
                for d in await broker.worker_descriptors(shipping)
                if d.instance_id == c.instance_id
            ] == [moved]
            assert await ours(payments) == [b.instance_id]
            assert await our_groups() == sorted([payments, shipping])

            await broker.withdraw(b.instance_id)
            await broker.withdraw(f"{queue}.never-announced")  # a no-op
            await eventually(ours, [a.instance_id, c.instance_id], factory)
            assert await ours(payments) == []
            assert await our_groups() == [shipping]
        finally:
            for worker in (a, b, c):
                await broker.withdraw(worker.instance_id)
        nobody: list[str] = []
        await eventually(ours, nobody, factory)
        assert await our_groups() == []


async def check_descriptors_round_trip_every_field(factory: BrokerFactory | BrokerMaker) -> None:
    """Every field of a descriptor (Unicode, nested dicts, None values, an
    exact float) comes back as announced."""
    factory = as_factory(factory)
    queue = unique_name("descriptor-fields")
    full = WorkerDescriptor(
        instance_id=f"{queue}.worker-1",
        app="shop-ü",
        app_version="2024.05.1",
        runtime={"python": "3.12.1", "trio": "0.35.0", "platform": "Linux-6.1 🐧"},
        groups=(f"{queue}.payments", f"{queue}.payments@acme"),
        steps={
            "charge": {"group": "payments", "requires": ["pci", "gpu"], "timeout": None},
            "refund": {
                "group": "payments",
                "requires": [],
                "retry": {"attempts": 5, "backoff": 1.5},
            },
        },
        workflows={
            "checkout": {
                "versions": ["1", "2"],
                "on_error": [{"code": "card_declined", "workflow": "refund"}],
            },
            "refund": {"versions": ["1"], "on_error": []},
        },
        capabilities=("gpu", "pci"),
        registration_hash="sha256:" + "ab" * 32,
        announced_at=1_700_000_123.25,
        held=True,
        load=WorkerLoad(
            in_flight=3, completed=1234, failed=5, completed_per_minute=61.5, window=60.25
        ),
    )
    async with factory() as broker:
        try:
            await broker.announce(full, 60.0)

            async def read() -> list[WorkerDescriptor]:
                return [
                    d
                    for d in await broker.worker_descriptors()
                    if d.instance_id == full.instance_id
                ]

            await eventually(read, [full], factory)
            assert await broker.worker_descriptors(f"{queue}.payments@acme") == [full]
        finally:
            await broker.withdraw(full.instance_id)


async def check_a_descriptor_is_forgotten_after_its_ttl(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """A descriptor is forgotten once its time to live
    (`BrokerFactory.short_ttl`) has passed, and not before; one with a
    longer time to live stays."""
    factory = as_factory(factory)
    queue = unique_name("descriptor-ttl")
    ttl = factory.short_ttl
    worker = descriptor(f"{queue}.w", f"{queue}.g")
    long_lived = descriptor(f"{queue}.z", f"{queue}.g")
    async with factory() as broker:

        async def ours() -> list[str]:
            return [
                d.instance_id
                for d in await broker.worker_descriptors()
                if d.instance_id.startswith(queue)
            ]

        try:
            await broker.announce(long_lived, 60.0)
            announced = trio.current_time()
            await broker.announce(worker, ttl)
            assert await ours() in (
                [worker.instance_id, long_lived.instance_id],
                [long_lived.instance_id],
            )
            await eventually(ours, [long_lived.instance_id], factory, patience=ttl + EVENTUALLY)
            assert trio.current_time() - announced >= ttl
            assert [g for g in await broker.worker_groups() if g.startswith(queue)] == [
                f"{queue}.g"
            ]
        finally:
            await broker.withdraw(worker.instance_id)
            await broker.withdraw(long_lived.instance_id)


async def check_an_announcement_without_heartbeat_lasts_until_withdrawn(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """On a broker whose announcements need no heartbeat
    (`Broker.needs_heartbeat` is False), one made with ``ttl=math.inf``
    stays, long after a time to live would have run out, until it is
    withdrawn; announced again with a time to live, it lapses then (what
    a worker's simulated crash does). Skipped for a broker that needs
    heartbeats (the default of one that does not say)."""
    factory = as_factory(factory)
    queue = unique_name("held")
    # Long after any time to live, as far as a check can wait: a day where
    # waiting costs nothing (Trio's clock, under the autojump clock).
    patience = 86_400.0 if factory.trio_clock else 10 * factory.short_ttl
    async with factory() as broker:
        heartbeats = needs_heartbeat(broker)
        if not heartbeats:
            await _held(broker, factory, queue, patience)
    # Skipped once the broker is closed: the factory's block may be a
    # nursery, which would wrap the skip in an exception group.
    if heartbeats:
        skip("the broker needs heartbeats (Broker.needs_heartbeat is not False)")


async def _held(broker: Broker, factory: BrokerFactory, queue: str, patience: float) -> None:
    held = descriptor(f"{queue}.held", f"{queue}.g")
    lapsing = descriptor(f"{queue}.lapsing", f"{queue}.g")
    ttl = factory.short_ttl

    async def ours() -> list[str]:
        return [
            d.instance_id
            for d in await broker.worker_descriptors()
            if d.instance_id.startswith(queue)
        ]

    nobody: list[str] = []
    try:
        await broker.announce(held, math.inf)
        await broker.announce(lapsing, ttl)
        await eventually(ours, [held.instance_id], factory, patience=ttl + EVENTUALLY)
        await trio.sleep(patience)
        assert await ours() == [held.instance_id]
        assert await broker.worker_descriptors(f"{queue}.g") == [held]

        # Announced again with a time to live: it lapses then.
        announced = trio.current_time()
        await broker.announce(held, ttl)
        await eventually(ours, nobody, factory, patience=ttl + EVENTUALLY)
        assert trio.current_time() - announced >= ttl

        # Held again, then withdrawn: gone at once.
        await broker.announce(held, math.inf)
        await eventually(ours, [held.instance_id], factory)
        await broker.withdraw(held.instance_id)
        await eventually(ours, nobody, factory)
    finally:
        await broker.withdraw(held.instance_id)
        await broker.withdraw(lapsing.instance_id)
