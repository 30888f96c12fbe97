"""Store checks of runs' search attributes: kept with the run, changed by
`UpdateRun`, and filtered by `Store.find_runs` and `Store.count_runs`
(`RunFilter.search`)."""

from __future__ import annotations

import datetime
from typing import Any

from ..._base._records import RunFilter
from ..._base._search_values import SearchAttributeType, SearchRange, conditions
from ..._stores._ops import CreateRun, UpdateRun
from ._store_support import OpenStore, StoreCheck, StoreFactory, fresh_store, make_run

_TYPES: dict[str, SearchAttributeType] = {
    "customer": "str",
    "amount": "int",
    "score": "float",
    "vip": "bool",
    "due": "datetime",
    "labels": "keywords",
}
_DAY0 = datetime.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=datetime.UTC)


def _where(filters: dict[str, Any], **fields: Any) -> RunFilter:
    return RunFilter(search=conditions(filters, _TYPES), **fields)


def _attributes(i: int) -> dict[str, Any]:
    return {
        "customer": ["acme", "beta", 'o\'neil "ü"'][i % 3],
        "amount": [-(2**63), 0, 7, 2**63 - 1, 40, 7][i],
        "score": i / 4,
        "vip": i % 2 == 1,
        "due": _DAY0 + datetime.timedelta(days=i),
        "labels": ("all", f"n{i}") if i != 5 else (),
    }


async def check_search_attributes_are_kept_and_replaced(
    factory: StoreFactory | OpenStore,
) -> None:
    """A run keeps its search attributes exactly (datetimes to the
    microsecond, in UTC; keywords as a tuple; int64's extremes); an
    `UpdateRun` of ``search_attributes`` replaces them all, and ``{}``
    removes them."""
    async with fresh_store(factory) as store:
        for i in range(6):
            attributes = {k: v for k, v in _attributes(i).items() if v != ()}
            run = make_run(f"r{i}", created_at=float(i), search_attributes=attributes)
            assert await store.apply([CreateRun(run)]) == [(run, True)]
            assert await store.get_run(f"r{i}") == run
        plain = make_run("plain", created_at=9.0)
        await store.apply([CreateRun(plain)])
        stored = await store.get_run("plain")
        assert stored == plain
        assert stored is not None
        assert dict(stored.search_attributes) == {}

        await store.apply([UpdateRun("r1", {"search_attributes": {"customer": "zed"}})])
        updated = await store.get_run("r1")
        assert updated is not None
        assert dict(updated.search_attributes) == {"customer": "zed"}
        await store.apply([UpdateRun("r2", {"search_attributes": {}})])
        cleared = await store.get_run("r2")
        assert cleared is not None
        assert dict(cleared.search_attributes) == {}
        listed = {run.id: dict(run.search_attributes) for run in await store.list_runs()}
        assert listed["r1"] == {"customer": "zed"}
        assert listed["r3"]["due"] == _DAY0 + datetime.timedelta(days=3)
        assert listed["r3"]["amount"] == 2**63 - 1
        assert listed["r0"]["amount"] == -(2**63)
        assert listed["r3"]["labels"] == ("all", "n3")
        assert listed["r4"]["score"] == 1.0
        assert isinstance(listed["r4"]["score"], float)


