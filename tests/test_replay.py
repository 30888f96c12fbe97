"""Replay: seqs, recorded results, non-determinism and typed results."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("replay")

calls: Counter[str] = Counter()
"""How often each step function really ran."""

seen: list[Any] = []
"""What bodies observed, turn after turn."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    seen.clear()
    yield
    calls.clear()
    seen.clear()


def tracking_wall() -> float:
    """A wall clock that moves with Trio's clock, so engines opened at
    different virtual times agree on durable time."""
    return WALL_START + trio.current_time()


@attrs.define(frozen=True)
class Order:
    sku: str
    quantity: int


@attrs.define(frozen=True)
class Receipt:
    order: Order
    total: int
    lines: list[str]


@app.step()
async def first(x: int) -> int:
    calls["first"] += 1
    return x + 1


@app.step()
async def second(x: int) -> int:
    calls["second"] += 1
    return x * 10


@app.step()
async def price(order: Order) -> Receipt:
    calls["price"] += 1
    assert isinstance(order, Order)
    return Receipt(order=order, total=order.quantity * 3, lines=[order.sku] * order.quantity)


@app.workflow()
async def leaf(ctx: td.Context, x: int) -> int:
    return x - 1


@app.workflow()
async def every_kind(ctx: td.Context, x: int) -> int:
    a = await ctx.step(first, x)
    await ctx.sleep(5)
    b = await ctx.wait_signal("go", type=int)
    c = await ctx.step(second, a + b)
    d = await ctx.child(leaf, c)
    return d


@app.workflow()
async def step_sleep_step(ctx: td.Context, x: int) -> int:
    a = await ctx.step(first, x)
    seen.append(("after first", a))
    await ctx.sleep(10)
    b = await ctx.step(second, a)
    seen.append(("after second", b))
    await ctx.wait_signal("go")
    return b


@app.workflow()
async def typed(ctx: td.Context, order: Order) -> Receipt:
    assert isinstance(order, Order)
    receipt = await ctx.step(price, order)
    seen.append((type(receipt), type(receipt.order), receipt))
    await ctx.sleep(1)
    return receipt


