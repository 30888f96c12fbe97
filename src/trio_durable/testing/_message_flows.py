"""The built-in workload's runs that talk with the world outside: queries
and updates, a stream, a webhook, and payloads large enough for the blob
store; each with the invariants it keeps (added with `Simulation.check`).

- **Queries and updates.** ``cart`` registers a query and an update with a
  validator; the workload sends it updates one after another (each with an
  ``update_id``, so a try again after a crash is the same update), asks
  the query after each, and sends one the validator rejects. Each accepted
  update is applied once, in the order they were accepted: the run returns
  their amounts in that order, each update returned the running total, each
  query after it the same total, and the rejected one was never applied.
- **A stream.** ``stream`` emits values across turns (between local steps,
  remote steps and a timer), and a reader follows it until the run ends,
  resuming one past the last offset it got whenever its engine crashed.
  Each offset is given once, in order, with the value emitted there; the
  stored stream holds exactly those values, each written once.
- **A webhook.** ``webhook`` makes a webhook and publishes its token; two
  callers deliver it at once with different payloads, and a third delivers
  a token no webhook has. One delivery wins: the run gets one of the two
  payloads, a caller that was told it delivered is the one whose payload
  the run got, nothing is left buffered, and the made-up token delivers
  nothing.
- **Large payloads.** ``big`` passes a payload over the simulation's blob
  threshold through a remote step, a local step and a signal.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final

import trio

from .._base._exceptions import (
    FatalError,
    InvalidRunStateError,
    UpdateRejected,
    WebhookNotFoundError,
    WebhookUsedError,
)
from .._base._records import signal_token
from .._features.hooks._webhooks import token_hash
from .._features.messages._streams import stream_scope
from .._features.messages._updates import update_scope
from .._front._engine import Engine
from .._stores._base import Store
from ._simulation import Simulation
from ._workload_app import app, record

# -- queries and updates --------------------------------------------------------------


def _positive(n: int) -> None:
    if n <= 0:
        raise FatalError(f"an amount is positive, not {n}", code="not_positive")


@app.step()
async def checkout(key: str, total: int) -> int:
    record(f"{key}:checkout")
    await trio.sleep(1)  # a turn open for a while: a crash may land in it
    return total


@app.workflow()
async def cart_flow(ctx: Any, key: str) -> list[int]:
    items: list[int] = []

    def total() -> int:
        return sum(items)

    def add(n: int) -> int:
        items.append(n)
        return sum(items)

    ctx.query("total")(total)
    ctx.update("add", validator=_positive)(add)

    await ctx.sleep(10)
    await ctx.wait_signal("close", timeout=6000)
    await ctx.step(checkout, key, sum(items))
    return items


async def cart_updates(sim: Simulation, amounts: list[int]) -> None:
    """Updates of one cart adding ``amounts`` and queries, one after
    another, then its close. (The amounts are drawn before the workload
    calls any engine: which engine a call goes to, drawn from the same
    source, differs between the fleet and the reference.)"""
    run_id = "cart"
    await sim.start(cart_flow, "ct", run_id=run_id)
    results: list[int] = []
    totals: list[int] = []
    rejected = False

    def add(n: int, update_id: str) -> Callable[[Engine], Awaitable[Any]]:
        return lambda engine: engine.update(run_id, "add", n, update_id=update_id)

    for i, n in enumerate(amounts):
        results.append(await sim.call(add(n, f"{run_id}-{i}")))
        totals.append(await sim.call(lambda e: e.query(run_id, "total")))
        if i == 1:
            try:
                await sim.call(add(0, f"{run_id}-zero"))
            except UpdateRejected:
                rejected = True
        await sim.sleep(sim.rng.uniform(0, 20))
    await sim.signal(run_id, "close")
    sim.check(
        partial(
            cart_violations,
            run_id=run_id,
            amounts=amounts,
            results=results,
            totals=totals,
            rejected=rejected,
        )
    )


async def cart_violations(
    store: Store,
    *,
    run_id: str,
    amounts: list[int],
    results: list[int],
    totals: list[int],
    rejected: bool,
) -> list[str]:
    """The invariants of the cart's updates (see the module's docstring)."""
    where = f"updates of {run_id}"
    violations: list[str] = []
    run = await store.get_run(run_id)
    if run is None or run.status != "completed":
        return []  # the harness reports a run that did not end well
    applied = json.loads(run.output or "null")
    if applied != amounts:
        violations.append(f"{where}: the run applied {applied}, the workload sent {amounts}")
    running = [sum(amounts[: i + 1]) for i in range(len(amounts))]
    if results != running:
        violations.append(f"{where}: the updates returned {results}, not the totals {running}")
    if totals != running:
        violations.append(f"{where}: the queries after them answered {totals}, not {running}")
    if not rejected:
        violations.append(f"{where}: an update its validator refuses was not rejected")
    if await store.get_value(update_scope(run_id), f"record/{run_id}-zero") is not None:
        violations.append(f"{where}: a rejected update was stored")
    return violations


# -- a stream -------------------------------------------------------------------------


@app.step()
async def echo(x: int) -> int:
    return x


@app.step(group="work")
async def remote_echo(x: int) -> int:
    await trio.sleep(x % 2)
    return x


STREAM_LENGTH: Final = 12


@app.workflow()
async def stream_flow(ctx: Any, n: int) -> int:
    for i in range(n):
        ctx.emit({"i": i})
        if i % 4 == 1:
            await ctx.step(echo, i)  # a local step: the turn goes on
        elif i % 4 == 3:
            await ctx.step(remote_echo, i)  # a remote step ends the turn
        elif i == 6:
            await ctx.sleep(15)
    ctx.emit({"end": n})
    return n


async def stream_reader(sim: Simulation) -> None:
    """Start the streaming run and follow its stream to its end."""
    run_id = "stream"
    await sim.start(stream_flow, STREAM_LENGTH, run_id=run_id)
    given = await sim.stream(run_id)
    expected = [*({"i": i} for i in range(STREAM_LENGTH)), {"end": STREAM_LENGTH}]
    sim.check(partial(stream_violations, run_id=run_id, given=given, expected=expected))


async def stream_violations(
    store: Store, *, run_id: str, given: list[tuple[int, Any]], expected: list[Any]
) -> list[str]:
    """Each offset given once, in order, with its value; the stream stored
    exactly so, each value written once (version 1)."""
    where = f"stream of {run_id}"
    violations: list[str] = []
    if given != list(enumerate(expected)):
        violations.append(f"{where}: the reader got {given}, not {list(enumerate(expected))}")
    stored = await store.list_values(stream_scope(run_id), limit=len(expected) + 10)
    values = [(int(row.key), json.loads(row.value)) for row in stored if row.value is not None]
    if values != list(enumerate(expected)):
        violations.append(f"{where}: the store holds {values}")
    rewritten = [int(row.key) for row in stored if row.version != 1]
    if rewritten:
        violations.append(f"{where}: offsets {rewritten} were written more than once")
    return violations


# -- a webhook ------------------------------------------------------------------------


@app.workflow()
async def webhook_flow(ctx: Any, key: str) -> Any:
    token = await ctx.webhook("paid")
    ctx.set_event("token", token)
    paid = await ctx.wait_signal("paid", timeout=6000)
    await ctx.step(checkout, key, 0)
    return paid


async def webhook_deliveries(sim: Simulation) -> None:
    """Two deliveries of one token at once, and one of a made-up token."""
    run_id = "webhook"
    await sim.start(webhook_flow, "wh", run_id=run_id)
    # Which delivery wins depends on the race: the invariants check it.
    sim.may_differ.add(run_id)
    token = await sim.call(lambda e: e.get_event(run_id, "token"))
    told: dict[str, str] = {}
    async with trio.open_nursery() as nursery:
        for payload in ("first", "second"):
            nursery.start_soon(_deliver, sim, token, payload, told)
        nursery.start_soon(_deliver, sim, "no-such-token-" + token[:20], "forged", told)
    sim.check(partial(webhook_violations, run_id=run_id, token=token, told=told))


async def _deliver(sim: Simulation, token: str, payload: str, told: dict[str, str]) -> None:
    """Deliver, and keep what the caller was told."""

    async def deliver(engine: Any) -> None:
        await engine.deliver_webhook(token, payload)

    try:
        await sim.call(deliver)
        told[payload] = "delivered"
    except WebhookUsedError:
        told[payload] = "used"
    except WebhookNotFoundError:
        told[payload] = "not found"
    except InvalidRunStateError:
        told[payload] = "ended"


async def webhook_violations(
    store: Store, *, run_id: str, token: str, told: dict[str, str]
) -> list[str]:
    """One delivery won (see the module's docstring)."""
    where = f"webhook of {run_id}"
    violations: list[str] = []
    run = await store.get_run(run_id)
    if run is None or run.status != "completed":
        return []  # the harness reports a run that did not end well
    paid = json.loads(run.output or "null")
    if paid not in ("first", "second"):
        violations.append(f"{where}: the run got {paid!r}")
    delivered = sorted(payload for payload, what in told.items() if what == "delivered")
    if len(delivered) > 1 or (delivered and delivered != [paid]):
        violations.append(f"{where}: {delivered} were told they delivered; the run got {paid!r}")
    if told.get("forged") != "not found":
        violations.append(f"{where}: a made-up token was {told.get('forged')!r}, not refused")
    buffered = await store.buffered_signals(signal_token(run_id, "paid"))
    if buffered:
        violations.append(f"{where}: a second delivery is buffered: {buffered}")
    hook = await store.get_webhook(token_hash(token))
    if hook is None or hook.used_at is None:
        violations.append(f"{where}: the webhook is not marked used")
    return violations


# -- large payloads -------------------------------------------------------------------


@app.step(group="work")
async def expand(seed: str, size: int) -> str:
    return (seed * (size // len(seed) + 1))[:size]


@app.step()
async def measure(text: str) -> int:
    await trio.sleep(1)
    return len(text)


@app.workflow()
async def big_flow(ctx: Any, size: int) -> int:
    text = await ctx.step(expand, "blob", size)  # a large result over the broker
    length = await ctx.step(measure, text)  # a large input of a local step
    more = await ctx.wait_signal("more", timeout=6000)  # a large signal payload
    return int(length + len(more))


async def big_payloads(sim: Simulation) -> None:
    """A run whose payloads are over the blob threshold."""
    await sim.start(big_flow, 3000, run_id="big")
    await sim.sleep(sim.rng.uniform(5, 60))
    await sim.signal("big", "more", "m" * 2000)
