"""Saga compensation, cancellation and retry of failed runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable._base._records import signal_token

app = td.App("saga")

calls: list[tuple[str, tuple[Any, ...], float]] = []
"""(step name, its args, trio time) of every attempt of the steps below."""

turns: Counter[str] = Counter()
"""Body entries per run id: one per turn that replayed the body."""

flaky: Counter[str] = Counter()
"""How many more attempts of a step (by name) fail before one succeeds."""

NO_JITTER = td.Retry(attempts=3, backoff=1.0, jitter=0.0)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    turns.clear()
    flaky.clear()
    yield
    calls.clear()
    turns.clear()
    flaky.clear()


def _attempt(name: str, *args: Any) -> None:
    calls.append((name, args, trio.current_time()))
    if flaky[name] > 0:
        flaky[name] -= 1
        raise RuntimeError(f"{name} is flaky")


@app.step(retry=NO_JITTER)
async def book_flight(city: str, seats: int) -> str:
    _attempt("book_flight", city, seats)
    return f"flight-{city}-{seats}"


@app.step(retry=NO_JITTER)
async def cancel_flight(city: str, seats: int) -> None:
    _attempt("cancel_flight", city, seats)


@app.step(retry=NO_JITTER)
async def book_hotel(city: str) -> str:
    _attempt("book_hotel", city)
    return f"hotel-{city}"


@app.step(retry=td.Retry(attempts=2, backoff=5.0, jitter=0.0))
async def cancel_hotel(city: str) -> None:
    _attempt("cancel_hotel", city)


@app.step(retry=NO_JITTER)
async def notify(city: str) -> None:
    _attempt("notify", city)


@app.step(retry=NO_JITTER)
async def book_car(city: str) -> str:
    _attempt("book_car", city)
    return f"car-{city}"


@app.step(retry=NO_JITTER)
async def return_car(city: str) -> None:
    _attempt("return_car", city)


@app.step(retry=NO_JITTER)
async def charge(city: str) -> str:
    _attempt("charge", city)
    if flaky["charge_fatal"] > 0:
        flaky["charge_fatal"] -= 1
        raise td.FatalError("card declined", code="card_declined", details={"city": city})
    return f"paid-{city}"


@app.step(retry=NO_JITTER)
async def busy(seconds: float) -> None:
    _attempt("busy", seconds)
    await trio.sleep(seconds)


@app.workflow()
async def trip(ctx: td.Context, city: str, wait: str | None) -> list[str]:
    """flight (undo) -> hotel (undo) -> notify (no undo) -> car (undo) ->
    [wait for a signal] -> charge."""
    turns[ctx.run_id] += 1
    done = [
        await ctx.step(book_flight, city, 2, compensate=cancel_flight),
        await ctx.step(book_hotel, city, compensate=cancel_hotel),
    ]
    await ctx.step(notify, city)
    done.append(await ctx.step(book_car, city, compensate=return_car))
    if wait is not None:
        await ctx.wait_signal(wait)
    done.append(await ctx.step(charge, city))
    return done


@app.workflow()
async def trip_parent(ctx: td.Context, city: str) -> list[str]:
    turns[ctx.run_id] += 1
    first = await ctx.step(book_car, "home", compensate=return_car)
    return [first, *await ctx.child(trip, city, "go")]


@app.workflow()
async def busy_kid(ctx: td.Context, seconds: float) -> None:
    turns[ctx.run_id] += 1
    await ctx.step(book_car, "kid", compensate=return_car)
    await ctx.step(busy, seconds)
    await ctx.step(notify, "kid done")


@app.workflow()
async def busy_parent(ctx: td.Context, seconds: float) -> None:
    turns[ctx.run_id] += 1
    await ctx.child(busy_kid, seconds)


@app.workflow()
async def retry_parent(ctx: td.Context, city: str) -> list[str]:
    turns[ctx.run_id] += 1
    await ctx.step(notify, "parent")
    return await ctx.child(trip, city, None)


def _names() -> list[str]:
    return [name for name, _, _ in calls]


def _events(rx: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    events: list[td.Event] = []
    while True:
        try:
            events.append(rx.receive_nowait())
        except trio.WouldBlock:
            return events


async def test_undos_run_newest_first_with_the_original_args_and_retry(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    flaky["cancel_flight"] = 2  # fails twice, then its third attempt succeeds
    async with open_test_engine(app) as engine:
        await engine.start(trip, "oslo", None, run_id="t")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("t")
    assert (info.value.code, info.value.details) == ("card_declined", {"city": "oslo"})
    undos = [c for c in calls if c[0] in ("return_car", "cancel_hotel", "cancel_flight")]
    assert undos == [
        ("return_car", ("oslo",), 0.0),
        ("cancel_hotel", ("oslo",), 0.0),
        ("cancel_flight", ("oslo", 2), 0.0),
        # cancel_flight's own Retry: waits of 1 s, then 2 s.
        ("cancel_flight", ("oslo", 2), 1.0),
        ("cancel_flight", ("oslo", 2), 3.0),
    ]
    assert trio.current_time() == 3.0


async def test_undo_records_sit_at_minus_seq_and_the_run_keeps_its_error(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    flaky["cancel_flight"] = 1
    async with open_test_engine(app) as engine:
        await engine.start(trip, "rome", None, run_id="t")
        with pytest.raises(td.RunFailed):
            await engine.result("t")
        run = await engine.get("t")
        cps = {cp.seq: cp for cp in await engine.store.get_checkpoints("t")}
    assert run.status == "failed"
    assert run.error is not None
    # The run's error is the body's failure, not anything the undos did.
    assert (run.error.message, run.error.code) == ("card declined", "card_declined")
    assert sorted(cps) == [-4, -2, -1, 1, 2, 3, 4, 5]
    assert (cps[-4].name, cps[-4].status, cps[-4].attempts) == ("return_car", "completed", 1)
    assert (cps[-2].name, cps[-2].status, cps[-2].attempts) == ("cancel_hotel", "completed", 1)
    assert (cps[-1].name, cps[-1].status, cps[-1].attempts) == ("cancel_flight", "completed", 2)
    assert [e.message for e in cps[-1].errors] == ["cancel_flight is flaky"]
    assert cps[-1].input == cps[1].input == '["rome",2]'
    assert (cps[5].name, cps[5].status) == ("charge", "failed")
    assert cps[1].compensation == "cancel_flight"
    assert cps[3].compensation is None


async def test_an_undo_that_fails_for_good_is_recorded_and_the_rest_still_run(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    flaky["cancel_hotel"] = 5  # more than its 2 attempts
    async with open_test_engine(app) as engine:
        await engine.start(trip, "lima", None, run_id="t")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("t")
        [hotel_undo] = await engine.store.get_checkpoints("t", -2, -2)
        [flight_undo] = await engine.store.get_checkpoints("t", -1, -1)
    assert info.value.code == "card_declined"
    assert hotel_undo.status == "failed"
    assert hotel_undo.attempts == 2
    assert hotel_undo.error is not None
    assert hotel_undo.error.message == "cancel_hotel is flaky"
    assert len(hotel_undo.errors) == 2
    assert flight_undo.status == "completed"
    assert [
        (n, t) for n, _, t in calls if n in ("return_car", "cancel_hotel", "cancel_flight")
    ] == [
        ("return_car", 0.0),
        ("cancel_hotel", 0.0),
        ("cancel_hotel", 5.0),
        ("cancel_flight", 5.0),
    ]


@app.step(retry=NO_JITTER)
async def slow_undo(city: str) -> None:
    _attempt("slow_undo", city)
    await trio.sleep(10)


@app.workflow()
async def slow_saga(ctx: td.Context, city: str) -> str:
    await ctx.step(book_car, city, compensate=slow_undo)
    return await ctx.step(charge, city)


async def test_undos_outlasting_the_lease_keep_it_and_run_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    store = td.MemoryStore()
    async with (
        open_test_engine(app, store=store, engine_id="one", lease_ttl=3) as one,
        open_test_engine(app, store=store, engine_id="two", lease_ttl=3),
    ):
        await one.start(slow_saga, "ulm", run_id="s")
        with pytest.raises(td.RunFailed) as info:
            await one.result("s")
        run = await one.get("s")
    # The 10 s undo ran once, on the engine that failed the run; the other
    # engine never took the run over, so its error is the body's own.
    assert [(n, t) for n, _, t in calls if n == "slow_undo"] == [("slow_undo", 0.0)]
    assert info.value.code == "card_declined"
    assert (run.status, run.recoveries, run.updated_at) == ("failed", 0, WALL_START + 10)


async def test_each_undo_outcome_is_a_step_event_marked_as_compensation(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    flaky["cancel_hotel"] = 5
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(trip, "kyiv", None, run_id="t")
            with pytest.raises(td.RunFailed):
                await engine.result("t")
            events = _events(rx)
    undo_events = [
        (e.kind, e.seq, e.name, e.data["attempt"], e.data.get("final"), e.data["undoes"])
        for e in events
        if e.data.get("compensation") is True
    ]
    assert undo_events == [
        ("step.started", -4, "return_car", 1, None, 4),
        ("step.completed", -4, "return_car", 1, None, 4),
        ("step.started", -2, "cancel_hotel", 1, None, 2),
        ("step.failed", -2, "cancel_hotel", 1, False, 2),
        ("step.started", -2, "cancel_hotel", 2, None, 2),
        ("step.failed", -2, "cancel_hotel", 2, True, 2),
        ("step.started", -1, "cancel_flight", 1, None, 1),
        ("step.completed", -1, "cancel_flight", 1, None, 1),
    ]
    # Body steps carry no compensation mark; the run's end comes after the undos.
    assert all("compensation" not in e.data for e in events if e.seq is not None and e.seq > 0)
    assert events[-1].kind == "run.failed"
    assert events[-1].data["code"] == "card_declined"


async def test_cancel_with_compensation_runs_the_undos_and_ends_cancelled(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(trip, "bern", "approve", run_id="t")
        await engine.drain()
        assert (await engine.get("t")).status == "suspended"
        await trio.sleep(7)
        await engine.cancel("t", compensate=True)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("t")
        run = await engine.get("t")
        cps = {cp.seq: cp for cp in await engine.store.get_checkpoints("t")}
        # The cancelled run no longer waits for its signal.
        assert await engine.store.signal_waiter('["t","approve"]') is None
    assert isinstance(info.value, td.RunFailed)
    assert (info.value.run_id, info.value.code) == ("t", "cancelled")
    assert run.status == "cancelled"
    assert run.error is not None
    assert run.error.code == "cancelled"
    assert run.updated_at == WALL_START + 7
    assert [(n, a) for n, a, _ in calls if n.startswith(("cancel_", "return_"))] == [
        ("return_car", ("bern",)),
        ("cancel_hotel", ("bern",)),
        ("cancel_flight", ("bern", 2)),
    ]
    assert [cps[s].status for s in (-4, -2, -1)] == ["completed"] * 3
    assert "charge" not in _names()


async def test_cancel_without_compensation_runs_no_undo(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(trip, "bern", "approve", run_id="t")
        await engine.drain()
        await engine.cancel("t")
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("t")
        cps = await engine.store.get_checkpoints("t")
    assert info.value.code == "cancelled"
    assert _names() == ["book_flight", "book_hotel", "notify", "book_car"]
    assert all(cp.seq > 0 for cp in cps)


@pytest.mark.parametrize("undo", [True, False])
async def test_cancel_cascades_to_awaited_children(
    undo: bool, autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(trip_parent, "gent", run_id="p")
        await engine.drain()
        assert (await engine.get("p.child.2")).status == "suspended"
        await engine.cancel("p", compensate=undo)
        for run_id in ("p", "p.child.2"):
            with pytest.raises(td.RunCancelled) as info:
                await engine.result(run_id)
            assert info.value.code == "cancelled"
        await engine.drain()
        assert (await engine.get("p.child.2")).compensate is undo
    undos = [(n, a) for n, a, _ in calls if n.startswith(("cancel_", "return_"))]
    if undo:
        # The parent's own undo in its cancelling turn, whose write tells the
        # child to cancel; then the child's, newest first.
        assert undos == [
            ("return_car", ("home",)),
            ("return_car", ("gent",)),
            ("cancel_hotel", ("gent",)),
            ("cancel_flight", ("gent", 2)),
        ]
    else:
        assert undos == []


async def test_cancel_cascade_cuts_short_a_child_busy_in_a_step(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(busy_parent, 100.0, run_id="p")
        with trio.move_on_after(3):
            await engine.drain()
        assert (await engine.get("p.child.1")).status == "running"
        await engine.cancel("p", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.1")
        # The child ended at once, not when its 100 s step would have.
        assert trio.current_time() == 3.0
        await engine.drain()
        assert trio.current_time() == 3.0
    assert [n for n, _, _ in calls] == ["book_car", "busy", "return_car"]


async def test_cancel_interrupts_a_running_turn_and_undoes_what_it_completed(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(busy_kid, 100.0, run_id="k")
        await trio.testing.wait_all_tasks_blocked()
        assert (await engine.get("k")).status == "running"
        await engine.cancel("k", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("k")
        assert trio.current_time() == 0.0
        cps = await engine.store.get_checkpoints("k")
    # book_car completed in the interrupted turn: it was kept, and undone.
    assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
        (-1, "return_car", "completed"),
        (1, "book_car", "completed"),
    ]
    assert _names() == ["book_car", "busy", "return_car"]


async def test_cancel_of_a_terminal_run_raises_and_writes_nothing(
    open_test_engine: EngineFactory,
) -> None:
    flaky["charge_fatal"] = 1
    async with open_test_engine(app) as engine:
        await engine.start(trip, "nice", None, run_id="failed")
        await engine.start(trip, "nice", None, run_id="completed")
        await engine.start(trip, "nice", "approve", run_id="cancelled")
        await engine.drain()
        await engine.cancel("cancelled")
        await engine.drain()
        runs = {run.id: run for run in await engine.store.list_runs()}
        assert {run.status for run in runs.values()} == {"failed", "completed", "cancelled"}
        ops = engine.store.statistics().ops
        for run_id in runs:
            for compensate in (False, True):
                with pytest.raises(td.InvalidRunStateError):
                    await engine.cancel(run_id, compensate=compensate)
        with pytest.raises(td.RunNotFoundError):
            await engine.cancel("nope")
        await engine.drain()
        assert engine.store.statistics().ops == ops
        assert {run.id: run for run in await engine.store.list_runs()} == runs
    # No undo ran for the completed or the cancelled run (nor twice for the failed one).
    assert [a for n, a, _ in calls if n == "return_car"] == [("nice",)]


async def test_retry_reruns_only_the_failed_part_and_redoes_undone_steps(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    async with open_test_engine(app) as engine:
        await engine.start(trip, "riga", None, run_id="t")
        with pytest.raises(td.RunFailed):
            await engine.result("t")
        assert _names() == [
            "book_flight",
            "book_hotel",
            "notify",
            "book_car",
            "charge",
            "return_car",
            "cancel_hotel",
            "cancel_flight",
        ]
        calls.clear()
        retried = await engine.retry("t")
        assert retried.status == "pending"
        assert retried.error is None
        assert await engine.result("t") == ["flight-riga-2", "hotel-riga", "car-riga", "paid-riga"]
        cps = await engine.store.get_checkpoints("t")
    # The undone steps run again; notify (completed, never undone) does not.
    assert _names() == ["book_flight", "book_hotel", "book_car", "charge"]
    assert [(cp.seq, cp.status) for cp in cps] == [(s, "completed") for s in range(1, 6)]


async def test_retry_of_a_failed_child_reuses_its_id_and_the_parent_picks_it_up(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    async with open_test_engine(app) as engine:
        await engine.start(retry_parent, "oslo", run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "card_declined"
        assert (await engine.get("p.child.2")).status == "failed"
        calls.clear()
        await engine.retry("p")
        assert await engine.result("p") == ["flight-oslo-2", "hotel-oslo", "car-oslo", "paid-oslo"]
        child = await engine.get("p.child.2")
        runs = await engine.store.list_runs()
        [_, child_cp] = await engine.store.get_checkpoints("p")
        child_cps = await engine.store.get_checkpoints("p.child.2")
    assert child.status == "completed"
    assert sorted(r.id for r in runs) == ["p", "p.child.2"]
    assert child_cp.status == "completed"
    assert child_cp.child_id == "p.child.2"
    # The child redid its undone steps and the failed one; neither its nor the
    # parent's completed notify ran again.
    assert _names() == ["book_flight", "book_hotel", "book_car", "charge"]
    assert [cp.seq for cp in child_cps] == [1, 2, 3, 4, 5]
    assert turns["p"] == 4  # two turns before the retry, two after


@app.workflow()
async def member(ctx: td.Context, index: int) -> int:
    await ctx.sleep(index)
    if index == 1:
        await ctx.step(charge, "member")
    return index * 10


@app.workflow()
async def fan_parent(ctx: td.Context, n: int) -> list[int]:
    turns[ctx.run_id] += 1
    return await ctx.all(member, list(range(n)), concurrency=3)


async def test_retry_of_a_failed_fan_retries_its_members_under_their_ids(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    async with open_test_engine(app) as engine:
        await engine.start(fan_parent, 5, run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "gather_failed"
        await engine.drain()
        statuses = {r.id: r.status for r in await engine.store.list_runs(parent_id="p")}
        # Member 0 (no sleep) made way for member 3 at once; the failure of
        # member 1 at 1 s cancelled 2 and 3, and 4 never started.
        assert statuses == {
            "p.all.1.0": "completed",
            "p.all.1.1": "failed",
            "p.all.1.2": "cancelled",
            "p.all.1.3": "cancelled",
        }
        assert trio.current_time() == 1.0
        await engine.retry("p")
        assert await engine.result("p") == [0, 10, 20, 30, 40]
        statuses = {r.id: r.status for r in await engine.store.list_runs(parent_id="p")}
    assert statuses == {f"p.all.1.{i}": "completed" for i in range(5)}
    # Members 2 and 3 keep their timers (due at t=2 and 3); member 4, which
    # the failure kept from starting, starts once they ended (the retried
    # fan's window was stopped: what it never started goes on as a wave).
    assert trio.current_time() == 3.0 + 4.0
    assert [a for n, a, _ in calls if n == "charge"] == [("member",), ("member",)]


async def test_retry_of_a_completed_run_raises_and_changes_nothing(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(trip, "pisa", None, run_id="t")
        await engine.result("t")
        await engine.drain()
        before = await engine.get("t")
        cps = await engine.store.get_checkpoints("t")
        ops = engine.store.statistics().ops
        with pytest.raises(td.InvalidRunStateError):
            await engine.retry("t")
        with pytest.raises(td.RunNotFoundError):
            await engine.retry("nope")
        await engine.drain()
        assert engine.store.statistics().ops == ops
        assert await engine.get("t") == before
        assert await engine.store.get_checkpoints("t") == cps


async def test_retry_of_a_running_or_suspended_run_raises_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(busy_kid, 10.0, run_id="k")
        await trio.testing.wait_all_tasks_blocked()
        running = await engine.get("k")
        assert running.status == "running"
        ops = engine.store.statistics().ops
        with pytest.raises(td.InvalidRunStateError):
            await engine.retry("k")
        assert engine.store.statistics().ops == ops
        assert await engine.get("k") == running
        await engine.result("k")

        await engine.start(trip, "bonn", "approve", run_id="t")
        await engine.drain()
        suspended = await engine.get("t")
        ops = engine.store.statistics().ops
        with pytest.raises(td.InvalidRunStateError):
            await engine.retry("t")
        assert engine.store.statistics().ops == ops
        assert await engine.get("t") == suspended


# -- retry re-arms what a cancel disarmed ---------------------------------------------
# A child cancelled (by `engine.cancel`, or by its fail_fast fan) lost its
# signal waiter, and the results of its remote steps that were out were
# dropped. Retrying its parent retries the child too, and must give it those
# back so it can finish. The reconcile pass never runs in these tests.

NO_RECONCILE = 1e9


@app.step(group="saga-remote", retry=td.Retry(attempts=1))
async def far(seconds: float) -> str:
    _attempt("far", seconds)
    await trio.sleep(seconds)
    return f"far-{seconds}"


@app.workflow()
async def waits_for_go(ctx: td.Context) -> str:
    turns[ctx.run_id] += 1
    payload: str = await ctx.wait_signal("go")
    return payload


@app.workflow()
async def works_far(ctx: td.Context, seconds: float) -> str:
    turns[ctx.run_id] += 1
    return await ctx.step(far, seconds)


@app.workflow()
async def naps(ctx: td.Context, seconds: float) -> str:
    turns[ctx.run_id] += 1
    await ctx.sleep(seconds)
    return "rested"


@app.workflow()
async def awaits(ctx: td.Context, kid: str, arg: float | None) -> Any:
    turns[ctx.run_id] += 1
    if kid == "waits_for_go":
        return await ctx.child(waits_for_go)
    return await ctx.child(kid, arg)


@app.workflow()
async def fails_unless_fixed(ctx: td.Context, index: int) -> str:
    await ctx.sleep(1)
    return await ctx.step(charge, f"member-{index}")


@app.workflow()
async def member_far(ctx: td.Context, index: int) -> str:
    if index == 0:
        return await ctx.child(fails_unless_fixed, index)
    # A step fan of two, both out when the member is cancelled.
    return "+".join(await ctx.all(far, [10.0, 10.0]))


@app.workflow()
async def fast_fan(ctx: td.Context) -> list[str]:
    turns[ctx.run_id] += 1
    return await ctx.all(member_far, [0, 1])


async def _cancel_child(engine: td.Engine, parent: str, child: str) -> None:
    """Cancel ``child``; its parent, awaiting it, fails with code cancelled."""
    await engine.cancel(child)
    with pytest.raises(td.RunFailed) as info:
        await engine.result(parent)
    assert info.value.code == "cancelled"
    assert (await engine.get(child)).status == "cancelled"


async def test_retry_gives_a_child_cancelled_in_a_signal_wait_its_waiter_back(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, reconcile_interval=NO_RECONCILE) as engine:
        await engine.start(awaits, "waits_for_go", None, run_id="p")
        await engine.drain()
        await _cancel_child(engine, "p", "p.child.1")
        await engine.retry("p")
        await engine.drain()
        assert (await engine.get("p.child.1")).status == "suspended"
        await engine.signal("p.child.1", "go", "now")
        with trio.fail_after(1):
            assert await engine.result("p") == "now"
        assert engine.statistics().reconciled == 0


async def test_retry_hands_a_signal_buffered_for_a_cancelled_child_over(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, reconcile_interval=NO_RECONCILE) as engine:
        await engine.start(awaits, "waits_for_go", None, run_id="p")
        await engine.drain()
        await _cancel_child(engine, "p", "p.child.1")
        # A signal that reached the store with no waiter left (engines cannot
        # send one to a cancelled run, but the store keeps what it is given).
        await engine.store.deliver_signal(signal_token("p.child.1", "go"), '"early"')
        await engine.retry("p")
        with trio.fail_after(1):
            assert await engine.result("p") == "early"
        assert await engine.store.buffered_signals(signal_token("p.child.1", "go")) == []


async def test_retry_sends_again_the_step_a_cancelled_child_had_out(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(
        app, broker=td.MemoryBroker(), serve=["saga-remote"], reconcile_interval=NO_RECONCILE
    ) as engine:
        await engine.start(awaits, "works_far", 10.0, run_id="p")
        await trio.sleep(1)
        await _cancel_child(engine, "p", "p.child.1")
        # The step ends on its worker at t=10; its result is dropped.
        await engine.drain()
        assert trio.current_time() == 10.0
        [cp] = await engine.store.get_checkpoints("p.child.1")
        assert (cp.status, cp.attempts) == ("pending", 1)
        assert cp.started_at is not None
        await engine.retry("p")
        with trio.fail_after(100):
            assert await engine.result("p") == "far-10.0"
        assert trio.current_time() == 20.0
        [cp] = await engine.store.get_checkpoints("p.child.1")
        assert engine.statistics().reconciled == 0
    assert [(n, a, t) for n, a, t in calls if n == "far"] == [
        ("far", (10.0,), 0.0),
        ("far", (10.0,), 10.0),
    ]
    # Sent again as a new attempt, which records why.
    assert (cp.status, cp.attempts) == ("completed", 2)
    assert [e.code for e in cp.errors] == ["cancelled"]


async def test_retry_of_a_fail_fast_fan_sends_again_what_its_cancelled_member_had_out(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    flaky["charge_fatal"] = 1
    async with open_test_engine(
        app, broker=td.MemoryBroker(), serve=["saga-remote"], reconcile_interval=NO_RECONCILE
    ) as engine:
        await engine.start(fast_fan, run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "gather_failed"
        await engine.drain()
        assert trio.current_time() == 10.0
        assert (await engine.get("p.all.1.1")).status == "cancelled"
        # The fault is fixed (charge succeeds from now on).
        await engine.retry("p")
        with trio.fail_after(100):
            assert await engine.result("p") == ["paid-member-0", "far-10.0+far-10.0"]
        assert trio.current_time() == 20.0
        assert engine.statistics().reconciled == 0
        cps = await engine.store.get_checkpoints("p.all.1.1")
    assert [t for n, _, t in calls if n == "far"] == [0.0, 0.0, 10.0, 10.0]
    assert [(cp.status, cp.attempts) for cp in cps] == [("completed", 2), ("completed", 2)]


async def test_a_retried_child_keeps_the_timer_it_was_cancelled_in(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, reconcile_interval=NO_RECONCILE) as engine:
        await engine.start(awaits, "naps", 100.0, run_id="p")
        await trio.sleep(1)
        await _cancel_child(engine, "p", "p.child.1")
        await engine.retry("p")
        assert await engine.result("p") == "rested"
        # Due when it was first due: 100 s after the child started.
        assert trio.current_time() == 100.0
        assert engine.statistics().reconciled == 0