async def check_find_runs_filters_by_search_attributes(
    factory: StoreFactory | OpenStore,
) -> None:
    """`RunFilter.search`: equality of each type, a keyword held by a list,
    ranges of ints, floats and datetimes; with the other filters, the
    cursor and `Store.count_runs`; newest first. A run's new attributes
    replace its old ones in the index, and a deleted run leaves it."""
    async with fresh_store(factory) as store:
        for i in range(6):
            attributes = {k: v for k, v in _attributes(i).items() if v != ()}
            status = "completed" if i < 3 else "pending"
            tags = ("t",) if i % 2 == 0 else ()
            run = make_run(
                f"r{i}",
                created_at=float(i),
                updated_at=float(i),
                status=status,
                tags=tags,
                search_attributes=attributes,
            )
            await store.apply([CreateRun(run)])
        await store.apply([CreateRun(make_run("plain", created_at=9.0))])

        async def ids(filters: dict[str, Any], **fields: Any) -> list[str]:
            return [run.id for run in await store.find_runs(_where(filters, **fields))]

        assert await ids({"customer": "acme"}) == ["r3", "r0"]
        assert await ids({"customer": 'o\'neil "ü"'}) == ["r5", "r2"]
        assert await ids({"amount": 7}) == ["r5", "r2"]
        assert await ids({"amount": -(2**63)}) == ["r0"]
        assert await ids({"score": 0.5}) == ["r2"]
        assert await ids({"vip": True}) == ["r5", "r3", "r1"]
        assert await ids({"vip": False}) == ["r4", "r2", "r0"]
        assert await ids({"due": _DAY0 + datetime.timedelta(days=4)}) == ["r4"]
        assert await ids({"labels": "all"}) == ["r4", "r3", "r2", "r1", "r0"]
        assert await ids({"labels": "n1"}) == ["r1"]
        assert await ids({"labels": "acme"}) == []
        assert await ids({"customer": "nobody"}) == []

        assert await ids({"amount": SearchRange(gt=0)}) == ["r5", "r4", "r3", "r2"]
        assert await ids({"amount": SearchRange(ge=0, lt=40)}) == ["r5", "r2", "r1"]
        assert await ids({"amount": SearchRange(le=0)}) == ["r1", "r0"]
        assert await ids({"score": SearchRange(gt=0.25, le=1.0)}) == ["r4", "r3", "r2"]
        assert await ids({"due": SearchRange(ge=_DAY0 + datetime.timedelta(days=4))}) == [
            "r5",
            "r4",
        ]
        assert await ids({"due": SearchRange(lt=_DAY0 + datetime.timedelta(microseconds=1))}) == [
            "r0"
        ]

        # With each other and with the other filters.
        assert await ids({"customer": "acme", "vip": True}) == ["r3"]
        assert await ids({"labels": "all", "amount": SearchRange(ge=7)}) == ["r4", "r3", "r2"]
        assert await ids({"labels": "all"}, statuses=frozenset({"completed"})) == [
            "r2",
            "r1",
            "r0",
        ]
        assert await ids({"labels": "all"}, tags=("t",)) == ["r4", "r2", "r0"]
        assert await ids({"amount": SearchRange(ge=0)}, tags=("t",)) == ["r4", "r2"]
        assert await ids({"labels": "all"}, created_after=1.0, created_before=4.0) == [
            "r3",
            "r2",
            "r1",
        ]
        assert await ids({"amount": 7}, workflow="checkout", namespace="default") == ["r5", "r2"]
        # Pages by the cursor.
        first = await store.find_runs(_where({"labels": "all"}), limit=2)
        assert [run.id for run in first] == ["r4", "r3"]
        after = (first[-1].created_at, first[-1].id)
        rest = await store.find_runs(_where({"labels": "all"}), before=after, limit=2)
        assert [run.id for run in rest] == ["r2", "r1"]
        ranged = await store.find_runs(_where({"amount": SearchRange(ge=0)}), before=(4.0, "r4"))
        assert [run.id for run in ranged] == ["r3", "r2", "r1"]
        # Counted per status.
        assert await store.count_runs(_where({"labels": "all"})) == {"completed": 3, "pending": 2}
        assert await store.count_runs(_where({"vip": True, "amount": SearchRange(lt=10)})) == {
            "completed": 1,
            "pending": 1,
        }

        # New values replace the old ones in the index.
        await store.apply(
            [UpdateRun("r0", {"search_attributes": {"customer": "zed", "labels": ("n9",)}})]
        )
        assert await ids({"customer": "acme"}) == ["r3"]
        assert await ids({"customer": "zed"}) == ["r0"]
        assert await ids({"labels": "all"}) == ["r4", "r3", "r2", "r1"]
        assert await ids({"labels": "n9"}) == ["r0"]
        assert await ids({"amount": SearchRange(le=0)}) == ["r1"]
        # A pruned run leaves the index.
        assert await store.prune_runs({"completed": 100.0}, 10) == ["r0", "r1", "r2"]
        assert await ids({"labels": "all"}) == ["r4", "r3"]
        assert await ids({"customer": "zed"}) == []


SEARCH_CHECKS: tuple[StoreCheck, ...] = (
    check_search_attributes_are_kept_and_replaced,
    check_find_runs_filters_by_search_attributes,
)
