"""Store checks of keyed values: `PutValue`, `Store.get_value` and
`Store.list_values`."""

from __future__ import annotations

import trio

from ..._base._records import StoredValue
from ..._stores._base import Store, WriteConflict
from ..._stores._ops import CreateRun, PutCheckpoint, PutValue, UpdateRun
from ._store_support import (
    OpenStore,
    StoreCheck,
    StoreFactory,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
    two_handles,
)


def _value(key: str, value: str, version: int, at: float, scope: str = "s") -> StoredValue:
    return StoredValue(scope=scope, key=key, value=value, version=version, updated_at=at)


async def check_values_are_inserted_replaced_and_deleted(
    factory: StoreFactory | OpenStore,
) -> None:
    """`PutValue` inserts a value at version 1, adds 1 to its version at
    each write, and deletes it with ``value=None`` (result 0, also when
    nothing was there); a value inserted again starts at version 1. Scopes
    keep their keys apart."""
    async with fresh_store(factory) as store:
        assert await store.get_value("s", "k") is None
        assert await store.apply([PutValue("s", "k", '{"n": 1}', 1.0)]) == [1]
        assert await store.get_value("s", "k") == _value("k", '{"n": 1}', 1, 1.0)
        # Each op of a batch sees what the ones before it wrote.
        assert await store.apply(
            [PutValue("s", "k", '"b"', 2.0), PutValue("s", "k", '"c"', 3.0)]
        ) == [2, 3]
        assert await store.get_value("s", "k") == _value("k", '"c"', 3, 3.0)

        assert await store.apply([PutValue("other", "k", '"x"', 4.0)]) == [1]
        assert await store.get_value("other", "k") == _value("k", '"x"', 1, 4.0, "other")
        assert await store.get_value("s", "k") == _value("k", '"c"', 3, 3.0)

        assert await store.apply([PutValue("s", "k", None, 5.0)]) == [0]
        assert await store.get_value("s", "k") is None
        assert await store.apply([PutValue("s", "k", None, 6.0)]) == [0]
        assert await store.get_value("other", "k") == _value("k", '"x"', 1, 4.0, "other")
        assert await store.apply([PutValue("s", "k", '"again"', 7.0)]) == [1]
        assert await store.get_value("s", "k") == _value("k", '"again"', 1, 7.0)
        # A large value is kept whole.
        large = '"' + "x" * 200_000 + '"'
        assert await store.apply([PutValue("s", "large", large, 8.0)]) == [1]
        assert await store.get_value("s", "large") == _value("large", large, 1, 8.0)


async def check_value_writes_keep_their_expected_versions(
    factory: StoreFactory | OpenStore,
) -> None:
    """``expect_version=0`` writes only an absent value, ``n`` only a value
    at version n, for a write and for a delete. A failed expectation
    raises `WriteConflict` (``strict``) or skips the op (result None),
    and changes nothing."""
    async with fresh_store(factory) as store:
        assert await store.apply([PutValue("s", "k", '"a"', 1.0, expect_version=0)]) == [1]
        for expected in (0, 2, 7):
            with raises(WriteConflict):
                await store.apply([PutValue("s", "k", '"no"', 2.0, expect_version=expected)])
            assert await store.apply(
                [PutValue("s", "k", '"no"', 2.0, expect_version=expected, strict=False)]
            ) == [None]
            with raises(WriteConflict):
                await store.apply([PutValue("s", "k", None, 2.0, expect_version=expected)])
            assert await store.apply(
                [PutValue("s", "k", None, 2.0, expect_version=expected, strict=False)]
            ) == [None]
        assert await store.get_value("s", "k") == _value("k", '"a"', 1, 1.0)

        assert await store.apply([PutValue("s", "k", '"b"', 3.0, expect_version=1)]) == [2]
        assert await store.apply([PutValue("s", "k", '"c"', 4.0, expect_version=2)]) == [3]
        assert await store.get_value("s", "k") == _value("k", '"c"', 3, 4.0)
        assert await store.apply([PutValue("s", "k", None, 5.0, expect_version=3)]) == [0]
        assert await store.get_value("s", "k") is None

        # Absent: version 0 is what is expected of it, delete included.
        assert await store.apply([PutValue("s", "gone", None, 6.0, expect_version=0)]) == [0]
        for expected in (1, 3):
            assert await store.apply(
                [PutValue("s", "gone", '"x"', 6.0, expect_version=expected, strict=False)]
            ) == [None]
            with raises(WriteConflict):
                await store.apply([PutValue("s", "gone", None, 6.0, expect_version=expected)])
        assert await store.get_value("s", "gone") is None