async def test_each_durable_op_takes_the_next_seq(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(every_kind, 4, run_id="r")
        await engine.drain()
        await trio.sleep(5)
        await engine.drain()
        await engine.signal(run.id, "go", 2)
        assert await engine.result(run.id) == 69  # ((4 + 1) + 2) * 10 - 1
        cps = await engine.store.get_checkpoints(run.id)
        assert [(cp.seq, cp.kind, cp.name, cp.status) for cp in cps] == [
            (1, "local", "first", "completed"),
            (2, "timer", "sleep", "completed"),
            (3, "signal", "go", "completed"),
            (4, "local", "second", "completed"),
            (5, "child", "leaf", "completed"),
        ]
        assert cps[4].child_id == "r.child.5"
        assert (await engine.get("r.child.5")).status == "completed"
        assert [cp.output for cp in cps] == ["5", None, "2", "70", '{"ok":true,"value":69}']


async def test_completed_step_is_not_run_again_across_turns(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(step_sleep_step, 1, run_id="r")
        await engine.drain()
        # Turn 1 ran `first` and suspended on the timer.
        assert calls == {"first": 1}
        assert seen == [("after first", 2)]
        await trio.sleep(10)
        await engine.drain()
        # Turn 2 replayed `first` from its record and ran `second`.
        assert calls == {"first": 1, "second": 1}
        assert seen == [("after first", 2), ("after first", 2), ("after second", 20)]
        await engine.signal(run.id, "go")
        assert await engine.result(run.id) == 20
    assert calls == {"first": 1, "second": 1}
    assert seen[-2:] == [("after first", 2), ("after second", 20)]
    assert len(seen) == 5


async def test_completed_step_is_not_run_again_across_an_engine_restart(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, wall_clock=tracking_wall) as engine:
        run = await engine.start(step_sleep_step, 1, run_id="r")
        await engine.drain()
        assert calls == {"first": 1}
        assert (await engine.get(run.id)).status == "suspended"
    # The first engine is gone before the timer is due; a second engine on
    # the same store takes the run up when it comes due.
    async with open_test_engine(
        app, store=store, engine_id="second", wall_clock=tracking_wall
    ) as engine:
        await trio.sleep(10)
        await engine.drain()
        assert calls == {"first": 1, "second": 1}
        assert (await engine.get(run.id)).status == "suspended"
    async with open_test_engine(
        app, store=store, engine_id="third", wall_clock=tracking_wall
    ) as engine:
        await engine.signal(run.id, "go")
        assert await engine.result(run.id) == 20
    assert calls == {"first": 1, "second": 1}
    cps = await store.get_checkpoints("r")
    assert [(cp.name, cp.attempts) for cp in cps if cp.kind == "local"] == [
        ("first", 1),
        ("second", 1),
    ]


# -- non-determinism ----------------------------------------------------------
# A second app registers a different body under the same name and version: a
# deploy that changed the workflow under a run in flight.


@app.workflow(name="deployed")
async def deployed_v1(ctx: td.Context, x: int) -> int:
    a = await ctx.step(first, x)
    await ctx.wait_signal("go")
    return a


changed = td.App("replay")


@changed.step(name="first")
async def changed_first(x: int) -> int:
    calls["changed first"] += 1
    return x


@changed.step(name="second")
async def changed_second(x: int) -> int:
    calls["changed second"] += 1
    return x


@changed.workflow(name="deployed")
async def deployed_renamed_step(ctx: td.Context, x: int) -> int:
    # seq 1 recorded step "first"; this deploy asks for "second" there.
    a = await ctx.step(changed_second, x)
    await ctx.wait_signal("go")
    return a


catching = td.App("replay")


@catching.step(name="second")
async def catching_second(x: int) -> int:
    calls["catching second"] += 1
    return x


@catching.workflow(name="deployed")
async def deployed_catching(ctx: td.Context, x: int) -> int:
    try:
        await ctx.step(catching_second, x)
    except td.NonDeterminismError as exc:
        seen.append(exc.code)
        return -1
    return 0


carries_on = td.App("replay")


@carries_on.step(name="second")
async def carries_on_second(x: int) -> int:
    calls["carries_on second"] += 1
    return x


@carries_on.step(name="new_step")
async def carries_on_new(x: int) -> int:
    calls["new step"] += 1
    return x


@carries_on.workflow(name="deployed")
async def deployed_carrying_on(ctx: td.Context, x: int) -> int:
    try:
        await ctx.step(carries_on_second, x)
    except td.NonDeterminismError:
        seen.append("caught")
    # The body goes on as if nothing happened: every further durable
    # operation fails the same way, and nothing of it runs.
    try:
        await ctx.step(carries_on_new, x)
    except td.NonDeterminismError as exc:
        seen.append(("again", exc.details))
    await ctx.sleep(5)
    return x


timer_instead = td.App("replay")


@timer_instead.workflow(name="deployed")
async def deployed_timer(ctx: td.Context, x: int) -> int:
    # seq 1 recorded a local step; this deploy sleeps there.
    await ctx.sleep(1)
    return x


async def _start_deployed(open_test_engine: EngineFactory, store: td.MemoryStore) -> str:
    async with open_test_engine(app, store=store) as engine:
        run = await engine.start(deployed_v1, 7, run_id="r")
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
        return run.id


@pytest.mark.parametrize(
    "other", [changed, catching, timer_instead], ids=["plain", "caught", "kind"]
)
async def test_changed_deploy_fails_the_run_with_non_determinism(
    open_test_engine: EngineFactory, other: td.App
) -> None:
    store = td.MemoryStore()
    run_id = await _start_deployed(open_test_engine, store)
    before = await store.get_checkpoints(run_id)
    async with open_test_engine(other, store=store, engine_id="new-deploy") as engine:
        with engine.subscribe() as events:
            await engine.signal(run_id, "go")
            with pytest.raises(td.RunFailed) as info:
                await engine.result(run_id)
            await engine.drain()
            kinds = [event.kind for event in _received(events)]
    assert info.value.code == "non_determinism"
    assert info.value.run_id == run_id
    assert info.value.details == {
        "seq": 1,
        "recorded": "first",
        "requested": "sleep" if other is timer_instead else "second",
        "recorded_kind": "local",
        "requested_kind": "timer" if other is timer_instead else "local",
    }
    stored = await store.get_run(run_id)
    assert stored is not None
    assert stored.status == "failed"
    assert stored.error is not None
    assert stored.error.code == "non_determinism"
    assert stored.error.type == "NonDeterminismError"
    assert stored.output is None
    # The body that caught the error did see it, and its return value was
    # not taken as the run's output.
    assert seen == (["non_determinism"] if other is catching else [])
    # The new deploy's steps never ran, and the recorded step was kept as is.
    assert calls == {"first": 1}
    after = await store.get_checkpoints(run_id)
    assert after[0] == before[0]
    assert kinds == ["run.failed"]


def _received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    out: list[td.Event] = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


async def test_after_non_determinism_the_body_runs_and_records_nothing_more(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    run_id = await _start_deployed(open_test_engine, store)
    async with open_test_engine(carries_on, store=store, engine_id="new-deploy") as engine:
        await engine.signal(run_id, "go")
        with pytest.raises(td.RunFailed) as info:
            await engine.result(run_id)
        await engine.drain()
        cps = await store.get_checkpoints(run_id)
        stored = await engine.get(run_id)
    assert info.value.code == "non_determinism"
    # The error names the first divergence, not a later operation.
    assert info.value.details == {
        "seq": 1,
        "recorded": "first",
        "requested": "second",
        "recorded_kind": "local",
        "requested_kind": "local",
    }
    assert seen == ["caught", ("again", info.value.details)]
    assert calls == {"first": 1}
    assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
        (1, "first", "completed"),
        (2, "go", "completed"),
    ]
    assert stored.wake_at is None


# -- typed results -------------------------------------------------------------


async def test_step_results_round_trip_typed(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    order = Order(sku="tea", quantity=2)
    expected = Receipt(order=order, total=6, lines=["tea", "tea"])
    async with open_test_engine(app) as engine:
        run = await engine.start(typed, order, run_id="r")
        result = await engine.result(run.id)
        cps = await engine.store.get_checkpoints(run.id)
    assert calls == {"price": 1}
    # The first turn and the replay both see a Receipt holding an Order.
    assert seen == [(Receipt, Order, expected), (Receipt, Order, expected)]
    assert isinstance(result, Receipt)
    assert result == expected
    # The store holds plain JSON, not pickles.
    assert json.loads(cps[0].input or "") == [{"sku": "tea", "quantity": 2}]
    assert json.loads(cps[0].output or "") == {
        "order": {"sku": "tea", "quantity": 2},
        "total": 6,
        "lines": ["tea", "tea"],
    }
    assert json.loads(run.input) == [{"sku": "tea", "quantity": 2}]
