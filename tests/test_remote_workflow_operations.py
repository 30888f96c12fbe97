"""Operations a remote workflow's body (decided on a worker) carries out
as a local body does: ``ctx.signal``, ``ctx.set_event``, ``continue_as_new``,
``start_child(cancel_with_parent=True)`` and a remote step's ``dedup_key``.

The worker's decision names each as a command of envelope version 2, and
the engine carries it out with the code a local body's turn runs
(docs/remote-workflows.md). The same scenarios over RabbitMQ and NATS are in
``tests/integration/test_remote_workflow_operations_brokers.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
import trio
import trio.lowlevel
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from trio_durable._brokers._base import Outgoing
from trio_durable._wire._decision_commands import Command
from trio_durable._wire._decision_wire import Decision
from trio_durable._wire._messages import Result, WireError

# -- the workers' app: bodies and the steps they call ----------------------------------

workers = td.App("remote-ops-workers")
workers.queue("dedup", concurrency=1)
workers.search_attribute("customer", str)
workers.search_attribute("tier", int)


@workers.step(group="steps")
async def shout(text: str) -> str:
    return text.upper()


@workers.workflow(group="deciders")
async def notifier(ctx: td.Context, target: str) -> str:
    await ctx.signal(target, "note", {"from": "remote"})
    # A replay must not send it again: the key is this run's id and seq.
    await ctx.signal(target, "note", {"again": True}, idempotency_key="once")
    await ctx.signal(target, "note", {"again": True}, idempotency_key="once")
    return await ctx.step(shout, "sent")


@workers.workflow(group="deciders")
async def publisher(ctx: td.Context, n: int) -> int:
    await ctx.set_event("progress", {"at": 1})
    await ctx.sleep(5)
    ctx.set_event("progress", {"at": n})  # not awaited: allowed too
    return n


@workers.workflow(group="deciders")
async def counter(ctx: td.Context, i: int, until: int) -> int:
    i = await ctx.step(bump, i)
    if i < until:
        ctx.continue_as_new(i, until)
    return i


@workers.step(group="steps")
async def bump(i: int) -> int:
    return i + 1


@workers.workflow(group="deciders")
async def napper(ctx: td.Context) -> str:
    await ctx.sleep(3600)
    return "woke"


@workers.workflow(group="deciders")
async def guardian(ctx: td.Context) -> str:
    await ctx.start_child(napper, cancel_with_parent=True)
    await ctx.start_child("napper")  # left alone by the cancel
    await ctx.sleep(3600)
    return "done"


@workers.workflow(group="deciders")
async def deduplicated(ctx: td.Context, text: str) -> str:
    return await ctx.step(shout, text, queue="dedup", dedup_key=f"k-{text}")


@workers.workflow(group="deciders")
async def tagged(ctx: td.Context, customer: str) -> str:
    ctx.upsert_search_attributes({"customer": customer, "tier": 2})
    await ctx.sleep(10)
    ctx.upsert_search_attributes({"tier": None})
    return await ctx.start_child(napper, search_attributes={"customer": f"{customer}-kid"})


class Tally:
    """An entity both apps register: its calls run on the engine."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @td.exclusive
    async def add(self, item: str) -> int:
        self.seen.append(item)
        return len(self.seen)

    @td.shared
    async def items(self) -> list[str]:
        return list(self.seen)

    @td.exclusive
    async def refuse(self) -> None:
        raise td.FatalError("no", code="refused")


workers.entity("tally")(Tally)


@workers.workflow(group="deciders")
async def tallier(ctx: td.Context, key: str) -> list[object]:
    tally = ctx.entity("tally", key)
    first = await tally.add("a")
    second = await tally.add("b")
    items = await tally.items()
    try:
        await tally.refuse()
    except td.RunFailed as failed:
        refused = failed.code
    return [first, second, items, refused]


@workers.workflow(group="deciders")
async def answering(ctx: td.Context) -> int:
    seen: list[int] = []

    @ctx.query("seen")
    def count() -> int:
        return len(seen)

    while True:
        seen.append(await ctx.wait_signal("n", type=int))
        if seen[-1] == 0:
            return sum(seen)


@workers.workflow(group="deciders")
async def account(ctx: td.Context) -> int:
    balance = 0

    def positive(amount: int) -> None:
        if amount <= 0:
            raise td.FatalError("deposits are positive", code="not_positive")

    @ctx.update("deposit", validator=positive)
    def deposit(amount: int) -> int:
        nonlocal balance
        balance += amount
        return balance

    @ctx.query("balance")
    def current() -> int:
        return balance

    await ctx.wait_signal("close")
    await ctx.sleep(5)
    return balance


# -- the engine's app: the bodies are only declared, and one local receiver -----------

