"""The broker suite, second part: worker descriptors (announce, withdraw,
lookup by group, every field, time to live)."""

from __future__ import annotations

import attrs
import trio

from ..._brokers._base import WorkerDescriptor
from ._broker_factory import (
    EVENTUALLY,
    BrokerFactory,
    BrokerMaker,
    as_factory,
    descriptor,
    eventually,
    unique_name,
)


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
