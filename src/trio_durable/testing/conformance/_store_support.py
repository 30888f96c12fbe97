"""What the store checks share: how they open stores, and what they write."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, Generic, TypeAlias, TypeVar, final

import attrs

from ..._base._records import Checkpoint, Run
from ..._stores._base import Store

OpenStore: TypeAlias = Callable[[], AbstractAsyncContextManager[Store]]
"""A zero-argument callable returning an async context manager that yields a
fresh, empty store and closes it on exit (as ``trio_durable.open_store`` does
with a URL bound)."""

OpenStorePair: TypeAlias = Callable[[], AbstractAsyncContextManager[tuple[Store, Store]]]
"""A zero-argument callable returning an async context manager that yields
two handles on one fresh, empty store, and closes both on exit."""


@final
@attrs.frozen
class StoreFactory:
    """How the conformance checks open stores of one kind.

    Every check takes either this or a plain `OpenStore`. The difference is
    the checks of a store shared by several engines
    (``check_handles_share_one_store``): with ``open_pair`` they use two
    handles, opened as two engine processes would open them; without it they
    use one store object twice, which is all a store kept in one process (as
    `trio_durable.MemoryStore`) can offer.

    Attributes:
      open: Opens a fresh, empty store (see `OpenStore`).
      open_pair: Opens two handles on one fresh, empty store (see
        `OpenStorePair`): for a file, two connections to one new file; for a
        server, two clients of one new database or schema.
    """

    open: OpenStore
    open_pair: OpenStorePair | None = None


StoreCheck: TypeAlias = Callable[[StoreFactory | OpenStore], Awaitable[None]]
"""One check of the suite: opens the stores it needs from the factory it is
given, and raises `AssertionError` if one misbehaves."""


def fresh_store(factory: StoreFactory | OpenStore) -> AbstractAsyncContextManager[Store]:
    """A fresh, empty store from ``factory``."""
    if isinstance(factory, StoreFactory):
        return factory.open()
    return factory()


@asynccontextmanager
async def two_handles(factory: StoreFactory | OpenStore) -> AsyncIterator[tuple[Store, Store]]:
    """Two handles on one fresh, empty store (one store twice if the factory
    has no ``open_pair``)."""
    if isinstance(factory, StoreFactory) and factory.open_pair is not None:
        async with factory.open_pair() as pair:
            yield pair
    else:
        async with fresh_store(factory) as store:
            yield store, store


def make_run(run_id: str = "r1", **fields: Any) -> Run:
    fields.setdefault("workflow", "checkout")
    return Run(id=run_id, **fields)


def make_checkpoint(run_id: str = "r1", seq: int = 1, **fields: Any) -> Checkpoint:
    fields.setdefault("name", f"step{seq}")
    fields.setdefault("kind", "local")
    return Checkpoint(run_id=run_id, seq=seq, **fields)


def counters(store: Store) -> tuple[int, int, int, int, int]:
    stats = store.statistics()
    return (
        stats.batches,
        stats.ops,
        stats.transactions,
        stats.run_rows_read,
        stats.checkpoint_rows_read,
    )


E = TypeVar("E", bound=BaseException)


@final
@attrs.define
class Caught(Generic[E]):
    """The exception a `raises` block raised, once it has."""

    _value: E | None = None

    @property
    def value(self) -> E:
        assert self._value is not None, "the block has not raised yet"
        return self._value


@contextmanager
def raises(expected: type[E]) -> Iterator[Caught[E]]:
    """Assert that the block raises ``expected`` (or a subclass of it).

    The suite's own `pytest.raises`, so that it does not need pytest.
    """
    caught: Caught[E] = Caught()
    try:
        yield caught
    except expected as exc:
        caught._value = exc
    else:
        raise AssertionError(f"expected {expected.__name__}, but nothing was raised")