service = td.App("remote-ops-service")
for name in (
    "notifier",
    "publisher",
    "counter",
    "guardian",
    "napper",
    "deduplicated",
    "tagged",
    "tallier",
    "answering",
    "account",
):
    service.remote_workflow(name, group="deciders")
service.entity("tally")(Tally)


@service.workflow()
async def receiver(ctx: td.Context) -> list[object]:
    first = await ctx.wait_signal("note")
    second = await ctx.wait_signal("note")
    try:
        third = await ctx.wait_signal("note", timeout=600)
    except td.SignalTimeout:
        third = "none"
    return [first, second, third]


async def test_a_remote_body_signals_another_run_once_per_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start(receiver, run_id="target")
        await engine.start("notifier", "target", run_id="sender")
        assert await engine.result("sender") == "SENT"
        # Three calls, three checkpoints; the third found its key claimed
        # and delivered nothing.
        assert await engine.result("target") == [{"from": "remote"}, {"again": True}, "none"]
        history = await engine.history("sender")
        sends = [e for e in history.entries if e.name == "send:note"]
        assert [e.status for e in sends] == ["completed"] * 3


async def test_a_remote_body_signalling_a_missing_run_fails_with_the_local_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("notifier", "nobody", run_id="sender")
        with pytest.raises(td.RunFailed) as failed:
            await engine.result("sender")
        assert "no run 'nobody' to signal" in str(failed.value)


async def test_a_remote_body_publishes_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("publisher", 7, run_id="pub")
        assert await engine.get_event("pub", "progress", timeout=60) == {"at": 1}
        assert await engine.result("pub") == 7
        assert await engine.get_event("pub", "progress", timeout=0) == {"at": 7}


