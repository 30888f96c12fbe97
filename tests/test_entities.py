"""Keyed entities: registration, exclusive and shared handlers, state that
commits with an exclusive call's result (and exactly once across a failed
write or a killed engine), calls from workflows, engines and clients, bad
input, and 1,000 exclusive calls on one key from two engines on one SQLite
store."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._stores._ops import Op, PutValue, ReleaseRun

app = td.App("entities")
handler_runs: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    handler_runs.clear()


def ran(name: str) -> None:
    handler_runs[name] = handler_runs.get(name, 0) + 1


@app.entity("cart")
class Cart:
    def __init__(self) -> None:
        self.items: list[str] = []

    @td.exclusive
    async def add(self, item: str) -> int:
        ran("add")
        self.items.append(item)
        return len(self.items)

    @td.exclusive
    async def clear(self) -> list[str]:
        ran("clear")
        items, self.items = self.items, []
        return items

    @td.exclusive
    async def add_then_fail(self, item: str) -> None:
        self.items.append(item)
        raise td.FatalError("refused", code="refused", details={"item": item})

    @td.shared
    async def count(self) -> int:
        ran("count")
        return len(self.items)

    @td.shared
    async def items_now(self) -> list[str]:
        return list(self.items)


@attrs.define
class Balance:
    cents: int = 0
    history: list[int] = attrs.Factory(list)


@app.entity("account", key=int)
class Account:
    def __init__(self) -> None:
        self.balance = Balance()

    @td.exclusive
    async def deposit(self, cents: int) -> Balance:
        self.balance.cents += cents
        self.balance.history.append(cents)
        return self.balance

    @td.shared
    async def read(self) -> Balance:
        return self.balance


@app.entity("counter")
class Counter:
    def __init__(self) -> None:
        self.total = 0

    @td.exclusive
    async def add(self, n: int) -> int:
        self.total += n
        return self.total

    @td.shared
    async def get(self) -> int:
        return self.total


@app.workflow()
async def shopper(ctx: td.Context, cart: str) -> dict[str, Any]:
    first = await ctx.entity("cart", cart).add("apple")
    second = await ctx.entity("cart", cart).add("pear")
    count = await ctx.entity("cart", cart).count()
    await ctx.sleep(10)
    return {"first": first, "second": second, "count": count}


@app.workflow()
async def failing_shopper(ctx: td.Context, cart: str) -> str:
    try:
        await ctx.entity("cart", cart).add_then_fail("plum")
    except td.RunFailed as exc:
        return f"{exc.code}: {exc.message}"
    return "no failure"


@app.workflow()
async def bad_key_shopper(ctx: td.Context) -> int:
    cart: Any = 7
    result: int = await ctx.entity("cart", cart).add("x")
    return result


async def stored_state(store: td.Store, scope: str, key: str) -> tuple[Any, int] | None:
    value = await store.get_value(scope, key)
    if value is None:
        return None
    return json.loads(value.value), value.version


# -- registration ---------------------------------------------------------------


def test_registration_checks_the_class_and_its_handlers() -> None:
    other = td.App("other")

    with pytest.raises(td.RegistrationError, match="async def"):

        class Sync:
            @td.exclusive  # type: ignore[type-var]
            def add(self) -> None: ...

    class Unmarked:
        @td.exclusive
        async def add(self) -> None: ...

        async def forgotten(self) -> None: ...

    with pytest.raises(td.RegistrationError, match="'forgotten' must be marked"):
        other.entity("unmarked")(Unmarked)

    class NeedsArgs:
        def __init__(self, owner: str) -> None:
            self.owner = owner

        @td.shared
        async def who(self) -> str:
            return self.owner

    with pytest.raises(td.RegistrationError, match="constructible with no arguments"):
        other.entity("needs_args")(NeedsArgs)

    class Empty:
        pass

    with pytest.raises(td.RegistrationError, match="no handler"):
        other.entity("empty")(Empty)
    with pytest.raises(td.RegistrationError, match="key must be str or int"):
        other.entity("floaty", key=float)  # type: ignore[arg-type]
    with pytest.raises(td.RegistrationError, match="invalid"):
        other.entity("no:colons")
    with pytest.raises(td.RegistrationError, match="must be a class"):
        other.entity("fn")(len)  # type: ignore[arg-type]
    with pytest.raises(td.RegistrationError, match="already registered"):
        app.entity("cart")(Counter)
    # Nothing half-registered stays behind.
    with pytest.raises(td.UnknownEntityError):
        other.get_entity("unmarked")
    assert [wf.name for wf in other.workflows] == []


def test_the_class_stays_a_plain_class() -> None:
    cart = Cart()
    assert cart.items == []
    entity = app.get_entity("cart")
    assert entity.workflow.name == "entity:cart"
    assert sorted(entity.handlers) == ["add", "add_then_fail", "clear", "count", "items_now"]
    assert app.get_entity("account").key_type is int


# -- exclusive and shared calls from an engine ----------------------------------


async def test_an_exclusive_call_commits_the_state_with_its_result(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        cart = engine.entity("cart", "c1")
        assert await cart.add("apple") == 1
        assert await cart.add("pear") == 2
        assert await cart.count() == 2
        assert await cart.items_now() == ["apple", "pear"]
        assert await stored_state(engine.store, "entity:cart", "c1") == (
            {"items": ["apple", "pear"]},
            2,
        )
        # Each exclusive call is a run of the entity's workflow; its end
        # wrote the state.
        runs = await engine.store.list_runs()
        assert sorted((r.workflow, r.status) for r in runs) == [("entity:cart", "completed")] * 2
        # A shared call wrote nothing, and an exclusive one that leaves the
        # state as it was writes no new version.
        assert await cart.clear() == ["apple", "pear"]
        assert await cart.clear() == []
        assert await stored_state(engine.store, "entity:cart", "c1") == ({"items": []}, 3)
        # Keys are apart.
        assert await engine.entity("cart", "c2").count() == 0
        assert await stored_state(engine.store, "entity:cart", "c2") is None
    assert autojump_clock.current_time() == 0


async def test_attrs_state_and_int_keys_round_trip(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        account = engine.entity("account", 42)
        assert await account.deposit(150) == Balance(cents=150, history=[150])
        assert await account.deposit(-50) == Balance(cents=100, history=[150, -50])
        read = await account.read()
        assert isinstance(read, Balance)
        assert read == Balance(cents=100, history=[150, -50])
        assert await stored_state(engine.store, "entity:account", "42") == (
            {"balance": {"cents": 100, "history": [150, -50]}},
            2,
        )


async def test_a_failed_exclusive_handler_leaves_the_state(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        cart = engine.entity("cart", "c1")
        await cart.add("apple")
        with pytest.raises(td.RunFailed) as failed:
            await cart.add_then_fail("plum")
        assert (failed.value.code, failed.value.details) == ("refused", {"item": "plum"})
        assert await cart.items_now() == ["apple"]
        assert await stored_state(engine.store, "entity:cart", "c1") == ({"items": ["apple"]}, 1)


async def test_exclusive_calls_of_one_key_run_one_at_a_time_and_shared_ones_together(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    gate = trio.Event()
    inside = {"exclusive": 0, "shared": 0}
    most = {"exclusive": 0, "shared": 0}
    local = td.App("gated")

    @local.entity("slow")
    class Slow:
        def __init__(self) -> None:
            self.log: list[int] = []

        async def _enter(self, kind: str) -> None:
            inside[kind] += 1
            most[kind] = max(most[kind], inside[kind])
            await gate.wait()
            inside[kind] -= 1

        @td.exclusive
        async def write(self, n: int) -> list[int]:
            await self._enter("exclusive")
            self.log.append(n)
            return list(self.log)

        @td.shared
        async def peek(self) -> list[int]:
            await self._enter("shared")
            return list(self.log)

    results: dict[str, Any] = {}
    async with open_test_engine(local) as engine:
        slow = engine.entity("slow", "k")

        async def call(name: str, n: int | None) -> None:
            if n is None:
                results[name] = await slow.peek()
            else:
                results[name] = await slow.write(n)

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(call, f"w{n}", n)
                await trio.testing.wait_all_tasks_blocked()
            for n in range(3):
                nursery.start_soon(call, f"r{n}", None)
            await trio.testing.wait_all_tasks_blocked()
            # One exclusive call of the key is in its handler, the others
            # wait; the shared calls all read at once.
            assert inside == {"exclusive": 1, "shared": 3}
            gate.set()
    assert most == {"exclusive": 1, "shared": 3}
    # In start order, each on the state the one before left.
    assert [results[f"w{n}"] for n in range(5)] == [list(range(n + 1)) for n in range(5)]
    assert [results[f"r{n}"] for n in range(3)] == [[]] * 3


# -- calls from workflows and clients --------------------------------------------


async def test_a_workflow_calls_an_entity_and_replays_its_results(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.entity("cart", "w").add("kiwi")
        run = await engine.start(shopper, "w", run_id="shop")
        assert await run.result() == {"first": 2, "second": 3, "count": 3}
        assert autojump_clock.current_time() == 10
        # The body was replayed after each call and after the sleep, yet
        # each handler ran once per call.
        assert handler_runs == {"add": 3, "count": 1}
        cps = await engine.store.get_checkpoints("shop")
        assert [(cp.seq, cp.kind, cp.name, cp.child_id) for cp in cps] == [
            (1, "child", "entity:cart", "shop.child.1"),
            (2, "child", "entity:cart", "shop.child.2"),
            (3, "local", "entity:cart.count", None),
            (4, "timer", "sleep", None),
        ]
        assert json.loads(cps[2].output or "") == 3
        child = await engine.get("shop.child.1")
        assert (child.workflow, child.parent_id, child.status) == (
            "entity:cart",
            "shop",
            "completed",
        )
        assert await engine.entity("cart", "w").items_now() == ["kiwi", "apple", "pear"]


async def test_a_workflow_sees_an_exclusive_handlers_failure(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(failing_shopper, "f")
        assert await run.result() == "refused: refused"
        assert await engine.entity("cart", "f").items_now() == []


async def test_a_client_calls_entities_that_an_engine_runs(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with (
        td.open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store,
        open_test_engine(app, store=store),
        td.open_client(store, app=app) as client,
    ):
        cart = client.entity("cart", "c")
        assert await cart.add("fig") == 1
        assert await cart.add("date") == 2
        assert await cart.count() == 2
        # A call repeated with its call id is the same call.
        again = client.entity("cart", "c", call_id="once")
        assert await again.add("lime") == 3
        assert await again.add("lime") == 3
        assert await cart.items_now() == ["fig", "date", "lime"]
        assert await client.entity("account", 7).deposit(5) == Balance(5, [5])


# -- bad input -------------------------------------------------------------------


async def test_bad_calls_fail_before_anything_is_written(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with (
        open_test_engine(app) as engine,
        td.open_client(engine.store, app=app) as client,
        td.open_client(engine.store) as bare,
    ):
        for front in (engine, client):
            with pytest.raises(td.UnknownEntityError, match="no entity 'basket'"):
                front.entity("basket", "k")
            with pytest.raises(td.UnknownEntityError, match="no handler 'remove'"):
                front.entity("cart", "k").remove  # noqa: B018
            with pytest.raises(td.EntityKeyError, match="str keys, not int 7"):
                front.entity("cart", 7)
            with pytest.raises(td.EntityKeyError, match="int keys, not bool True"):
                front.entity("account", True)
            with pytest.raises(td.EntityKeyError, match="int keys, not str"):
                front.entity("account", "7")
            with pytest.raises(td.EntityKeyError, match="non-empty"):
                front.entity("cart", "")
            with pytest.raises(td.InvalidArgumentsError):
                await front.entity("cart", "k").add(1, 2)
            with pytest.raises(td.InvalidArgumentsError, match="does not fit str"):
                await front.entity("cart", "k").add(5)
        with pytest.raises(td.UnknownEntityError, match="through an app"):
            bare.entity("cart", "k")
        # An unknown key type is an EntityError, and a usage error.
        assert issubclass(td.EntityKeyError, td.EntityError)
        assert issubclass(td.EntityError, td.UsageError)
        assert await engine.store.list_runs() == []
        assert await engine.store.list_values("entity:cart") == []
        # From a workflow: the body fails at the call, which records nothing.
        run = await engine.start(bad_key_shopper, run_id="bad")
        with pytest.raises(td.RunFailed, match="str keys, not int 7"):
            await run.result()
        assert await engine.store.get_checkpoints("bad") == []
        assert [r.id for r in await engine.store.list_runs()] == ["bad"]


# -- exactly once across a failed write and a killed engine -----------------------


class FailingStore(td.MemoryStore):  # type: ignore[misc]  # final, but a test may wrap
    """A memory store whose first write of an entity's state fails: before
    it is applied (nothing changed), or after (it went through, but the
    engine is told it failed)."""

    def __init__(self, when: str) -> None:
        super().__init__()
        self.when = when
        self.failed = False

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if self.failed or not any(isinstance(op, PutValue) for op in ops):
            return await super().apply(ops)
        self.failed = True
        if self.when == "after":
            await super().apply(ops)
        raise td.StoreError(f"injected failure {self.when} the write")


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_failed_write_of_the_end_leaves_the_effect_once(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, when: str
) -> None:
    store = FailingStore(when)
    async with open_test_engine(app, store=store) as engine:
        cart = engine.entity("cart", "c")
        assert await cart.add("apple") == 1
        assert await cart.add("pear") == 2
        assert store.failed
        assert await stored_state(store, "entity:cart", "c") == ({"items": ["apple", "pear"]}, 2)
    # Failed before the write: the handler ran again on the old state.
    assert handler_runs == {"add": 3 if when == "before" else 2}


class KillingStore(td.MemoryStore):  # type: ignore[misc]
    """A memory store under which the engine ``doomed`` dies as it writes
    an entity's new state: nothing of that write is applied, and the dead
    engine gives back no lease."""

    def __init__(self) -> None:
        super().__init__()
        self.engine_scope = trio.CancelScope()
        self.killed = False

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if self.killed:
            ops = [op for op in ops if not (isinstance(op, ReleaseRun) and op.owner == "doomed")]
            return await super().apply(ops)
        if any(isinstance(op, PutValue) for op in ops):
            self.killed = True
            self.engine_scope.cancel()
            await trio.lowlevel.checkpoint()
            raise AssertionError("the killed engine went on")
        return await super().apply(ops)


async def test_an_engine_killed_before_the_commit_leaves_the_effect_once(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    store = KillingStore()
    with store.engine_scope:
        async with open_test_engine(app, store=store, engine_id="doomed", lease_ttl=30) as engine:
            await engine.entity("cart", "c", call_id="call-1").add("apple")
    assert store.killed
    assert handler_runs == {"add": 1}
    assert await stored_state(store, "entity:cart", "c") is None
    async with open_test_engine(app, store=store, engine_id="survivor", lease_ttl=30) as engine:
        # The call's run is taken over once the dead engine's lease lapses,
        # and its handler runs again on the state as it was.
        assert await engine.result("call-1") == 1
        assert autojump_clock.current_time() >= 30
        assert await engine.entity("cart", "c").add("pear") == 2
    assert handler_runs == {"add": 3}
    assert await stored_state(store, "entity:cart", "c") == ({"items": ["apple", "pear"]}, 2)


# -- 1,000 calls on one key from two engines on one SQLite store -------------------

CALLS = 1000


async def test_a_thousand_exclusive_calls_from_two_engines_leave_the_sum(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with td.open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        await thousand_calls(open_test_engine, (store, store), CALLS)


async def thousand_calls(
    open_test_engine: EngineFactory,
    stores: tuple[td.Store, td.Store],
    calls: int,
    **options: Any,
) -> dict[str, int]:
    """``calls`` exclusive add(1) calls on one key, started alternately from
    two engines on ``stores`` (one store, or two connections to one
    database): each returns a distinct running total, and the state holds
    their sum. ``options`` go to both engines. Returns how many calls each
    engine ended."""
    returned: list[int] = []
    ended: dict[str, int] = {}
    all_ended = trio.Event()
    async with (
        open_test_engine(app, store=stores[0], engine_id="a", seed=1, **options) as a,
        open_test_engine(app, store=stores[1], engine_id="b", seed=2, **options) as b,
    ):

        async def count_ends(engine: td.Engine, task_status: trio.TaskStatus[None]) -> None:
            with engine.subscribe(buffer=math.inf) as events:
                task_status.started()
                async for event in events:
                    if event.kind == "run.completed" and event.workflow == "entity:counter":
                        ended[engine.engine_id] = ended.get(engine.engine_id, 0) + 1
                        if sum(ended.values()) == calls:
                            all_ended.set()

        async def call(engine: td.Engine) -> None:
            returned.append(await engine.entity("counter", "k").add(1))

        async with trio.open_nursery() as watchers:
            await watchers.start(count_ends, a)
            await watchers.start(count_ends, b)
            async with trio.open_nursery() as nursery:
                for n in range(calls):
                    nursery.start_soon(call, a if n % 2 == 0 else b)
            # A caller may learn of its call's end (through the store) before
            # the engine that ended the run has emitted its event: wait for
            # every event rather than stop listening at the last return.
            with trio.move_on_after(60):
                await all_ended.wait()
            watchers.cancel_scope.cancel()
        assert await a.entity("counter", "k").get() == calls
        assert await b.entity("counter", "k").get() == calls
    assert sorted(returned) == list(range(1, calls + 1))
    assert sum(ended.values()) == calls
    value = await stores[0].get_value("entity:counter", "k")
    assert value is not None
    assert (json.loads(value.value), value.version) == ({"total": calls}, calls)
    return ended


gate = trio.Event()


@app.entity("gated_counter")
class GatedCounter:
    def __init__(self) -> None:
        self.total = 0

    @td.exclusive
    async def add(self, n: int) -> int:
        ran("gated")
        if self.total == 3:
            await gate.wait()
        self.total += n
        return self.total


async def test_calls_waiting_in_line_go_on_when_their_engine_leaves(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    global gate
    gate = trio.Event()
    async with td.open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        async with (
            open_test_engine(app, store=store, engine_id="leaving") as leaving,
            trio.open_nursery() as nursery,
        ):
            for n in range(10):
                ref = leaving.entity("gated_counter", "k", call_id=f"call-{n}")
                nursery.start_soon(ref.add, 1)
                await trio.testing.wait_all_tasks_blocked()
            # Three calls are done, the fourth holds the key, six wait in
            # line: the engine leaves (giving back its leases), and its
            # callers with it.
            assert handler_runs == {"gated": 4}
            nursery.cancel_scope.cancel()
        stored = await store.get_value("entity:gated_counter", "k")
        assert stored is not None
        assert (stored.value, stored.version) == ('{"total":3}', 3)
        gate.set()
        async with open_test_engine(app, store=store, engine_id="staying") as staying:
            totals = [await staying.result(f"call-{n}") for n in range(10)]
            assert await staying.entity("gated_counter", "k").add(0) == 10
    assert totals == list(range(1, 11))
    # The interrupted call ran its handler again, on the state as it was.
    assert handler_runs == {"gated": 12}


async def test_exclusive_calls_of_different_keys_run_at_once(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    release = trio.Event()
    inside: list[str] = []
    local = td.App("keys")

    @local.entity("slow")
    class Slow:
        def __init__(self) -> None:
            self.n = 0

        @td.exclusive
        async def bump(self, key: str) -> int:
            inside.append(key)
            await release.wait()
            self.n += 1
            return self.n

    async with open_test_engine(local) as engine, trio.open_nursery() as nursery:
        for key in ["x", "y", "x"]:
            nursery.start_soon(engine.entity("slow", key).bump, key)
            await trio.testing.wait_all_tasks_blocked()
        # One call of each key is in its handler; the second call of x waits.
        assert inside == ["x", "y"]
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert inside == ["x", "y", "x"]
        assert await engine.entity("slow", "x").bump("x") == 3
        assert await engine.entity("slow", "y").bump("y") == 2
