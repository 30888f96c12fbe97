"""Queries, updates and published values (docs/queries-and-updates.md):
a query answers from the run's replayed state and writes nothing, an update
is validated, stored, applied in the run's next turn, replayed identically
and answered, and ``get_event`` waits for what ``ctx.set_event`` published.
On the memory store and on SQLite (two engines on one file, and a client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

app = td.App("handlers")

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@app.step()
async def record(note: str) -> str:
    ran.append(note)
    return note


def positive(amount: int) -> None:
    if amount <= 0:
        raise td.FatalError("the amount must be positive", code="not_positive")


@app.workflow()
async def cart(ctx: td.Context, owner: str) -> dict[str, Any]:
    items: list[int] = []
    state = {"stage": "open"}

    @ctx.query("total")
    def total() -> int:
        return sum(items)

    @ctx.query("stage")
    def stage() -> str:
        return state["stage"]

    @ctx.query("items_over")
    def items_over(limit: int) -> list[int]:
        return [item for item in items if item > limit]

    @ctx.update("add", validator=positive)
    def add(amount: int) -> int:
        items.append(amount)
        return sum(items)

    @ctx.update("explode")
    def explode() -> None:
        items.append(1000)
        raise ValueError("boom")

    await ctx.step(record, f"opened by {owner}")
    ctx.set_event("stage", "open")
    await ctx.wait_signal("checkout")
    state["stage"] = "checked out"
    await ctx.set_event("stage", "checked out")
    await ctx.step(record, f"charged {sum(items)}")
    ctx.set_event("charged", sum(items))
    await ctx.sleep(60)
    return {"items": items, "total": sum(items)}


def stores(tmp_path: Path) -> list[str]:
    return ["memory://", f"sqlite:///{tmp_path / 'handlers.db'}"]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'handlers.db'}"


@asynccontextmanager
async def engine_on(url: str | td.Store, seed: int = 0, **kwargs: Any) -> AsyncIterator[td.Engine]:
    async with td.open_engine(app, store=url, seed=seed, wall_clock=fixed_wall, **kwargs) as e:
        yield e


async def test_query_update_and_events(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "ann", run_id="c")
        await engine.drain()
        assert await engine.query("c", "total") == 0
        assert await engine.get_event("c", "stage") == "open"
        assert await engine.update("c", "add", 5) == 5
        assert await engine.update("c", "add", 7) == 12
        assert await engine.query("c", "total") == 12
        assert await engine.query("c", "items_over", 6) == [7]
        # A query writes nothing, and runs no step.
        assert ran == ["opened by ann"]
        await engine.signal("c", "checkout")
        await engine.drain()
        assert await engine.get_event("c", "stage") == "checked out"
        assert await engine.query("c", "stage") == "checked out"
        assert await engine.result("c") == {"items": [5, 7], "total": 12}
        assert ran == ["opened by ann", "charged 12"]


async def test_bad_updates_and_queries_write_nothing(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "bo", run_id="c")
        await engine.drain()
        with pytest.raises(td.UpdateRejected) as rejected:
            await engine.update("c", "add", -3)
        assert rejected.value.code == "not_positive"
        assert rejected.value.message == "the amount must be positive"
        with pytest.raises(td.UnknownHandlerError):
            await engine.update("c", "remove", 1)
        with pytest.raises(td.UnknownHandlerError):
            await engine.query("c", "missing")
        with pytest.raises(td.InvalidArgumentsError):
            await engine.update("c", "add", 1, 2)
        with pytest.raises(td.InvalidArgumentsError):
            await engine.query("c", "total", 1)
        with pytest.raises(td.RunNotFoundError):
            await engine.query("nope", "total")
        with pytest.raises(td.RunNotFoundError):
            await engine.update("c", "add", 1, namespace="other")
        with pytest.raises(td.UsageError):
            await engine.update("c", "add", 1, update_id="bad id with spaces")
        with pytest.raises(td.UsageError):
            await engine.get_event("c", "stage", timeout=-1)
        with pytest.raises(td.UsageError):
            await engine.get_event("c", "")
        assert await engine.store.list_values("update:c") == []
        assert await engine.query("c", "total") == 0


async def test_a_failing_handler_fails_its_update_and_is_replayed(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "cy", run_id="c")
        await engine.drain()
        with pytest.raises(td.UpdateFailed) as failed:
            await engine.update("c", "explode")
        assert failed.value.message == "boom"
        # What it changed before it raised stays changed, on every replay.
        assert await engine.query("c", "total") == 1000
        assert await engine.update("c", "add", 1) == 1001
        await engine.signal("c", "checkout")
        assert await engine.result("c") == {"items": [1000, 1], "total": 1001}


async def test_an_update_is_answered_once_per_id(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "di", run_id="c")
        await engine.drain()
        assert await engine.update("c", "add", 2, update_id="u1") == 2
        assert await engine.update("c", "add", 2, update_id="u1") == 2
        assert await engine.update("c", "add", 3, update_id="u2") == 5
        assert await engine.query("c", "total") == 5


async def test_an_ended_run_answers_queries_and_takes_no_updates(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "ed", run_id="c")
        await engine.drain()
        await engine.update("c", "add", 4)
        await engine.signal("c", "checkout")
        await engine.result("c")
        assert await engine.query("c", "total") == 4
        assert await engine.query("c", "stage") == "checked out"
        with pytest.raises(td.InvalidRunStateError):
            await engine.update("c", "add", 1)
        # Never published, and the run ended: None at once.
        start = trio.current_time()
        assert await engine.get_event("c", "never") is None
        assert trio.current_time() == start


async def test_update_and_get_event_wait_for_the_turn_without_polling(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url, result_poll_interval=10_000.0) as engine:
        await engine.start(cart, "fa", run_id="c")
        await engine.drain()
        start = trio.current_time()
        assert await engine.get_event("c", "late", timeout=30) is None
        assert trio.current_time() == start + 30
        got: list[Any] = []

        async def wait_stage() -> None:
            got.append(await engine.get_event("c", "stage", type=str))

        async with trio.open_nursery() as nursery:
            await engine.update("c", "add", 1)
            assert trio.current_time() == start + 30
            await engine.signal("c", "checkout")
            nursery.start_soon(wait_stage)
        assert got in (["open"], ["checked out"])
        await engine.drain()
        assert await engine.get_event("c", "stage") == "checked out"
        assert trio.current_time() == start + 30


@app.workflow()
async def counter(ctx: td.Context) -> int:
    count = [0]

    @ctx.update("bump")
    def bump() -> int:
        count[0] += 1
        return count[0]

    @ctx.query("count")
    def current() -> int:
        return count[0]

    while count[0] < 3:
        ctx.set_event("count", count[0])
        await ctx.sleep(3600)
    await ctx.set_event("count", count[0])
    return count[0]


async def test_updates_apply_where_the_body_waits_and_replay_identically(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(counter, run_id="k")
        await engine.drain()
        assert await engine.update("k", "bump") == 1
        assert await engine.update("k", "bump") == 2
        # The body sees them when its sleep returns, as it did when the
        # updates were applied.
        await trio.sleep(3600)
        await engine.drain()
        assert await engine.get_event("k", "count") == 2
        assert await engine.update("k", "bump") == 3
        await trio.sleep(3600)
        assert await engine.result("k") == 3
        assert await engine.get_event("k", "count") == 3
        assert await engine.query("k", "count") == 3


@app.workflow()
async def badly_registered(ctx: td.Context) -> list[str]:
    caught: list[str] = []

    not_a_function: Any = 42
    for register in (
        lambda: ctx.query("q")(not_a_function),
        lambda: ctx.update("")(lambda: None),
    ):
        try:
            register()
        except td.UsageError as exc:
            caught.append(type(exc).__name__)
    try:
        ctx.set_event("", 1)
    except td.UsageError as exc:
        caught.append(type(exc).__name__)
    return caught


async def test_bad_registrations_raise_usage_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with engine_on("memory://") as engine:
        await engine.start(badly_registered, run_id="b")
        assert await engine.result("b") == ["UsageError"] * 3


async def test_two_engines_and_a_client_on_one_sqlite_file(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with (
        engine_on(url, seed=1) as holder,
        engine_on(url, seed=2) as other,
        td.open_client(url, app=app, wall_clock=fixed_wall) as client,
        td.open_client(url, wall_clock=fixed_wall) as bare,
    ):
        await holder.start(cart, "fi", run_id="c")
        await holder.drain()
        # The other engine, and the client, answer by replaying the run.
        assert await other.query("c", "total") == 0
        assert await other.update("c", "add", 2) == 2
        assert await client.update("c", "add", 3) == 5
        assert await client.query("c", "items_over", 2) == [3]
        assert await client.get_event("c", "stage") == "open"
        assert await bare.get_event("c", "stage") == "open"
        with pytest.raises(td.UsageError, match="app"):
            await bare.query("c", "total")
        with pytest.raises(td.UpdateRejected):
            await client.update("c", "add", 0)
        got: list[Any] = []

        async def wait_for_the_charge() -> None:
            got.append(await bare.get_event("c", "charged"))
            got.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_the_charge)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            signalled = trio.current_time()
            await client.signal("c", "checkout")
        assert got == [5, signalled]
        assert await client.result("c") == {"items": [2, 3], "total": 5}
        assert ran == ["opened by fi", "charged 5"]


async def test_a_client_on_a_shared_memory_store(autojump_clock: trio.testing.MockClock) -> None:
    store = td.MemoryStore()
    async with (
        engine_on(store) as engine,
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        await client.start(cart, "mo", run_id="c")
        assert await client.get_event("c", "stage") == "open"
        start = trio.current_time()
        assert await client.update("c", "add", 9) == 9
        assert await client.query("c", "total") == 9
        assert await client.get_event("c", "charged", timeout=5) is None
        assert trio.current_time() == start + 5
        await client.signal("c", "checkout")
        assert await client.get_event("c", "charged") == 9
        await trio.sleep(60)
        assert await client.result("c") == {"items": [9], "total": 9}
        assert await engine.query("c", "stage") == "checked out"


gate = {"open": trio.Event()}


@app.step()
async def wait_at_the_gate() -> str:
    await gate["open"].wait()
    return "through"


@app.workflow()
async def gated(ctx: td.Context) -> list[str]:
    notes: list[str] = []

    @ctx.update("note")
    def note(text: str) -> int:
        notes.append(text)
        return len(notes)

    @ctx.query("notes")
    def read() -> list[str]:
        return notes

    await ctx.step(wait_at_the_gate)
    await ctx.wait_signal("finish")
    return notes


async def test_an_update_sent_during_another_engines_turn_is_applied_where_it_waits(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    gate["open"] = trio.Event()
    url = f"sqlite:///{tmp_path / 'gated.db'}"
    async with engine_on(url, seed=1) as holder, engine_on(url, seed=2) as other:
        await holder.start(gated, run_id="g")
        await trio.testing.wait_all_tasks_blocked()
        run = await other.get("g")
        assert (run.status, run.lease_owner) == ("running", holder.engine_id)
        answers: list[Any] = []

        async def send() -> None:
            answers.append(await other.update("g", "note", "hello"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.testing.wait_all_tasks_blocked()
            # Accepted, but the body of the holder's turn is in its step.
            assert answers == []
            [waiting] = await other.store.list_values("update:g", prefix="inbox/")
            assert waiting.key.startswith("inbox/update-")
            gate["open"].set()
        assert answers == [1]
        assert await other.store.list_values("update:g", prefix="inbox/") == []
        assert await other.query("g", "notes") == ["hello"]
        await other.signal("g", "finish")
        assert await holder.result("g") == ["hello"]


registered = {"on": True}


@app.workflow()
async def changing(ctx: td.Context) -> None:
    if registered["on"]:

        @ctx.update("set")
        def set_it() -> None:
            pass

    @ctx.query("ping")
    def ping() -> str:
        return "pong"

    await ctx.wait_signal("never")


async def test_a_logged_update_without_its_handler_is_nondeterminism(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    registered["on"] = True
    async with engine_on(store_url) as engine:
        await engine.start(changing, run_id="x")
        await engine.drain()
        await engine.update("x", "set")
        assert await engine.query("x", "ping") == "pong"
        registered["on"] = False
        try:
            with pytest.raises(td.NonDeterminismError):
                await engine.query("x", "ping")
        finally:
            registered["on"] = True


@app.workflow()
async def hooked(ctx: td.Context) -> str:
    token = await ctx.webhook("callback")
    ctx.set_event("token", token)

    @ctx.query("token")
    def read() -> str:
        return token

    return str(await ctx.wait_signal("callback"))


async def test_a_query_replays_a_webhook_without_writing(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(hooked, run_id="h")
        await engine.drain()
        token = await engine.get_event("h", "token")
        assert isinstance(token, str)
        placeholder = await engine.query("h", "token")
        assert isinstance(placeholder, str)
        assert placeholder != token
        await engine.deliver_webhook(token, "called")
        assert await engine.result("h") == "called"


@app.workflow()
async def async_handlers(ctx: td.Context) -> int:
    seen = [0]

    @ctx.query("seen")
    async def read() -> int:
        return seen[0]

    @ctx.update("add")
    async def add(n: int) -> int:
        seen[0] += n
        return seen[0]

    @ctx.update("publish")
    async def publish() -> None:
        await ctx.set_event("from-a-handler", 1)

    @ctx.update("nap")
    async def nap() -> None:
        await trio.sleep(1)

    await ctx.wait_signal("go")
    await ctx.step(record, f"saw {seen[0]}")
    return seen[0]


async def test_async_handlers_run_if_they_never_wait(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(async_handlers, run_id="a")
        await engine.drain()
        assert await engine.update("a", "add", 2) == 2
        with pytest.raises(td.UpdateFailed, match="cannot run durable operations"):
            await engine.update("a", "publish")
        with pytest.raises(td.UpdateFailed, match="cannot wait"):
            await engine.update("a", "nap")
        assert await engine.query("a", "seen") == 2
        assert await engine.update("a", "add", 3) == 5
        await engine.signal("a", "go")
        # The handlers that failed took no seq: the body's step is at seq 2.
        assert await engine.result("a") == 5
        assert ran == ["saw 5"]
        [step] = [cp for cp in await engine.store.get_checkpoints("a") if cp.kind == "local"]
        assert step.seq == 2


workers = td.App("handler-workers")


@workers.workflow(group="deciders")
async def remote_publisher(ctx: td.Context) -> str:
    ctx.set_event("k", 1)
    return "published"


service = td.App("handler-service")
service.remote_workflow("remote_publisher", group="deciders")


async def test_a_remote_workflow_publishes_events_and_its_workers_answer_queries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        await engine.start("remote_publisher", run_id="w")
        assert await engine.result("w") == "published"
        assert await engine.get_event("w", "k", timeout=0) == 1
        # The body registered no query: the worker that replayed it says so.
        with pytest.raises(td.UnknownHandlerError, match="no query handler 'anything'"):
            await engine.query("w", "anything")


@app.workflow()
async def single_slot(ctx: td.Context) -> list[str]:
    taken: list[str] = []

    def free(who: str) -> None:
        if taken:
            raise td.FatalError(f"taken by {taken[0]}", code="taken")

    @ctx.update("take", validator=free)
    def take(who: str) -> str:
        taken.append(who)
        return who

    await ctx.step(wait_at_the_gate)
    await ctx.wait_signal("finish")
    return taken


async def test_the_validator_runs_again_when_the_update_is_applied(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    gate["open"] = trio.Event()
    async with engine_on(store_url) as engine:
        await engine.start(single_slot, run_id="s")
        await trio.testing.wait_all_tasks_blocked()
        outcomes: dict[str, Any] = {}

        async def take(who: str) -> None:
            try:
                outcomes[who] = await engine.update("s", "take", who, update_id=who)
            except td.UpdateRejected as exc:
                outcomes[who] = exc.code

        async with trio.open_nursery() as nursery:
            nursery.start_soon(take, "ann")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(take, "bob")
            await trio.testing.wait_all_tasks_blocked()
            # Both accepted: the body, in its step, has taken nobody yet.
            assert len(await engine.store.list_values("update:s", prefix="inbox/")) == 2
            gate["open"].set()
        assert outcomes == {"ann": "ann", "bob": "taken"}
        await engine.signal("s", "finish")
        assert await engine.result("s") == ["ann"]