async def check_a_failed_value_expectation_rolls_back_the_whole_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """A strict `PutValue` whose expectation fails rolls back every write of
    its batch, values and runs alike, as does any other failure of the
    batch; a skipped one (``strict=False``) lets the rest commit."""
    async with fresh_store(factory) as store:
        await store.apply([PutValue("s", "held", '"v1"', 1.0)])
        with raises(WriteConflict):
            await store.apply(
                [
                    CreateRun(make_run("r1")),
                    PutValue("s", "new", '"n"', 2.0),
                    PutValue("s", "held", '"v2"', 2.0),
                    PutCheckpoint(make_checkpoint("r1", 1)),
                    PutValue("s", "held", '"v3"', 2.0, expect_version=1),
                ]
            )
        assert await store.get_run("r1") is None
        assert await store.get_checkpoints("r1") == []
        assert await store.get_value("s", "new") is None
        assert await store.get_value("s", "held") == _value("held", '"v1"', 1, 1.0)

        # Another op's failure takes the values written before it back too.
        await store.create_run(make_run("r2"))
        with raises(WriteConflict):
            await store.apply(
                [
                    PutValue("s", "held", None, 3.0),
                    PutValue("s", "new", '"n"', 3.0),
                    UpdateRun("r2", {"status": "running"}, expect_status=frozenset({"completed"})),
                ]
            )
        assert await store.get_value("s", "held") == _value("held", '"v1"', 1, 1.0)
        assert await store.get_value("s", "new") is None

        assert await store.apply(
            [
                PutValue("s", "new", '"n"', 4.0),
                PutValue("s", "held", '"v3"', 4.0, expect_version=5, strict=False),
                UpdateRun("r2", {"status": "running"}),
            ]
        ) == [1, None, True]
        assert await store.get_value("s", "new") == _value("new", '"n"', 1, 4.0)
        assert await store.get_value("s", "held") == _value("held", '"v1"', 1, 1.0)
        run = await store.get_run("r2")
        assert run is not None
        assert run.status == "running"


# Keys in code point order (what `list_values` returns): ``%`` and ``_``
# are no wildcards, and a character past the BMP sorts after every one in it.
_KEYS = (
    "a",
    "a%",
    "ab",
    "ab_",
    "abc",
    "ab\u00e9",
    "ab\U0001f600",
    "ab\U0010ffff",
    "ac",
    "a\U0010ffff",
    "a\U0010ffffz",
    "b",
    "\u00e9",
    "\uffff",
    "\U0001f600",
)


async def check_values_are_listed_by_key(factory: StoreFactory | OpenStore) -> None:
    """`Store.list_values` lists one scope's values by key (code point by
    code point), those whose key starts with ``prefix``, after ``after``,
    at most ``limit``."""
    async with fresh_store(factory) as store:
        # Written out of order, with a neighbouring scope.
        await store.apply(
            [PutValue("s", key, f'"{i}"', float(i)) for i, key in reversed(list(enumerate(_KEYS)))]
        )
        await store.apply([PutValue("t", "a", '"t"', 0.0), PutValue("s-", "a", '"u"', 0.0)])

        def keys(values: list[StoredValue]) -> list[str]:
            assert all(value.scope == "s" for value in values)
            return [value.key for value in values]

        assert keys(await store.list_values("s")) == list(_KEYS)
        assert (await store.list_values("s"))[1] == _value("a%", '"1"', 1, 1.0)
        assert await store.list_values("missing") == []
        assert keys(await store.list_values("s", prefix="ab")) == [
            "ab",
            "ab_",
            "abc",
            "ab\u00e9",
            "ab\U0001f600",
            "ab\U0010ffff",
        ]
        assert keys(await store.list_values("s", prefix="a%")) == ["a%"]
        assert keys(await store.list_values("s", prefix="ab_")) == ["ab_"]
        assert keys(await store.list_values("s", prefix="a\U0010ffff")) == [
            "a\U0010ffff",
            "a\U0010ffffz",
        ]
        assert keys(await store.list_values("s", prefix="\U0001f600")) == ["\U0001f600"]
        assert keys(await store.list_values("s", prefix="abd")) == []
        assert keys(await store.list_values("s", after="ab\U0010ffff")) == list(_KEYS[8:])
        assert keys(await store.list_values("s", after="ab", limit=2)) == ["ab_", "abc"]
        assert keys(await store.list_values("s", prefix="ab", after="abc")) == [
            "ab\u00e9",
            "ab\U0001f600",
            "ab\U0010ffff",
        ]
        # ``after`` need not be a key, nor start with the prefix.
        assert keys(await store.list_values("s", prefix="ab", after="aa")) == keys(
            await store.list_values("s", prefix="ab")
        )
        assert keys(await store.list_values("s", prefix="ab", after="b")) == []
        assert keys(await store.list_values("s", limit=3)) == list(_KEYS[:3])
        assert await store.list_values("s", limit=0) == []

        # Paging with ``after`` visits every key once.
        seen: list[str] = []
        after: str | None = None
        # Counted: a store that ignores ``after`` would page for ever.
        for _ in range(len(_KEYS) + 1):
            page = await store.list_values("s", after=after, limit=4)
            if not page:
                break
            seen.extend(keys(page))
            after = page[-1].key
        assert seen == list(_KEYS)

        await store.apply([PutValue("s", "ab", None, 9.0), PutValue("s", "abc", '"new"', 9.0)])
        listed = await store.list_values("s", prefix="ab", limit=2)
        assert listed == [_value("ab_", '"3"', 1, 3.0), _value("abc", '"new"', 2, 9.0)]


