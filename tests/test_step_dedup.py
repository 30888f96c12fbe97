"""Dedup keys of remote steps: at most one step per key waits in a
flow-control queue; a call while one waits is refused (see `_step_dedup`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall

app = td.App("step-dedup")
app.queue("mail", concurrency=1)
app.queue("paced", concurrency=5, rate_limit=td.RateLimit(1, 60.0))

sent: list[str] = []
HOLD = 10.0
"""Seconds a mail takes."""
began: dict[str, trio.Event] = {}
gates: dict[str, trio.Event] = {}
"""Mails to these users take until their event is set, instead of `HOLD`."""


@pytest.fixture(autouse=True)
def _reset() -> None:
    sent.clear()


@app.step(group="mailers", queue="mail")
async def send_mail(user: str) -> str:
    sent.append(user)
    if user in began:
        began[user].set()
    if user in gates:
        await gates[user].wait()
    else:
        await trio.sleep(HOLD)
    return f"mailed {user}"


@app.step(group="mailers")
async def paced_call(user: str) -> str:
    sent.append(user)
    return f"called {user}"


@app.step()
async def local_note(user: str) -> str:
    return user


@app.workflow()
async def notify(ctx: td.Context, user: str) -> str:
    try:
        return await ctx.step(send_mail, user, dedup_key=user)
    except td.RemoteStepError as exc:
        return exc.code or "failed"


@app.workflow()
async def notify_later(ctx: td.Context, user: str) -> str:
    outcome = await notify.fn(ctx, user)
    await ctx.sleep(100)
    return f"later: {outcome}"


@app.workflow()
async def paced(ctx: td.Context, user: str) -> str:
    try:
        return await ctx.step(paced_call, user, queue="paced", dedup_key=user)
    except td.RemoteStepError as exc:
        return exc.code or "failed"


@app.workflow()
async def misuse(ctx: td.Context, how: str) -> str:
    if how == "no queue":
        return await ctx.step(paced_call, "x", dedup_key="x")
    if how == "local":
        return await ctx.step(local_note, "x", dedup_key="x")
    return await ctx.step(send_mail, "x", dedup_key="")


async def test_a_call_while_a_step_of_its_key_waits_is_refused(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, serve=["mailers"]) as engine:
        # ann's first step takes the queue's one slot: it is sent, so her
        # key is free; her second waits with it; her third is refused.
        first = await engine.start(notify, "ann", run_id="ann-1")
        await trio.sleep(1)
        second = await engine.start(notify, "ann", run_id="ann-2")
        bob = await engine.start(notify, "bob", run_id="bob-1")
        await trio.sleep(1)
        third = await engine.start(notify, "ann", run_id="ann-3")
        assert await third.result() == "deduplicated"
        [refused] = await engine.store.get_checkpoints("ann-3", 1, 1)
        assert (refused.status, refused.error and refused.error.code) == ("failed", "deduplicated")
        assert refused.error is not None
        assert "ann-2" in refused.error.message
        assert await first.result() == "mailed ann"
        assert await second.result() == "mailed ann"
        assert await bob.result() == "mailed bob"
        # Once her waiting step was sent, the key is free again.
        fourth = await engine.start(notify, "ann", run_id="ann-4")
        assert await fourth.result() == "mailed ann"
    assert sorted(sent) == ["ann", "ann", "ann", "bob"]


async def test_a_step_waiting_for_the_rate_limit_holds_its_key(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, serve=["mailers"]) as engine:
        first = await engine.start(paced, "ann")
        assert await first.result() == "called ann"
        # The next call of her key waits a minute for the rate limit...
        second = await engine.start(paced, "ann")
        await trio.sleep(1)
        # ...so a third is refused, and another key's call waits its turn.
        third = await engine.start(paced, "ann")
        other = await engine.start(paced, "bob")
        assert await third.result() == "deduplicated"
        assert await second.result() == "called ann"
        assert await other.result() == "called bob"
    assert sent == ["ann", "ann", "bob"]


async def dedup_race(url: str) -> None:
    """Ten calls of one key race on two engines sharing the store at
    ``url`` while the queue's slot is taken: exactly one waits, nine are
    refused. The slot stays taken until the nine were refused, whatever
    the clock: busy's mail (and ann's) takes until then."""
    sent.clear()
    began["busy"] = trio.Event()
    gates["busy"] = gates["ann"] = gate = trio.Event()
    try:
        async with (
            td.open_store(url) as store,
            td.open_engine(
                app, store=store, engine_id="a", seed=1, wall_clock=fixed_wall, serve=["mailers"]
            ) as a,
            td.open_engine(app, store=store, engine_id="b", seed=2, wall_clock=fixed_wall) as b,
        ):
            busy = await a.start(notify, "busy")
            await began["busy"].wait()
            handles: list[td.RunHandle[str]] = []

            async def start(i: int) -> None:
                handles.append(await (a, b)[i % 2].start(notify, "ann", run_id=f"race-{i}"))

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(start, i)
            results: list[str] = []

            async def result(handle: td.RunHandle[str]) -> None:
                results.append(await a.result(handle.id))
                if len(results) == 9:
                    # Nine refused: the one waiting may have the slot now.
                    gate.set()

            with trio.fail_after(600):
                async with trio.open_nursery() as nursery:
                    for handle in handles:
                        nursery.start_soon(result, handle)
            assert await busy.result() == "mailed busy"
    finally:
        del began["busy"], gates["busy"], gates["ann"]
    assert sorted(results) == ["deduplicated"] * 9 + ["mailed ann"]
    assert sent == ["busy", "ann"]


async def test_racing_calls_on_two_engines_let_one_wait(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    await dedup_race(f"sqlite:///{tmp_path / 'dedup.db'}")


async def test_a_refused_call_replays_as_refused(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    async with td.open_engine(
        app, store=url, seed=1, wall_clock=fixed_wall, serve=["mailers"]
    ) as engine:
        busy = await engine.start(notify, "busy")
        await trio.sleep(1)
        waits = await engine.start(notify, "ann")
        await engine.start(notify_later, "ann", run_id="refused")
        await trio.sleep(1)
        assert await busy.result() == "mailed busy"
        assert await waits.result() == "mailed ann"
    # Another engine replays the refused call from the run's history: still
    # refused, and nothing more is sent (the key is free by now).
    async with td.open_engine(
        app, store=url, seed=2, wall_clock=fixed_wall, serve=["mailers"]
    ) as engine:
        assert await engine.result("refused") == "later: deduplicated"
    assert sent == ["busy", "ann"]


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("no queue", "needs a flow-control queue"),
        ("local", "apply to remote steps"),
        ("empty", "non-empty string"),
    ],
)
async def test_a_misused_dedup_key_fails_the_call_clearly(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    how: str,
    match: str,
) -> None:
    async with open_test_engine(app, serve=["mailers"]) as engine:
        handle = await engine.start(misuse, how)
        with pytest.raises(td.RunFailed, match=match):
            await handle.result()
        # Nothing was recorded for the call.
        assert await engine.store.get_checkpoints(handle.id, 1, 1) == []
    assert sent == []
