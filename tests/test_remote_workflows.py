"""Remote workflows: the engine holds no body; workers decide each turn
(docs/remote-workflows.md). On the memory broker and store, under the
autojump clock; the engine suite (tests/conformance) runs the broad mix on
every broker."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable._brokers._base import RESULTS, Outgoing
from trio_durable._front._worker import crash
from trio_durable._wire._decision_wire import Decision
from trio_durable._wire._messages import Result
from trio_durable._wire._wire_records import DECISION_ON_WIRE

calls: Counter[str] = Counter()

shop = td.App("shop")


@shop.step(group="payments")
async def charge(order: str) -> str:
    calls["charge"] += 1
    return f"charged:{order}"


reserved = trio.Event()


@shop.step()
async def reserve(order: str) -> str:
    calls["reserve"] += 1
    reserved.set()
    return f"reserved:{order}"


@shop.step()
async def release(order: str) -> None:
    calls["release"] += 1


@shop.workflow(group="orders")
async def checkout(ctx: td.Context, order: str) -> dict[str, str]:
    reserved = await ctx.step(reserve, order)
    charged = await ctx.step(charge, order)
    await ctx.sleep(5)
    return {"reserved": reserved, "charged": charged}


@shop.workflow(group="orders")
async def held(ctx: td.Context, order: str) -> Any:
    await ctx.step(reserve, order, compensate=release)
    return await ctx.wait_signal("go")


tokens: list[str] = []
noted = trio.Event()


@shop.step(group="payments")
async def note(token: str) -> None:
    tokens.append(token)
    noted.set()


@shop.workflow(group="orders")
async def hooked(ctx: td.Context) -> Any:
    token = await ctx.webhook("paid")
    await ctx.step(note, token)
    return {"payload": await ctx.wait_signal("paid"), "token": token}


@shop.workflow(group="orders", on_error=[td.OnError(workflow="cleanup")])
async def drifting(ctx: td.Context, order: str) -> str:
    await ctx.step(reserve, order)
    await ctx.sleep(10)
    return "done"


@shop.workflow(group="orders")
async def cleanup(ctx: td.Context, failed: dict[str, Any]) -> str:
    return "cleaned"


# The same workflow after an incompatible change: it now charges first.
changed = td.App("shop")


@changed.step(group="payments")
async def charge_v2(order: str) -> str:
    return order


changed.step(group="payments", name="charge")(charge.fn)
changed.step(name="reserve")(reserve.fn)


@changed.workflow(group="orders", name="drifting", on_error=[td.OnError(workflow="cleanup")])
async def drifting_v2(ctx: td.Context, order: str) -> str:
    await ctx.step(charge_v2, order)
    return "changed"


@changed.workflow(group="orders", name="cleanup")
async def cleanup_v2(ctx: td.Context, failed: dict[str, Any]) -> str:
    return "cleaned"


service = td.App("service")
for name in ("checkout", "held", "hooked", "drifting", "cleanup"):
    service.remote_workflow(name, group="orders")

GROUPS = ["orders", "payments"]


@pytest.fixture(autouse=True)
def _reset() -> None:
    global noted, reserved
    calls.clear()
    tokens.clear()
    noted = trio.Event()
    reserved = trio.Event()


async def suspended_on_a_timer(events: trio.MemoryReceiveChannel[td.Event], run_id: str) -> None:
    """Wait until ``run_id`` suspends until a due time (a timer)."""
    async for event in events:
        if event.kind == "run.suspended" and event.run_id == run_id and event.data["wake_at"]:
            return


async def test_a_remote_workflow_runs_on_a_worker_and_the_engine_holds_no_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, store=store, broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS),
    ):
        handle = await engine.start("checkout", "o-1")
        assert await handle.result() == {"reserved": "reserved:o-1", "charged": "charged:o-1"}
        assert trio.current_time() == pytest.approx(5.0)
        checkpoints = await store.get_checkpoints(handle.id)
        assert [(cp.seq, cp.kind, cp.name, cp.status) for cp in checkpoints] == [
            (1, "local", "reserve", "completed"),
            (2, "remote", "charge", "completed"),
            (3, "timer", "sleep", "completed"),
        ]
        # The run's decision is its own record, not an operation of its body.
        [decision] = await store.get_records(handle.id)
        assert (decision.kind, decision.status, decision.group) == (
            "decision",
            "completed",
            "orders",
        )
        # One decision per turn: at the start (the worker serves payments,
        # so it runs charge there and then: see docs/remote-workflows.md),
        # and after the timer.
        assert decision.attempts == 2
        run = await store.get_run(handle.id)
        assert run is not None
        assert run.version == "1"
    assert calls == {"reserve": 1, "charge": 1}


async def test_result_keeps_waiting_while_a_decision_is_awaited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with td.open_engine(service, store=store, broker=broker) as engine:
        handle = await engine.start("checkout", "o-2")
        with trio.move_on_after(60):
            await handle.result()
            pytest.fail("a run waiting for its decision is not settled")
        assert await store.get_checkpoints(handle.id) == []
        [marker] = await store.get_records(handle.id)
        assert (marker.kind, marker.status, marker.attempts) == ("decision", "pending", 1)
        async with td.open_worker(shop, broker=broker, groups=GROUPS):
            assert await handle.result() == {
                "reserved": "reserved:o-2",
                "charged": "charged:o-2",
            }


async def test_a_duplicate_or_stale_decision_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker(td.BrokerFaults(duplicate=1.0, seed=3))
    async with (
        td.open_engine(service, store=store, broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS) as worker,
    ):
        handle = await engine.start("checkout", "o-3")
        assert await handle.result() == {"reserved": "reserved:o-3", "charged": "charged:o-3"}
        await engine.drain()
        await worker.wait_idle()
        before = (await store.get_checkpoints(handle.id), await store.get_records(handle.id))
        # A forged decision for the first task: stale, it changes nothing.
        forged = Decision(version="1", output=json.dumps("forged"))
        stale = Result(
            run_id=handle.id,
            seq=DECISION_ON_WIRE,
            attempt=1,
            step="checkout",
            workflow="checkout",
            status="completed",
            output=json.dumps(forged.encode()),
            kind="decision",
        )
        await broker.dispatch([Outgoing(queue=RESULTS, body=stale.encode())])
        await trio.sleep(10)
        await engine.drain()
        assert (
            await store.get_checkpoints(handle.id),
            await store.get_records(handle.id),
        ) == before
        assert await handle.result() == {"reserved": "reserved:o-3", "charged": "charged:o-3"}
    # Every task was delivered twice: the local step ran again in the
    # duplicate decisions, but only the first decision was applied.
    assert calls["reserve"] >= 1
    local = [cp for cp in before[0] if cp.kind == "local"]
    assert [(cp.seq, cp.attempts) for cp in local] == [(1, 1)]


async def test_non_determinism_found_on_the_worker_fails_the_run_unrouted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with td.open_engine(service, store=store, broker=broker) as engine:
        with engine.subscribe() as events:
            async with td.open_worker(shop, broker=broker, groups=GROUPS):
                handle = await engine.start("drifting", "o-4")
                await suspended_on_a_timer(events, handle.id)
            # A deploy changed the body incompatibly while the run slept.
            async with td.open_worker(changed, broker=broker, groups=GROUPS):
                with pytest.raises(td.RunFailed) as failed:
                    await handle.result()
            assert failed.value.code == "non_determinism"
            kinds = []
            while True:
                try:
                    kinds.append(events.receive_nowait().kind)
                except trio.WouldBlock:
                    break
            assert "run.routed" not in kinds
    run = await store.get_run(handle.id)
    assert run is not None
    assert run.tags == ()
    assert await store.get_run(f"{handle.id}.onError.0") is None


@shop.workflow(group="orders", on_error=[td.OnError(workflow="cleanup")])
async def refused(ctx: td.Context) -> str:
    raise td.FatalError("refused", code="refused")


service.remote_workflow("refused", group="orders")


async def test_a_failure_is_routed_by_workers_that_announced_after_the_last_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with td.open_engine(service, broker=broker) as engine:
        # The engine reads the announcements before any worker made one:
        # that read is fresh for a few seconds more.
        assert await engine._rt.catalogue.descriptors() == ()
        async with td.open_worker(shop, broker=broker, groups=GROUPS):
            handle = await engine.start("refused")
            assert await handle.result() == "cleaned"
        run = await engine.get(handle.id)
        assert run.tags == ("onError:*",)  # the catch-all route


async def test_a_lost_decision_task_is_dispatched_again_and_the_run_completes_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with td.open_engine(
        service, store=store, broker=broker, remote_redispatch=(5.0, 3)
    ) as engine:
        async with broker.open_consumer("orders", prefetch=1) as black_hole:
            handle = await engine.start("checkout", "o-5")
            [taken] = await black_hole.receive(1)
            assert (json.loads(taken.body)["kind"], json.loads(taken.body)["attempt"]) == (
                "decision",
                1,
            )
            # The task taken is never answered: five seconds on, it counts
            # as lost and goes out again, to a worker that answers.
            async with td.open_worker(shop, broker=broker, groups=GROUPS) as worker:
                assert await handle.result() == {
                    "reserved": "reserved:o-5",
                    "charged": "charged:o-5",
                }
                after = await store.get_checkpoints(handle.id)
                [marker] = await store.get_records(handle.id)
                # The lost task, its redispatch, and the two turns after.
                assert marker.attempts == 4
        # Closing the consumer hands the lost task back: its decision is
        # stale now, and changes nothing.
        async with td.open_worker(shop, broker=broker, groups=GROUPS) as worker:
            await trio.sleep(30)
            await worker.wait_idle()
            await engine.drain()
        assert await store.get_checkpoints(handle.id) == after
    assert calls["charge"] == 1


async def test_cancel_with_compensation_runs_the_undos_on_a_worker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, store=store, broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS),
    ):
        handle = await engine.start("held", "o-6")
        # Whether the decision that ran the reservation is applied before
        # the cancel or after, the undo runs.
        await reserved.wait()
        await engine.cancel(handle.id, compensate=True)
        with pytest.raises(td.RunCancelled):
            await handle.result()
        undo = await store.get_checkpoints(handle.id, -1, -1)
        assert [(cp.name, cp.status) for cp in undo] == [("release", "completed")]
    assert calls["release"] == 1


async def test_signals_and_webhooks_reach_a_remote_workflow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, store=store, broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS),
    ):
        handle = await engine.start("hooked")
        await noted.wait()
        # The engine derived the token; the body, replayed on a worker, got
        # the same one on every decision since.
        await engine.deliver_webhook(tokens[0], {"paid": True})
        assert await handle.result() == {"payload": {"paid": True}, "token": tokens[0]}
        held = await engine.start("held", "o-7")
        await engine.signal(held.id, "go", {"ok": 1})
        assert await held.result() == {"ok": 1}


async def test_starting_an_unknown_workflow_by_name_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(service, store=td.MemoryStore(), broker=td.MemoryBroker()) as engine:
        with pytest.raises(td.UnknownWorkflowError, match="no live worker announces it"):
            await engine.start("nowhere")


@shop.workflow(group="orders")
async def bulky(ctx: td.Context, size: int) -> int:
    reserved = await ctx.step(reserve, "x" * size)
    await ctx.step(charge, "o")
    return len(reserved)


service.remote_workflow("bulky", group="orders")


async def test_a_decision_task_over_the_brokers_limit_fails_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The local step's output goes in the history of the next decision
    # task, which is then too large to send: the run fails for good.
    broker = td.MemoryBroker(max_payload=20_000)
    async with (
        td.open_engine(service, store=td.MemoryStore(), broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS),
    ):
        small = await engine.start("bulky", 10)
        assert await small.result() == len("reserved:") + 10
        large = await engine.start("bulky", 15_000)
        with pytest.raises(td.RunFailed) as failed:
            await large.result()
        assert failed.value.code == "payload_too_large"


stalled = trio.Event()


@shop.step()
async def slow_label(order: str) -> str:
    calls["slow_label"] += 1
    if calls["slow_label"] == 1:
        stalled.set()
        await trio.sleep_forever()
    return f"label:{order}"


@shop.workflow(group="orders")
async def labelled(ctx: td.Context, order: str) -> str:
    label = await ctx.step(slow_label, order)
    charged = await ctx.step(charge, order)
    return f"{label}/{charged}"


service.remote_workflow("labelled", group="orders")


async def test_a_worker_killed_mid_decision_leaves_its_task_to_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    global stalled
    stalled = trio.Event()
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with td.open_engine(service, store=store, broker=broker) as engine:
        with trio.CancelScope() as killed:
            async with td.open_worker(shop, broker=broker, groups=GROUPS) as first:
                handle = await engine.start("labelled", "o-8")
                await stalled.wait()
                # Killed in the middle of the decision's local step: its
                # task was never acked, so the broker delivers it again.
                crash(first)
                killed.cancel()
        async with td.open_worker(shop, broker=broker, groups=GROUPS):
            assert await handle.result() == "label:o-8/charged:o-8"
        checkpoints = await store.get_checkpoints(handle.id)
        assert [(cp.seq, cp.name, cp.status, cp.attempts) for cp in checkpoints] == [
            (1, "slow_label", "completed", 1),
            (2, "charge", "completed", 1),
        ]
        # Two decision tasks: the one redelivered kept its attempt, and ran
        # no step at once (a task delivered again may be stale), so the
        # engine sent charge, and a second decision ended the body.
        [decision] = await store.get_records(handle.id)
        assert (decision.kind, decision.status, decision.attempts) == ("decision", "completed", 2)
    # The local step ran again on the second worker (at least once); the
    # run completed once, with one result per checkpoint.
    assert calls["slow_label"] == 2
    assert calls["charge"] == 1


async def test_a_breakpoint_pauses_a_remote_step_of_a_remote_workflow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, store=store, broker=broker) as engine,
        td.open_worker(shop, broker=broker, groups=GROUPS),
    ):
        await engine.set_breakpoint(workflow="checkout", step="charge")
        paused_run = await engine.start("checkout", "o-9")
        with engine.subscribe() as events:
            while not await engine.paused_steps(paused_run.id):
                await events.receive()
        [paused] = await engine.paused_steps(paused_run.id)
        assert (paused.step, paused.seq) == ("charge", 2)
        assert calls["charge"] == 0
        await engine.continue_run(paused_run.id)
        assert await paused_run.result() == {
            "reserved": "reserved:o-9",
            "charged": "charged:o-9",
        }
        skipped_run = await engine.start("checkout", "o-10")
        with engine.subscribe() as events:
            while not await engine.paused_steps(skipped_run.id):
                await events.receive()
        await engine.skip_step(skipped_run.id, "skipped")
        assert await skipped_run.result() == {"reserved": "reserved:o-10", "charged": "skipped"}
    assert calls["charge"] == 1
