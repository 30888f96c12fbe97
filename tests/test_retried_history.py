"""A retried run's history keeps what every retry replaced: the run's
failure and the operations the retry deleted or reset (`RunHistory.retried`),
with every attempt's error and traceback, on the memory store and SQLite.

Covers a retry from the failures (local and remote steps, a fan of remote
steps, a fan of children retried with their parent, undone steps and their
undos), a retry from a seq (with the values it rewrites), two retries in
order, a retry that changes nothing keeping nothing, the client reading what
an engine kept, and retention pruning it with the run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall, shared_store
from trio_durable._features.lifecycle._retried import retried_scope
from trio_durable._features.lifecycle._saga import plan_retry
from trio_durable._features.messages._published import event_scope
from trio_durable._front._control import RETRYABLE
from trio_durable._stores._base import WriteConflict
from trio_durable._stores._ops import Op

app = td.App("retried")

T = TypeVar("T")

failing: dict[str, int] = {}
"""How many more attempts fail, per card."""


def _fail(card: str) -> None:
    if failing.get(card, 0) > 0:
        failing[card] -= 1
        raise ValueError(f"card {card} declined")


@pytest.fixture(autouse=True)
def _reset() -> None:
    failing.clear()


@app.step()
async def reserve(card: str) -> str:
    return f"reserved-{card}"


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def charge(card: str) -> str:
    _fail(card)
    return f"paid-{card}"


@app.step(group="cards", retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def charge_remote(card: str) -> str:
    _fail(card)
    return f"paid-{card}"


@app.workflow()
async def checkout(ctx: td.Context, card: str) -> str:
    await ctx.step(reserve, card)
    return await ctx.step(charge, card)


@app.workflow()
async def checkout_remote(ctx: td.Context, card: str) -> str:
    await ctx.step(reserve, card)
    return await ctx.step(charge_remote, card)


@app.workflow()
async def charge_all(ctx: td.Context, cards: list[str]) -> list[str]:
    return await ctx.all(charge_remote, cards, mode="wait_all")


@app.workflow()
async def member(ctx: td.Context, card: str) -> str:
    return await ctx.step(charge, card)


@app.workflow()
async def members(ctx: td.Context, cards: list[str]) -> list[str]:
    return await ctx.all(member, cards, mode="wait_all")


@app.step()
async def refund(card: str) -> None:
    return None


@app.workflow()
async def saga(ctx: td.Context, card: str) -> str:
    await ctx.step(reserve, card, compensate=refund)
    return await ctx.step(charge, card)


@app.workflow()
async def publishing(ctx: td.Context, card: str) -> str:
    await ctx.set_event("stage", "reserved")
    await ctx.step(reserve, card)
    await ctx.set_event("stage", "charged")
    return await ctx.step(charge, card)


EngineOn = Callable[[], AbstractAsyncContextManager[td.Engine]]


@pytest.fixture
def engine_on(kind: str, tmp_path: Path, open_test_engine: EngineFactory) -> EngineOn:
    """Opens an engine on the ``kind`` of store, whose worker serves ``cards``."""

    @asynccontextmanager
    async def open_engine() -> AsyncIterator[td.Engine]:
        async with (
            shared_store(kind, tmp_path) as store,
            open_test_engine(app, store=store, broker="memory://", serve=["cards"]) as engine,
        ):
            yield engine

    return open_engine


async def _run_until_failed(
    engine: td.Engine, workflow: td.Workflow[[T], Any], arg: T, run_id: str
) -> td.RunFailed:
    """Start ``workflow`` as ``run_id`` and wait for it to fail."""
    await engine.start(workflow, arg, run_id=run_id)
    with pytest.raises(td.RunFailed) as failed:
        await engine.result(run_id)
    return failed.value


async def _fail_and_retry(
    engine: td.Engine, workflow: td.Workflow[[T], Any], arg: T, run_id: str
) -> td.RunFailed:
    """Start ``workflow`` as ``run_id``, wait for it to fail, and retry it."""
    failed = await _run_until_failed(engine, workflow, arg, run_id)
    await engine.retry(run_id)
    return failed


async def test_a_retried_run_keeps_the_failure_that_made_it_retried(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["visa"] = 2
    async with engine_on() as engine:
        await _run_until_failed(engine, checkout, "visa", "c")
        failed = await engine.get("c")
        before = await engine.history("c")
        assert before.retried == ()
        await trio.sleep(10)
        await engine.retry("c")
        assert await engine.result("c") == "paid-visa"
        history = await engine.history("c")
        detail = await engine.run_detail("c")
    # The run's own timeline is the new execution's.
    assert [(e.seq, e.name, e.status) for e in history.entries] == [
        (1, "reserve", "completed"),
        (2, "charge", "completed"),
    ]
    [kept] = history.retried
    assert detail.retried == history.retried
    assert kept.retry == 1
    assert kept.retried_at == WALL_START + 11.0
    assert kept.from_seq is None
    assert kept.sealed is None
    # The run as it ended: failed at 1 s (its second attempt, after 1 s of
    # backoff), with its error and the traceback of the step's raise.
    assert kept.status == "failed"
    assert kept.ended_at == WALL_START + 1.0
    assert kept.error is not None
    assert kept.error == failed.error
    assert kept.error.traceback is not None
    assert "ValueError: card visa declined" in kept.error.traceback
    # The failed step as it was: both attempts' errors with their tracebacks.
    [entry] = kept.entries
    assert (entry.seq, entry.name, entry.status, entry.attempts) == (2, "charge", "failed", 2)
    assert [e.message for e in entry.errors] == ["card visa declined"] * 2
    assert all(e.traceback and "_fail(card)" in e.traceback for e in entry.errors)
    assert entry.error is not None
    assert entry.error.message == "card visa declined"
    assert (entry.enqueued_at, entry.finished_at) == (WALL_START, WALL_START + 1.0)
    # Each attempt with its times: the first at 0 s, the second after 1 s
    # of backoff (the last attempt's start is the entry's own).
    assert entry.started_at == WALL_START + 1.0
    assert [(a.number, a.status, a.started_at, a.finished_at) for a in entry.attempt_log] == [
        (1, "failed", WALL_START, WALL_START),
        (2, "failed", WALL_START + 1.0, WALL_START + 1.0),
    ]
    assert [e.seq for e in before.entries if e.status == "failed"] == [2]


async def test_two_retries_keep_two_histories_in_order(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["visa"] = 4
    async with engine_on() as engine:
        await engine.start(checkout_remote, "visa", run_id="c")
        for _ in range(2):
            with pytest.raises(td.RunFailed):
                await engine.result("c")
            await trio.sleep(5)
            await engine.retry("c")
        assert await engine.result("c") == "paid-visa"
        history = await engine.history("c")
    first, second = history.retried
    assert (first.retry, second.retry) == (1, 2)
    assert (first.retried_at, second.retried_at) == (WALL_START + 6.0, WALL_START + 12.0)
    for kept in history.retried:
        assert kept.status == "failed"
        [entry] = kept.entries
        # A remote step's attempts failed on a worker: their tracebacks
        # came back with the results.
        assert (entry.seq, entry.kind, entry.attempts) == (2, "remote", 2)
        assert len(entry.errors) == 2
        assert all(e.traceback and "card visa declined" in e.traceback for e in entry.errors)
    assert first.entries[0].finished_at == WALL_START + 1.0
    assert second.entries[0].finished_at == WALL_START + 7.0


async def test_a_retried_fan_keeps_every_failed_members_errors(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    cards = [f"card-{i}" for i in range(8)]
    for card in cards[1::2]:
        failing[card] = 2
    async with engine_on() as engine:
        failed = await _fail_and_retry(engine, charge_all, cards, "fan")
        assert failed.code == "gather_failed"
        assert await engine.result("fan") == [f"paid-{card}" for card in cards]
        history = await engine.history("fan")
    [kept] = history.retried
    assert kept.error is not None
    assert kept.error.code == "gather_failed"
    assert [(e.seq, e.status, e.attempts) for e in kept.entries] == [
        (seq, "failed", 2) for seq in (2, 4, 6, 8)
    ]
    for entry, card in zip(kept.entries, cards[1::2], strict=True):
        assert entry.parallel_group == 1
        assert [e.message for e in entry.errors] == [f"card {card} declined"] * 2


async def test_children_retried_with_their_parent_keep_their_failures(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["b"] = 2
    async with engine_on() as engine:
        await _fail_and_retry(engine, members, ["a", "b"], "p")
        assert await engine.result("p") == ["paid-a", "paid-b"]
        parent = await engine.history("p")
        failed_child = await engine.history("p.all.1.1")
        good_child = await engine.history("p.all.1.0")
    # The parent keeps its member's checkpoint as it was (failed, with the
    # child's error), which the retry reset to run the child again.
    [kept] = parent.retried
    [entry] = kept.entries
    assert (entry.seq, entry.kind, entry.status, entry.child_id) == (
        2,
        "child",
        "failed",
        "p.all.1.1",
    )
    assert entry.error is not None
    assert entry.error.message == "card b declined"
    # The child retried with it keeps its own failure.
    [child_kept] = failed_child.retried
    assert child_kept.status == "failed"
    assert [(e.seq, e.name, e.attempts) for e in child_kept.entries] == [(1, "charge", 2)]
    assert good_child.retried == ()


async def test_undone_steps_and_their_undos_are_kept(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["visa"] = 2
    async with engine_on() as engine:
        await _fail_and_retry(engine, saga, "visa", "s")
        assert await engine.result("s") == "paid-visa"
        history = await engine.history("s")
    [kept] = history.retried
    # The undo at -1, the step it undid, and the failure.
    assert [(e.seq, e.name, e.status) for e in kept.entries] == [
        (-1, "refund", "completed"),
        (1, "reserve", "completed"),
        (2, "charge", "failed"),
    ]


async def test_a_retry_from_a_seq_keeps_what_it_replaced(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_on() as engine:
        await engine.start(publishing, "visa", run_id="r")
        assert await engine.result("r") == "paid-visa"
        completed = await engine.get("r")
        before = await engine.store.get_checkpoints("r")
        await engine.retry("r", from_seq=3)
        assert await engine.result("r") == "paid-visa"
        history = await engine.history("r")
        [stored] = await engine.store.list_values(retried_scope("r"))
    [kept] = history.retried
    assert kept.from_seq == 3
    assert kept.status == "completed"
    assert kept.error is None
    assert [(e.seq, e.name, e.status) for e in kept.entries] == [
        (3, "event:stage", "completed"),
        (4, "charge", "completed"),
    ]
    # Whole, payloads too: the checkpoints as they were, the run's output,
    # and the published value the retry set back to what seq 1 published.
    document = json.loads(stored.value)
    assert document["output"] == completed.output == json.dumps("paid-visa")
    assert [cp["output"] for cp in document["checkpoints"]] == [
        cp.output for cp in before if cp.seq >= 3
    ]
    assert document["values"] == [
        {"scope": event_scope("r"), "key": "stage", "value": json.dumps("charged")}
    ]
    assert stored.run_id == "r"


async def test_a_retry_that_changes_nothing_keeps_nothing(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_on() as engine:
        await engine.start(checkout, "visa", run_id="c")
        assert await engine.result("c") == "paid-visa"
        with pytest.raises(td.InvalidRunStateError):
            await engine.retry("c")
        with pytest.raises(td.ForkPointError):
            await engine.retry("c", from_seq=9)
        assert (await engine.history("c")).retried == ()
        assert await engine.store.list_values(retried_scope("c")) == []


async def test_a_retry_that_lost_a_race_keeps_nothing(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["visa"] = 2
    async with engine_on() as engine:
        await _run_until_failed(engine, checkout, "visa", "c")
        # Two retries read the failed run; the other one writes first.
        ops: list[Op] = []
        failed = await engine.get("c")
        await plan_retry(engine.store, app, engine.clock.now(), failed, ops, [], RETRYABLE)
        await engine.retry("c")
        with pytest.raises(WriteConflict):
            await engine.store.apply(ops)
        assert await engine.result("c") == "paid-visa"
        [kept] = (await engine.history("c")).retried
        assert len(await engine.store.list_values(retried_scope("c"))) == 1
    assert kept.retry == 1


async def test_the_client_reads_what_an_engines_retry_kept(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    failing["visa"] = 2
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with open_test_engine(app, store=url) as engine:
        await _run_until_failed(engine, checkout, "visa", "c")
        await engine.drain()
    async with td.open_client(url, wall_clock=fixed_wall) as client:
        # The client retries (no engine runs it yet), then reads.
        await client.retry("c")
        history = await client.history("c")
    [kept] = history.retried
    assert kept.status == "failed"
    assert [(e.seq, e.status) for e in kept.entries] == [(2, "failed")]
    assert history.run.status == "pending"


async def test_retention_prunes_what_retries_kept_with_the_run(
    engine_on: EngineOn, autojump_clock: trio.testing.MockClock
) -> None:
    failing["visa"] = 2
    async with engine_on() as engine:
        await _fail_and_retry(engine, checkout, "visa", "c")
        await engine.result("c")
        await engine.drain()
        assert len(await engine.store.list_values(retried_scope("c"))) == 1
        await trio.sleep(60)
        assert await engine.prune(td.Retention(completed=30)) == 1
        assert await engine.store.list_values(retried_scope("c")) == []