async def check_values_outlive_pruned_runs(factory: StoreFactory | OpenStore) -> None:
    """`Store.prune_runs` leaves the values that go with no run alone,
    whatever their scope or key names."""
    async with fresh_store(factory) as store:
        await store.apply(
            [
                CreateRun(make_run("r1", status="completed", updated_at=1.0)),
                PutValue("s", "r1", '"kept"', 1.0),
                PutValue("r1", "r1", '"kept"', 1.0),
            ]
        )
        assert await store.prune_runs({"completed": 10.0}, 10) == ["r1"]
        assert await store.get_run("r1") is None
        assert await store.get_value("s", "r1") == _value("r1", '"kept"', 1, 1.0)
        assert await store.get_value("r1", "r1") == _value("r1", '"kept"', 1, 1.0, "r1")


async def check_values_go_with_their_runs(factory: StoreFactory | OpenStore) -> None:
    """A value written with ``run_id`` goes with that run: read back with
    it, kept by a write that names no run, handed over by one that names
    another, and deleted by `Store.prune_runs` with its run (in the same
    call), while the values of other runs and of none stay."""
    async with fresh_store(factory) as store:
        await store.apply(
            [
                CreateRun(make_run("r1", status="completed", updated_at=1.0)),
                CreateRun(make_run("r2", status="completed", updated_at=50.0)),
                PutValue("s", "a", '"a"', 1.0, run_id="r1"),
                PutValue("s", "b", '"b"', 1.0, run_id="r1"),
                PutValue("t", "c", '"c"', 1.0, run_id="r1"),
                PutValue("s", "handed", '"h"', 1.0, run_id="r1"),
                PutValue("s", "none", '"n"', 1.0),
            ]
        )
        assert await store.get_value("s", "a") == StoredValue(
            scope="s", key="a", value='"a"', version=1, updated_at=1.0, run_id="r1"
        )
        # Written again without a run: still r1's. Handed over: r2's, by
        # each kind of write.
        await store.apply(
            [
                PutValue("s", "a", '"a2"', 2.0),
                PutValue("s", "b", '"b2"', 2.0, expect_version=1),
                PutValue("s", "handed", '"h2"', 2.0, expect_version=1, run_id="r2"),
                PutValue("t", "c", '"c2"', 2.0, run_id="r2"),
                PutValue("t", "d", '"d"', 2.0, expect_version=0, run_id="r2"),
            ]
        )
        assert [(await store.get_value(*at)) for at in (("s", "a"), ("s", "handed"))] == [
            StoredValue(scope="s", key="a", value='"a2"', version=2, updated_at=2.0, run_id="r1"),
            StoredValue(
                scope="s", key="handed", value='"h2"', version=2, updated_at=2.0, run_id="r2"
            ),
        ]
        assert await store.prune_runs({"completed": 10.0}, 10) == ["r1"]
        assert await store.get_value("s", "a") is None
        assert await store.get_value("s", "b") is None
        assert [v.key for v in await store.list_values("s")] == ["handed", "none"]
        assert [v.key for v in await store.list_values("t")] == ["c", "d"]
        # A deleted value's run is forgotten with it: inserted again, it goes
        # with none.
        await store.apply([PutValue("s", "a", '"again"', 3.0)])
        again = await store.get_value("s", "a")
        assert again is not None
        assert again.run_id is None
        assert await store.prune_runs({"completed": 100.0}, 10) == ["r2"]
        assert [v.key for v in await store.list_values("s")] == ["a", "none"]
        assert await store.list_values("t") == []


