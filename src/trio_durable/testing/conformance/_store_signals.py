"""Store checks of signals: waiters, deliveries and buffered payloads."""

from __future__ import annotations

import attrs

from ..._stores._ops import DeliverSignal, RemoveSignalWaiter, WaitSignal
from ._store_support import (
    OpenStore,
    StoreFactory,
    fresh_store,
    make_checkpoint,
)

# -- signals ------------------------------------------------------------------------


async def check_wait_registers_a_waiter_and_delivery_settles_it(
    factory: StoreFactory | OpenStore,
) -> None:
    """`WaitSignal` registers a waiter, and `DeliverSignal` settles its checkpoint."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint(seq=2, kind="signal", name="approved")
        await store.save_checkpoint(pending)

        assert await store.add_signal_waiter("r1/approved", "r1", 2) is None
        assert await store.signal_waiter("r1/approved") == ("r1", 2)

        assert await store.deliver_signal("r1/approved", "true", at=8.0) == ("r1", 2)
        assert await store.signal_waiter("r1/approved") is None
        assert await store.buffered_signals("r1/approved") == []
        assert await store.get_checkpoints("r1") == [
            attrs.evolve(pending, status="completed", output="true", finished_at=8.0)
        ]


async def check_signals_without_a_waiter_are_buffered_in_order(
    factory: StoreFactory | OpenStore,
) -> None:
    """Signals without a waiter are buffered, and consumed oldest first."""
    async with fresh_store(factory) as store:
        await store.save_checkpoint(make_checkpoint(seq=1, kind="signal"))
        await store.save_checkpoint(make_checkpoint(seq=2, kind="signal"))

        assert await store.apply(
            [DeliverSignal("tok", '"one"'), DeliverSignal("tok", '"two"')]
        ) == [
            None,
            None,
        ]
        assert await store.deliver_signal("tok", '"three"') is None
        assert await store.deliver_signal("elsewhere", '"x"') is None
        assert await store.buffered_signals("tok") == ['"one"', '"two"', '"three"']

        # A wait consumes the oldest payload, settles its checkpoint, registers nothing.
        assert await store.apply([WaitSignal("tok", "r1", 1, at=4.0)]) == ['"one"']
        assert await store.add_signal_waiter("tok", "r1", 2) == '"two"'
        assert await store.signal_waiter("tok") is None
        assert await store.buffered_signals("tok") == ['"three"']
        assert await store.buffered_signals("elsewhere") == ['"x"']
        assert await store.buffered_signals("never") == []
        first, second = await store.get_checkpoints("r1")
        assert (first.status, first.output, first.finished_at) == ("completed", '"one"', 4.0)
        assert (second.status, second.output, second.finished_at) == ("completed", '"two"', None)


async def check_delivery_to_a_settled_waiter_is_buffered(factory: StoreFactory | OpenStore) -> None:
    """A signal for a waiter whose checkpoint settled is buffered."""
    async with fresh_store(factory) as store:
        # The wait timed out: its checkpoint settled before the signal arrived.
        timed_out = make_checkpoint(seq=1, kind="signal", status="failed")
        await store.save_checkpoint(timed_out)
        await store.add_signal_waiter("tok", "r1", 1)
        # A waiter whose checkpoint is gone altogether.
        await store.add_signal_waiter("gone", "r1", 7)

        assert await store.deliver_signal("tok", '"late"') is None
        assert await store.deliver_signal("gone", '"late too"') is None
        assert await store.signal_waiter("tok") is None
        assert await store.signal_waiter("gone") is None
        assert await store.buffered_signals("tok") == ['"late"']
        assert await store.buffered_signals("gone") == ['"late too"']
        assert await store.get_checkpoints("r1") == [timed_out]


async def check_remove_signal_waiter(factory: StoreFactory | OpenStore) -> None:
    """`RemoveSignalWaiter` removes the waiter of its token alone."""
    async with fresh_store(factory) as store:
        await store.save_checkpoint(make_checkpoint(kind="signal"))
        await store.add_signal_waiter("tok", "r1", 1)
        await store.add_signal_waiter("keep", "r1", 1)

        await store.remove_signal_waiter("tok")
        assert await store.apply([RemoveSignalWaiter("never-registered")]) == [None]
        assert await store.signal_waiter("tok") is None
        assert await store.signal_waiter("keep") == ("r1", 1)
        assert await store.deliver_signal("tok", '"x"') is None
        assert await store.buffered_signals("tok") == ['"x"']


async def check_a_new_waiter_replaces_the_old_one(factory: StoreFactory | OpenStore) -> None:
    """A new waiter on a token replaces the old one."""
    async with fresh_store(factory) as store:
        await store.add_signal_waiter("tok", "r1", 1)
        await store.add_signal_waiter("tok", "r1", 5)
        assert await store.signal_waiter("tok") == ("r1", 5)


SIGNALS_CHECKS = (
    check_wait_registers_a_waiter_and_delivery_settles_it,
    check_signals_without_a_waiter_are_buffered_in_order,
    check_delivery_to_a_settled_waiter_is_buffered,
    check_remove_signal_waiter,
    check_a_new_waiter_replaces_the_old_one,
)
