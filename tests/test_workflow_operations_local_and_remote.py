"""The operations the engine carries out for a body, each scenario run with
the body decided in the engine and on a worker: ``ctx.signal`` to another
run, ``start_child(cancel_with_parent=True)``, ``ctx.set_event``,
``ctx.emit``, ``ctx.continue_as_new``, ``ctx.upsert_search_attributes``,
entity calls, a remote step's ``dedup_key``, queries and updates.

Each scenario is written once and asserts the same outcome in both modes
(tests/local_and_remote.py sets them up). The features a body uses
otherwise are in tests/test_workflow_features_local_and_remote.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from local_and_remote import Body, Harness, Scenario, cases, kit, open_harness

# -- the bodies, each defined once -----------------------------------------------------


async def receiver(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


async def sender(ctx: td.Context, target: str) -> str:
    await ctx.signal(target, "go", {"from": ctx.run_id})
    return "sent"


async def napper(ctx: td.Context) -> str:
    await ctx.sleep(3600)
    return "woke"


async def guardian(ctx: td.Context) -> str:
    await ctx.start_child("napper", cancel_with_parent=True)
    await ctx.start_child("napper")  # left alone by the cancel
    await ctx.sleep(3600)
    return "done"


async def publisher(ctx: td.Context, n: int) -> int:
    await ctx.set_event("progress", {"at": 1})
    await ctx.sleep(5)
    await ctx.set_event("progress", {"at": n})
    return n


async def emitter(ctx: td.Context, n: int) -> int:
    for i in range(n):
        ctx.emit({"i": i})
        await ctx.sleep(1)
    return n


async def counter(ctx: td.Context, i: int, until: int) -> int:
    i = await ctx.step(kit().steps.double, i) // 2 + 1
    if i < until:
        ctx.continue_as_new(i, until)
    return i


async def tagged(ctx: td.Context, customer: str) -> str:
    ctx.upsert_search_attributes({"customer": customer, "tier": 2})
    await ctx.sleep(10)
    ctx.upsert_search_attributes({"tier": None})
    return await ctx.start_child("napper", search_attributes={"customer": f"{customer}-kid"})


async def tallier(ctx: td.Context, key: str) -> list[Any]:
    tally = ctx.entity("tally", key)
    first = await tally.add("a")
    second = await tally.add("b")
    return [first, second, await tally.items()]


async def deduplicated(ctx: td.Context, text: str) -> str:
    return await ctx.step(kit().steps.shout, text, queue="dedup", dedup_key=f"k-{text}")


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
    return balance


BODIES = (
    account,
    receiver,
    sender,
    napper,
    guardian,
    publisher,
    emitter,
    counter,
    tagged,
    tallier,
    deduplicated,
)


# -- the scenarios ---------------------------------------------------------------------


async def signal_from_a_body(h: Harness) -> None:
    await h.start("receiver", run_id="target")
    await h.start("sender", "target", run_id="from")
    assert await h.engine.result("from") == "sent"
    assert await h.engine.result("target") == {"from": "from"}
    (sent,) = await h.entries("from", "send:go")
    assert (sent.kind, sent.status) == ("signal", "completed")


async def child_cancelled_with_parent(h: Harness) -> None:
    await h.start("guardian", run_id="g")
    await trio.sleep(60)
    kids = await h.engine.list_runs(parent_id="g")
    assert sorted(r.id for r in kids.runs) == ["g.child.1", "g.child.2"]
    await h.engine.cancel("g")
    with pytest.raises(td.RunCancelled):
        await h.engine.result("g")
    with pytest.raises(td.RunCancelled):
        await h.engine.result("g.child.1")
    assert (await h.engine.get("g.child.2")).status == "suspended"


async def events_set_by_a_body(h: Harness) -> None:
    await h.start("publisher", 7, run_id="pub")
    assert await h.engine.get_event("pub", "progress", timeout=60) == {"at": 1}
    assert await h.engine.result("pub") == 7
    assert await h.engine.get_event("pub", "progress", timeout=0) == {"at": 7}


async def values_emitted_by_a_body(h: Harness) -> None:
    await h.start("emitter", 3, run_id="em")
    seen = [item async for item in h.engine.stream("em")]
    assert seen == [(0, {"i": 0}), (1, {"i": 1}), (2, {"i": 2})]
    assert await h.engine.result("em") == 3


async def continued_as_new(h: Harness) -> None:
    await h.start("counter", 0, 3, run_id="c")
    # result() of the first generation waits for the chain's last.
    assert await h.engine.result("c") == 3
    first = await h.engine.get("c")
    assert (first.status, first.output) == ("completed", None)
    last = await h.engine.get("c.gen.3")
    assert (last.status, last.output, json.loads(last.input)) == ("completed", "3", [2, 3])


async def search_attributes_upserted(h: Harness) -> None:
    await h.start("tagged", "acme", run_id="tag")
    await trio.sleep(5)
    found = await h.engine.list_runs(search_attributes={"tier": td.SearchRange(ge=2)})
    assert [r.id for r in found.runs] == ["tag"]
    assert (await h.engine.get("tag")).search_attributes == {"customer": "acme", "tier": 2}
    assert await h.engine.result("tag") == "tag.child.4"
    assert (await h.engine.get("tag")).search_attributes == {"customer": "acme"}
    kids = await h.engine.list_runs(search_attributes={"customer": "acme-kid"})
    assert [r.id for r in kids.runs] == ["tag.child.4"]


async def entity_calls(h: Harness) -> None:
    await h.start("tallier", "k", run_id="e")
    assert await h.engine.result("e") == [1, 2, ["a", "b"]]
    # The engine's own calls see what the body's did.
    assert await h.engine.entity("tally", "k").items() == ["a", "b"]


async def remote_step_with_a_dedup_key(h: Harness) -> None:
    await h.start("deduplicated", "a", run_id="d")
    assert await h.engine.result("d") == "A"
    (entry,) = await h.entries("d", "shout")
    assert (entry.kind, entry.status) == ("remote", "completed")


async def queries_and_updates(h: Harness) -> None:
    await h.start("account", run_id="acct")
    await trio.sleep(1)
    assert await h.engine.update("acct", "deposit", 5) == 5
    assert await h.engine.query("acct", "balance") == 5
    with pytest.raises(td.UpdateRejected) as rejected:
        await h.engine.update("acct", "deposit", 0)
    assert rejected.value.code == "not_positive"
    with pytest.raises(td.UnknownHandlerError):
        await h.engine.query("acct", "owner")
    assert await h.engine.update("acct", "deposit", 2, update_id="twice") == 7
    assert await h.engine.update("acct", "deposit", 2, update_id="twice") == 7
    await h.engine.signal("acct", "close")
    assert await h.engine.result("acct") == 7
    # An ended run answers from where it ended.
    assert await h.engine.query("acct", "balance") == 7


SCENARIOS: tuple[Scenario, ...] = (
    queries_and_updates,
    signal_from_a_body,
    child_cancelled_with_parent,
    events_set_by_a_body,
    values_emitted_by_a_body,
    continued_as_new,
    search_attributes_upserted,
    entity_calls,
    remote_step_with_a_dedup_key,
)

KNOWN_GAPS: dict[tuple[str, Body], str] = {}
"""Parametrizations that fail for a gap in the engine, with why (none now)."""


@pytest.mark.parametrize(("scenario", "body"), cases(SCENARIOS, KNOWN_GAPS))
async def test_workflow_operation(
    scenario: Scenario, body: Body, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(body, BODIES) as harness:
        await scenario(harness)