async def test_a_remote_body_continues_as_new(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("counter", 0, 3, run_id="c")
        # result() on the first generation waits for the chain's last.
        assert await engine.result("c") == 3
        first = await engine.get("c")
        assert (first.status, first.output) == ("completed", None)
        last = await engine.get("c.gen.3")
        assert (last.status, last.output) == ("completed", "3")
        assert json.loads((await engine.get("c.gen.2")).input) == [1, 3]


async def test_a_remote_body_starts_a_child_cancelled_with_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("guardian", run_id="g")
        await trio.sleep(60)
        children = sorted(r.id for r in (await engine.list_runs()).runs if r.parent_id == "g")
        assert children == ["g.child.1", "g.child.2"]
        await engine.cancel("g")
        with pytest.raises(td.RunCancelled):
            await engine.result("g")
        with pytest.raises(td.RunCancelled):
            await engine.result("g.child.1")
        assert (await engine.get("g.child.2")).status == "suspended"


async def test_a_remote_body_sends_a_step_with_a_dedup_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("deduplicated", "a", run_id="d")
        assert await engine.result("d") == "A"
        (step,) = [e for e in (await engine.history("d")).entries if e.name == "shout"]
        assert step.status == "completed"


async def test_a_remote_body_sets_search_attributes_its_workers_declare(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("tagged", "acme", run_id="t")
        await trio.sleep(5)
        # The engine's app declares none: it learned their types from the
        # decision and recorded them, so filters work fleet-wide.
        found = await engine.list_runs(search_attributes={"tier": td.SearchRange(ge=2)})
        assert [r.id for r in found.runs] == ["t"]
        assert (await engine.get("t")).search_attributes == {"customer": "acme", "tier": 2}
        assert await engine.result("t") == "t.child.4"
        assert (await engine.get("t")).search_attributes == {"customer": "acme"}
        kids = await engine.list_runs(search_attributes={"customer": "acme-kid"})
        assert [r.id for r in kids.runs] == ["t.child.4"]


async def test_a_remote_body_calls_an_entity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("tallier", "k", run_id="e")
        assert await engine.result("e") == [1, 2, ["a", "b"], "refused"]
        # The engine's own calls see what the remote body's did.
        assert await engine.entity("tally", "k").items() == ["a", "b"]


async def test_a_remote_run_is_queried_where_the_app_holds_its_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    store = td.MemoryStore()
    async with (
        td.open_engine(
            service, store=store, broker=broker, seed=0, wall_clock=fixed_wall
        ) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
        td.open_client(store, app=workers, wall_clock=fixed_wall) as client,
    ):
        await engine.start("answering", run_id="q")
        for n in (4, 5):
            await engine.signal("q", "n", n)
            await trio.sleep(1)
        # The workers' app holds the body: a client opened with it replays
        # the run's history here and answers.
        assert await client.query("q", "seen") == 2
        # The engine's app only declares it: a worker replays and answers.
        assert await engine.query("q", "seen") == 2
        with pytest.raises(td.UnknownHandlerError, match="no query handler 'unseen'"):
            await engine.query("q", "unseen")
        with pytest.raises(td.InvalidArgumentsError):
            await engine.query("q", "seen", "extra")
        with pytest.raises(td.UsageError, match="decided on workers"):
            await client.update("q", "anything")
        await engine.signal("q", "n", 0)
        assert await engine.result("q") == 9
        assert await client.query("q", "seen") == 3


async def test_a_query_no_worker_answers_fails_after_a_while(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine:
        async with td.open_worker(workers, broker=broker, groups=["deciders", "steps"]):
            await engine.start("answering", run_id="q")
            await trio.sleep(1)
        # The workers are gone: the query waits for an answer, then fails.
        start = trio.current_time()
        with pytest.raises(td.QueryFailed) as failed:
            await engine.query("q", "seen")
        assert failed.value.code == "no_answer"
        assert trio.current_time() - start == pytest.approx(30.0)


async def test_a_remote_run_takes_updates_applied_by_its_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("account", run_id="a")
        await trio.sleep(1)
        # A worker validates each, the run's next decision applies it.
        assert await engine.update("a", "deposit", 5) == 5
        assert await engine.update("a", "deposit", 7) == 12
        assert await engine.query("a", "balance") == 12
        with pytest.raises(td.UpdateRejected) as rejected:
            await engine.update("a", "deposit", -1)
        assert rejected.value.code == "not_positive"
        with pytest.raises(td.UnknownHandlerError):
            await engine.update("a", "withdraw", 1)
        # The same id again: the outcome it had, applied once.
        assert await engine.update("a", "deposit", 100, update_id="once") == 112
        assert await engine.update("a", "deposit", 100, update_id="once") == 112
        # Sent together with the signal the body waits for: applied before
        # the wait returns, so the run ends with it.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(engine.update, "a", "deposit", 8)
            await trio.lowlevel.checkpoint()
            nursery.start_soon(engine.signal, "a", "close")
        assert await engine.result("a") == 120


async def test_a_query_the_broker_refuses_fails_with_a_clear_code(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("answering", run_id="q")
        await trio.sleep(1)
        dispatch = broker.dispatch

        async def refuse(messages: Sequence[Outgoing]) -> None:
            raise td.BrokerError("the broker is away")

        broker.dispatch = refuse  # type: ignore[method-assign]
        with pytest.raises(td.QueryFailed) as failed:
            await engine.query("q", "seen")
        assert failed.value.code == "broker_unavailable"
        assert "the broker is away" in failed.value.message
        broker.dispatch = dispatch  # type: ignore[method-assign]
        assert await engine.query("q", "seen") == 0


async def test_only_decisions_that_need_it_go_out_in_envelope_version_2(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An engine of envelope version 1 reads every other decision, and
    refuses these, naming both versions (tests/test_wire_versions.py)."""
    broker = td.MemoryBroker()
    versions: dict[str, set[int]] = {}
    dispatch = broker.dispatch

    async def spy(messages: Sequence[Outgoing]) -> None:
        for outgoing in messages:
            try:
                result = Result.decode(outgoing.body)
            except WireError:
                continue  # a task
            if result.kind == "decision":
                versions.setdefault(result.run_id, set()).add(result.version)
        await dispatch(messages)

    broker.dispatch = spy  # type: ignore[method-assign]
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders", "steps"]),
    ):
        await engine.start("napper", run_id="plain")
        await engine.start("publisher", 1, run_id="new")
        await engine.result("new")
        await engine.start("answering", run_id="asked")
        await trio.sleep(1)
        await engine.signal("asked", "n", 0)
        await engine.result("asked")
        await trio.sleep(10)
    # Each of the publisher's two decisions carries an event set (with the
    # sleep, then with the end); a body that only waits and ends, query
    # handlers registered or not, needs nothing of version 2.
    assert versions == {"plain": {1}, "new": {2}, "asked": {1}}


def test_a_decision_that_applied_updates_is_of_version_2_and_decodes_back() -> None:
    outcome = json.dumps({"name": "deposit", "args": "[1]", "status": "completed", "result": "1"})
    wait = Command(op="signal", seq=1, args={"name": "close", "timeout": None})
    decision = Decision(
        version="1",
        next=wait,
        updates=(("u1", outcome),),
        update_log='[{"id":"u1","name":"deposit","args":"[1]","at":1,"ok":true}]',
        update_handlers=("deposit",),
    )
    assert decision.wire_version == 2
    assert Decision.decode(decision.encode(), "r") == decision
    # Naming the handlers alone is no change an older engine would drop.
    assert Decision(version="1", next=wait, update_handlers=("deposit",)).wire_version == 1
    unsettled = json.dumps({"name": "deposit", "args": "[1]", "status": "accepted"})
    with pytest.raises(WireError, match="completed, failed or rejected"):
        Decision.decode(
            Decision(version="1", next=wait, updates=(("u1", unsettled),)).encode(), "r"
        )
