"""Search attributes: declared per app and recorded in the store, set at
start and by ``ctx.upsert_search_attributes`` (durable: a replay writes
nothing), checked before anything is written, and filtering ``list_runs``,
on the memory and SQLite stores."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from trio_durable._features.search._search_attributes import SCOPE, stored_types
from trio_durable._stores._ops import Op, PutValue, UpdateRun

DUE = datetime.datetime(2026, 12, 4, 9, 30, tzinfo=datetime.UTC)

app = td.App("search")
app.search_attribute("customer", str)
app.search_attribute("amount", int)
app.search_attribute("score", float)
app.search_attribute("vip", bool)
app.search_attribute("due", datetime.datetime)
app.search_attribute("labels", list[str])
app.search_attribute("stage", str)


@app.step()
async def charge(amount: int) -> int:
    return amount


@app.workflow()
async def order(ctx: td.Context, amount: int) -> int:
    ctx.upsert_search_attributes({"stage": "charging", "score": 0.5})
    await ctx.step(charge, amount)
    await ctx.sleep(60)
    ctx.upsert_search_attributes({"stage": "shipped", "labels": ["paid", "shipped"]})
    ctx.upsert_search_attributes({"customer": None})
    await ctx.sleep(60)
    return amount


@app.workflow()
async def careless(ctx: td.Context) -> str:
    try:
        ctx.upsert_search_attributes({"amount": "ten"})
    except td.SearchAttributeError as exc:
        caught = str(exc)
    ctx.upsert_search_attributes({"stage": "after"})
    return caught


@app.workflow()
async def looping(ctx: td.Context, n: int) -> int:
    if n == 0:
        ctx.upsert_search_attributes({"stage": "first"})
        ctx.continue_as_new(1)
    return n


@app.workflow()
async def parent(ctx: td.Context, bad: bool) -> str:
    if bad:
        try:
            await ctx.start_child(careless, search_attributes={"vip": "yes"})
        except td.SearchAttributeError as exc:
            return str(exc)
    return await ctx.start_child(careless, search_attributes={"customer": "kid", "vip": False})


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[td.Store]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'search.db'}"
    async with td.open_store(url) as opened:
        yield opened


def _recording(store: td.Store) -> list[Op]:
    """Every op ``store`` applies from now on, in order."""
    applied: list[Op] = []
    apply = store.apply

    async def recorded(ops: Sequence[Op]) -> list[Any]:
        applied.extend(ops)
        return await apply(ops)

    store.apply = recorded  # type: ignore[method-assign]
    return applied


async def test_attributes_set_at_start_and_upserted_once_each(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    applied = _recording(store)
    async with open_test_engine(app, store=store) as engine:
        handle = await engine.start(
            order,
            30,
            run_id="o1",
            search_attributes={
                "customer": "acme",
                "amount": 30,
                "vip": True,
                "due": DUE,
                "labels": ["new", "new", "eu"],
            },
        )
        assert dict(handle.search_attributes) == {
            "amount": 30,
            "customer": "acme",
            "due": DUE,
            "labels": ("new", "eu"),
            "vip": True,
        }
        await trio.sleep(30)
        during = await engine.get("o1")
        assert during.search_attributes["stage"] == "charging"
        assert during.search_attributes["score"] == 0.5
        assert (await engine.list_runs(search_attributes={"stage": "charging"})).runs == (during,)
        assert await handle.result() == 30
        run = await engine.get("o1")
    assert dict(run.search_attributes) == {
        "amount": 30,
        "due": DUE,
        "labels": ("paid", "shipped"),
        "score": 0.5,
        "stage": "shipped",
        "vip": True,
    }
    # Three turns replayed the first upsert, two the next ones: each was
    # written once, in the write of the turn that first reached it.
    writes = [
        op.changes["search_attributes"]
        for op in applied
        if isinstance(op, UpdateRun) and "search_attributes" in op.changes
    ]
    assert [w.get("stage") for w in writes] == ["charging", "shipped", "shipped"]
    assert await stored_types(store) == {
        "amount": "int",
        "customer": "str",
        "due": "datetime",
        "labels": "keywords",
        "score": "float",
        "stage": "str",
        "vip": "bool",
    }


async def test_upserts_are_in_the_history_and_replay_of_a_retried_run_writes_nothing(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        handle = await engine.start(order, 5, run_id="o2")
        assert await handle.result() == 5
        history = await engine.history("o2")
    upserts = [
        (entry.seq, entry.kind, entry.status)
        for entry in history.entries
        if entry.name == "search_attributes:upsert"
    ]
    assert upserts == [
        (1, "local", "completed"),
        (4, "local", "completed"),
        (5, "local", "completed"),
    ]


async def test_a_bad_upsert_raises_in_the_body_and_records_nothing(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        message = await (await engine.start(careless, run_id="c1")).result()
        run = await engine.get("c1")
        history = await engine.history("c1")
    assert message == "search attribute 'amount' takes an int, not 'ten'"
    assert dict(run.search_attributes) == {"stage": "after"}
    # The bad upsert took no seq: the good one is the first operation.
    assert [(entry.seq, entry.name) for entry in history.entries] == [
        (1, "search_attributes:upsert")
    ]


async def test_a_continued_run_keeps_its_attributes(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        handle = await engine.start(looping, 0, run_id="l", search_attributes={"vip": True})
        assert await handle.result() == 1
        latest = await engine.get("l.gen.2")
    assert dict(latest.search_attributes) == {"stage": "first", "vip": True}


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"nope": 1}, "search attribute 'nope' is not declared"),
        ({"bad name": 1}, "a search attribute's name is 1 to 64 letters"),
        ({"customer": 5}, "search attribute 'customer' takes a str, not 5"),
        ({"customer": "x" * 501}, "a string is at most 500 characters"),
        ({"amount": True}, "search attribute 'amount' takes an int, not True"),
        ({"amount": 2**63}, "does not fit in 64 bits"),
        ({"amount": 1.5}, "takes an int, not 1.5"),
        ({"score": float("nan")}, "takes a finite float"),
        ({"score": "1"}, "takes a float"),
        ({"vip": 1}, "takes a bool, not 1"),
        ({"due": datetime.datetime(2026, 1, 1)}, "takes an aware datetime"),
        ({"due": "2026-01-01T00:00:00Z"}, "takes an aware datetime"),
        ({"labels": "paid"}, "takes a list of strings"),
        ({"labels": ["ok", 3]}, "takes a list of strings"),
        ({"customer": None}, "takes a str, not None"),
        (["customer"], "a mapping of names to values"),
    ],
)
async def test_bad_start_attributes_raise_before_anything_is_written(
    store: td.Store, open_test_engine: EngineFactory, attributes: Any, message: str
) -> None:
    async with open_test_engine(app, store=store) as engine:
        with pytest.raises(td.SearchAttributeError, match=message):
            await engine.start(order, 1, run_id="bad", search_attributes=attributes)
        assert await store.get_run("bad") is None
    assert issubclass(td.SearchAttributeError, td.UsageError)


def test_declarations_are_checked() -> None:
    local = td.App("declarations")
    local.search_attribute("n", int)
    local.search_attribute("n", int)
    with pytest.raises(td.SearchAttributeError, match="is declared as int in app"):
        local.search_attribute("n", str)
    for bad_type in (dict, list, list[int], "text", None):
        with pytest.raises(td.SearchAttributeError, match="a search attribute's type is"):
            local.search_attribute("m", bad_type)
    with pytest.raises(td.SearchAttributeError, match="name"):
        local.search_attribute("1x", str)
    assert local.search_attributes == {"n": "int"}


async def test_an_engine_refuses_a_declaration_the_store_records_otherwise(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store):
        pass
    other = td.App("other")
    other.search_attribute("amount", str)
    with pytest.raises(td.SearchAttributeError, match="the store records it as int"):
        async with open_test_engine(other, store=store):
            pass
    # A store's record is kept as first written.
    [record] = [v for v in await store.list_values(SCOPE) if v.key == "amount"]
    assert record.value == '{"type":"int"}'


async def test_a_client_without_the_app_starts_with_the_types_the_store_records(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store):
        pass
    async with td.open_client(store, wall_clock=fixed_wall) as client:
        handle = await client.start("order", 7, run_id="c7", search_attributes={"amount": 7})
        assert dict(handle.search_attributes) == {"amount": 7}
        with pytest.raises(td.SearchAttributeError, match="takes an int"):
            await client.start("order", 8, run_id="c8", search_attributes={"amount": "8"})
        with pytest.raises(td.SearchAttributeError, match="'region' is not declared"):
            await client.start("order", 8, run_id="c8", search_attributes={"region": "eu"})
        assert await store.get_run("c8") is None
        page = await client.list_runs(search_attributes={"amount": td.SearchRange(ge=7)})
        assert [run.id for run in page.runs] == ["c7"]


async def test_a_client_app_records_its_new_declarations_with_its_start(
    store: td.Store,
) -> None:
    own = td.App("own")
    own.search_attribute("region", str)

    @own.workflow()
    async def regional(ctx: td.Context) -> None:
        pass

    async with td.open_client(store, app=own, wall_clock=fixed_wall) as client:
        await client.start(regional, run_id="g1", search_attributes={"region": "eu"})
        assert await stored_types(store) == {"region": "str"}
        page = await client.list_runs(search_attributes={"region": "eu"})
        assert [run.id for run in page.runs] == ["g1"]


async def test_list_runs_filters(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        for i in range(4):
            await engine.start(
                careless,
                run_id=f"f{i}",
                search_attributes={
                    "amount": i * 10,
                    "score": i / 2,
                    "due": DUE + datetime.timedelta(hours=i),
                    "labels": ["all", f"n{i}"],
                    "vip": i % 2 == 0,
                },
            )
            await trio.sleep(1)
        await engine.drain()

        async def ids(**filters: Any) -> list[str]:
            page = await engine.list_runs(search_attributes=filters)
            return [run.id for run in page.runs]

        assert await ids(amount=20) == ["f2"]
        assert await ids(amount=td.SearchRange(ge=10, lt=30)) == ["f2", "f1"]
        assert await ids(score=td.SearchRange(gt=0.5)) == ["f3", "f2"]
        assert await ids(due=td.SearchRange(le=DUE + datetime.timedelta(hours=1))) == ["f1", "f0"]
        assert await ids(labels="n3") == ["f3"]
        assert await ids(labels="all", vip=True) == ["f2", "f0"]
        assert await ids(stage="after", amount=td.SearchRange(gt=0)) == ["f3", "f2", "f1"]
        assert await ids(score=1) == ["f2"]  # an int for a float attribute
        page = await engine.list_runs(
            search_attributes={"labels": "all"}, limit=2, facets=True, status="completed"
        )
        assert [run.id for run in page.runs] == ["f3", "f2"]
        assert page.facets == {"completed": 4}
        assert page.next_cursor is not None
        rest = await engine.list_runs(
            search_attributes={"labels": "all"}, cursor=page.next_cursor, status="completed"
        )
        assert [run.id for run in rest.runs] == ["f1", "f0"]

        bad_filters: list[tuple[dict[str, Any], str]] = [
            ({"nope": 1}, "no search attribute 'nope' is declared in the store"),
            ({"amount": "1"}, "takes an int"),
            ({"stage": td.SearchRange(ge="a")}, "ranges apply to int, float and datetime"),
            ({"amount": td.SearchRange()}, "has no bound"),
            ({"labels": ["all"]}, "a keyword"),
            ({"due": td.SearchRange(gt=datetime.datetime(2026, 1, 1))}, "aware datetime"),
        ]
        for filters, message in bad_filters:
            with pytest.raises(td.SearchAttributeError, match=message):
                await engine.list_runs(search_attributes=filters)
        with pytest.raises(td.SearchAttributeError, match="a mapping"):
            await engine.list_runs(search_attributes=["amount"])  # type: ignore[arg-type]


async def test_an_empty_store_filters_nothing_and_refuses_names(store: td.Store) -> None:
    async with td.open_client(store, wall_clock=fixed_wall) as client:
        assert (await client.list_runs(search_attributes={})).runs == ()
        with pytest.raises(td.SearchAttributeError, match="declared in the store"):
            await client.list_runs(search_attributes={"amount": 1})
    # What another process recorded counts as declared.
    await store.apply([PutValue(SCOPE, "amount", '{"type":"int"}', 1.0)])
    async with td.open_client(store, wall_clock=fixed_wall) as client:
        assert (await client.list_runs(search_attributes={"amount": 1})).runs == ()


async def test_start_child_sets_the_child_s_attributes(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        child_id = await (await engine.start(parent, False, run_id="p")).result()
        message = await (await engine.start(parent, True, run_id="q")).result()
        await engine.drain()
        child = await engine.get(child_id)
        history = await engine.history("q")
        found = await engine.list_runs(search_attributes={"customer": "kid"})
    assert child_id == "p.child.1"
    assert dict(child.search_attributes) == {"customer": "kid", "stage": "after", "vip": False}
    assert [run.id for run in found.runs] == ["p.child.1"]
    assert message == "search attribute 'vip' takes a bool, not 'yes'"
    assert history.entries == ()


async def test_a_fork_keeps_the_attributes_of_the_original(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store) as engine:
        handle = await engine.start(order, 5, run_id="f1", search_attributes={"customer": "acme"})
        assert await handle.result() == 5
        fork = await engine.fork("f1", from_seq=1, new_run_id="f1-again")
        assert await engine.result(fork.id) == 5
        forked = await engine.get("f1-again")
        assert forked.search_attributes["stage"] == "shipped"
        page = await engine.list_runs(search_attributes={"stage": "shipped"})
        assert {run.id for run in page.runs} == {"f1", "f1-again"}


async def test_attributes_stay_searchable_under_a_codec(
    store: td.Store, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    codec = td.AesGcmCodec(td.Keyring.single(bytes(range(32))))
    async with open_test_engine(app, store=store, codec=codec) as engine:
        await engine.start(order, 7, run_id="c1", search_attributes={"customer": "acme"})
        await engine.start(order, 8, run_id="c2", search_attributes={"customer": "other"})
        await trio.sleep(1)  # both wait in their first sleep, "acme" still set
        page = await engine.list_runs(search_attributes={"customer": "acme"})
        assert [run.id for run in page.runs] == ["c1"]
        assert (await engine.get("c1")).input != (await store.get_run("c1")).input  # type: ignore[union-attr]