async def check_prune_values_deletes_old_values_of_no_run(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.prune_values` deletes the values of one scope that go with no
    run and were last written before a time, oldest first, at most
    ``limit``, and says how many; values of a run, of other scopes, or
    written since stay."""
    async with fresh_store(factory) as store:
        await store.apply(
            [
                CreateRun(make_run("r1", status="running", updated_at=1.0)),
                PutValue("s", "k3", '"3"', 3.0),
                PutValue("s", "k1", '"1"', 1.0),
                PutValue("s", "k2", '"2"', 2.0),
                PutValue("s", "k9", '"9"', 9.0),
                PutValue("s", "mine", '"m"', 0.5, run_id="r1"),
                PutValue("other", "k1", '"1"', 1.0),
                PutValue("s-", "k1", '"1"', 1.0),
            ]
        )
        assert await store.prune_values("s", 5.0, 2) == 2
        assert [v.key for v in await store.list_values("s")] == ["k3", "k9", "mine"]
        # Rewritten, a value's age starts again.
        await store.apply([PutValue("s", "k3", '"3"', 8.0)])
        assert await store.prune_values("s", 5.0, 10) == 0
        assert await store.prune_values("s", 5.0, 0) == 0
        assert await store.prune_values("s", 10.0, 10) == 2
        assert [v.key for v in await store.list_values("s")] == ["mine"]
        assert [v.key for v in await store.list_values("other")] == ["k1"]
        assert [v.key for v in await store.list_values("s-")] == ["k1"]
        assert await store.prune_values("nothing here", 10.0, 10) == 0


async def check_versioned_writes_through_two_handles_never_lose_one(
    factory: StoreFactory | OpenStore,
) -> None:
    """Through two handles at once (as two engines write): of writes that
    all expect one version (or absence) exactly one wins, and a counter that
    each writer reads and writes back at the version it read ends at the
    sum."""
    async with two_handles(factory) as (first, second):
        wins: list[int] = []

        async def insert(store: Store, i: int) -> None:
            results = await store.apply(
                [PutValue("s", "once", str(i), float(i), expect_version=0, strict=False)]
            )
            if results == [1]:
                wins.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(insert, first if i % 2 else second, i)
        assert len(wins) == 1
        assert await first.get_value("s", "once") == _value("once", str(wins[0]), 1, float(wins[0]))

        async def add(store: Store, times: int) -> None:
            for _ in range(times):
                # Each try loses only to another writer's success, so 20
                # writes need at most 20 tries.
                for _ in range(4 * 5):
                    seen = await store.get_value("s", "count")
                    count = 0 if seen is None else int(seen.value)
                    expected = 0 if seen is None else seen.version
                    try:
                        await store.apply(
                            [PutValue("s", "count", str(count + 1), 1.0, expect_version=expected)]
                        )
                    except WriteConflict:
                        continue
                    break
                else:
                    raise AssertionError("a versioned write conflicted with no other to win")

        async with trio.open_nursery() as nursery:
            for i in range(4):
                nursery.start_soon(add, first if i % 2 else second, 5)
        counted = await second.get_value("s", "count")
        assert counted is not None
        assert (counted.value, counted.version) == ("20", 20)


async def check_value_reads_after_aclose_raise_closed_resource_error(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.get_value` and `Store.list_values` of a closed store raise
    `trio.ClosedResourceError`."""
    async with fresh_store(factory) as store:
        await store.aclose()
        with raises(trio.ClosedResourceError):
            await store.get_value("s", "k")
        with raises(trio.ClosedResourceError):
            await store.list_values("s")
        with raises(trio.ClosedResourceError):
            await store.apply([PutValue("s", "k", '"v"', 1.0)])


VALUES_CHECKS: tuple[StoreCheck, ...] = (
    check_values_are_inserted_replaced_and_deleted,
    check_value_writes_keep_their_expected_versions,
    check_a_failed_value_expectation_rolls_back_the_whole_batch,
    check_values_are_listed_by_key,
    check_values_outlive_pruned_runs,
    check_values_go_with_their_runs,
    check_prune_values_deletes_old_values_of_no_run,
    check_versioned_writes_through_two_handles_never_lose_one,
    check_value_reads_after_aclose_raise_closed_resource_error,
)
