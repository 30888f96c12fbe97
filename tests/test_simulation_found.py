"""Engine bugs the simulation found, each pinned by a direct test.

- With both a payload codec and a blob store, the engine did not find its
  blob store: `open_engine` puts the codec's store outermost, and the
  runtime looked for the blob store only at the top. Remote steps then sent
  their large inputs in the messages, and every result whose output a
  worker kept in the blob store failed with code ``blob_not_found`` (the
  decisions of remote workflows first: they are long).
- A breakpoint set (or cleared) by a write the store applied, then reported
  failed, was never seen by the engine that wrote it: its own watch skips
  the announcement the write carried, and it marked its copy stale only
  after a write that returned.
- A value a run published (`Context.set_event`), or an update's outcome, in
  a turn's write that the store applied, then reported failed, never woke
  the callers waiting for it on the engine that ran the turn (`get_event`,
  `Engine.update`): its own watch skips the announcement the write
  carried, the turn's wake-ups follow only a write that returned, and on a
  store that announces writes those callers read only when told. They
  waited until the run ended. The repair after such a write now wakes them.
- A caller of `get_event`, `Engine.update` or `stream` (or of `result` on a
  store other than the memory store) waiting on an engine that closed or
  crashed under it, in a task outside the engine's block, waited until the
  run ended: nothing tells a closed engine of a change. It now raises
  `td.EngineClosedError` (a client's, `trio.ClosedResourceError`), and the
  caller tries again elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio

import trio_durable as td
from trio_durable._features.messages._published import event_scope
from trio_durable._features.messages._updates import INBOX, update_scope
from trio_durable._stores._hook_ops import DeleteBreakpoint, PutBreakpoint
from trio_durable._stores._memory import MemoryStore
from trio_durable._stores._ops import Op, PutValue
from trio_durable._stores._wrapping import StoreWrapper
from trio_durable.testing._memory_blobs import MemoryBlobStore

app = td.App("found")

guarded_calls: list[str] = []


@app.step(group="blobs")
async def expand(size: int) -> str:
    return "x" * size


@app.step(group="blobs")
async def measure(text: str) -> int:
    return len(text)


@app.workflow()
async def large(ctx: td.Context, size: int) -> int:
    text: str = await ctx.step(expand, size)
    length: int = await ctx.step(measure, text + text)
    return length


@app.step()
async def guarded(key: str) -> str:
    guarded_calls.append(key)
    return f"ran {key}"


@app.workflow()
async def paused(ctx: td.Context, key: str) -> str:
    ran: str = await ctx.step(guarded, key)
    return ran


CODEC = td.AesGcmCodec(td.Keyring.single(b"a codec key for the tests, 32 B."))


async def test_large_remote_payloads_under_a_codec_go_through_the_blob_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A broker that refuses messages over 2,000 bytes: the 5,000-character
    # output and the 10,000-character input must travel as references.
    blobs = MemoryBlobStore()
    broker = "memory://found-codec-blobs?max_payload=2000"
    async with (
        td.open_engine(app, broker=broker, codec=CODEC, blobs=blobs, blob_threshold=1000) as engine,
        td.open_worker(app, broker=broker, groups=["blobs"], blobs=blobs, blob_threshold=1000),
    ):
        run = await engine.start(large, 5000, run_id="large")
        assert await run.result() == 10_000
    # The worker's output, the engine's input of the second step, and the
    # rows' payloads (encrypted, then offloaded) all went to the blob store.
    assert len(blobs.blobs) >= 3


class _WriteRaisesOnce(StoreWrapper):
    """A memory store that applies the first write of a breakpoint, then
    raises as a commit whose answer was lost does."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.raised = 0

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        results = await self.inner.apply(ops)
        if not self.raised and any(isinstance(op, PutBreakpoint | DeleteBreakpoint) for op in ops):
            self.raised += 1
            raise td.StoreError("the commit's answer was lost")
        return results


async def test_a_breakpoint_whose_write_raised_pauses_the_writers_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = _WriteRaisesOnce(MemoryStore())
    async with td.open_engine(app, store=store) as engine:
        # The engine read the breakpoints (none) as it opened.
        with pytest.raises(td.StoreError):
            await engine.set_breakpoint(workflow="paused", step="guarded")
        assert store.raised == 1
        await engine.start(paused, "a", run_id="paused-a")
        await engine.drain()
        assert [p.run_id for p in await engine.paused_steps()] == ["paused-a"]
        assert guarded_calls == []
        await engine.skip_step("paused-a", "skipped")
        assert await engine.result("paused-a") == "skipped"


@app.workflow()
async def publishes(ctx: td.Context, value: str) -> str:
    await ctx.wait_signal("go")
    ctx.set_event("token", value)
    await ctx.sleep(3600)  # the run goes on long after it published
    return value


@app.workflow()
async def adds(ctx: td.Context) -> list[int]:
    items: list[int] = []

    def add(n: int) -> int:
        items.append(n)
        return sum(items)

    ctx.update("add")(add)
    await ctx.sleep(3600)
    return items


class _WriteOfRaisesOnce(StoreWrapper):
    """A memory store that applies the first write holding an operation
    ``marks`` picks, then raises as a commit whose answer was lost does."""

    def __init__(self, inner: MemoryStore, marks: Callable[[Op], bool]) -> None:
        self.inner = inner
        self.marks = marks
        self.raised = 0

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        results = await self.inner.apply(ops)
        if not self.raised and any(self.marks(op) for op in ops):
            self.raised += 1
            raise td.StoreError("the commit's answer was lost")
        return results


async def test_a_value_published_by_a_write_that_raised_wakes_its_callers_here(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The turn's write that publishes the value.
    store = _WriteOfRaisesOnce(
        MemoryStore(),
        lambda op: isinstance(op, PutValue) and op.scope == event_scope("published"),
    )
    got: list[object] = []
    async with td.open_engine(app, store=store) as engine:
        await engine.start(publishes, "v", run_id="published")
        await engine.drain()

        async def wait_for_it() -> None:
            got.append(await engine.get_event("published", "token"))
            run = await store.inner.get_run("published")
            got.append(None if run is None else run.status)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_it)
            await trio.testing.wait_all_tasks_blocked()  # it waits for the value
            await engine.signal("published", "go")
        assert store.raised == 1
        # Woken by the repair after the write, not by the run's end an hour on.
        assert got == ["v", "suspended"]


async def test_an_update_applied_by_a_write_that_raised_returns_to_its_caller_here(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The turn's write that applies the update: it takes it out of the inbox.
    store = _WriteOfRaisesOnce(
        MemoryStore(),
        lambda op: (
            isinstance(op, PutValue)
            and op.scope == update_scope("adding")
            and op.key.startswith(INBOX)
            and op.value is None
        ),
    )
    async with td.open_engine(app, store=store) as engine:
        await engine.start(adds, run_id="adding")
        await engine.drain()
        assert await engine.update("adding", "add", 5, update_id="add-5") == 5
        assert store.raised == 1
        run = await store.inner.get_run("adding")
        assert run is not None
        assert run.status == "suspended"  # woken by the repair, not by the run's end
        assert await engine.update("adding", "add", 2, update_id="add-2") == 7


@app.workflow()
async def waits(ctx: td.Context) -> list[int]:
    items: list[int] = []

    def add(n: int) -> int:
        items.append(n)
        return sum(items)

    ctx.update("add")(add)
    await ctx.wait_signal("go")  # never sent
    return items


class _WriteOfHeld(StoreWrapper):
    """A memory store on which a write holding an operation ``marks`` picks
    never returns (until cancelled)."""

    def __init__(self, inner: MemoryStore, marks: Callable[[Op], bool]) -> None:
        self.inner = inner
        self.marks = marks

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if any(self.marks(op) for op in ops):
            await trio.sleep_forever()
        return await self.inner.apply(ops)


async def test_callers_waiting_on_an_engine_that_closes_are_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The turn that would apply the update never writes: its caller waits.
    store = _WriteOfHeld(
        MemoryStore(),
        lambda op: isinstance(op, PutValue) and op.key.startswith(INBOX) and op.value is None,
    )
    told: dict[str, str] = {}
    # Virtual time: a caller that waits for ever fails the test at once.
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            opened: list[td.Engine] = []
            ready = trio.Event()
            hosting = trio.CancelScope()

            async def host() -> None:
                with hosting:
                    async with td.open_engine(app, store=store) as engine:
                        opened.append(engine)
                        await engine.start(waits, run_id="waiting")
                        await engine.drain()
                        ready.set()
                        await trio.sleep_forever()

            async def wait(name: str, call: Callable[[], Awaitable[object]]) -> None:
                try:
                    told[name] = repr(await call())
                except td.EngineClosedError:
                    told[name] = "engine closed"

            async def read_stream() -> object:
                return [item async for item in opened[0].stream("waiting")]

            nursery.start_soon(host)
            await ready.wait()
            engine = opened[0]
            nursery.start_soon(wait, "get_event", lambda: engine.get_event("waiting", "never"))
            nursery.start_soon(wait, "update", lambda: engine.update("waiting", "add", 1))
            nursery.start_soon(wait, "stream", read_stream)
            await trio.testing.wait_all_tasks_blocked()
            assert told == {}
            hosting.cancel()  # the engine closes under its callers
    assert told == {
        "get_event": "engine closed",
        "update": "engine closed",
        "stream": "engine closed",
    }


async def test_callers_waiting_on_a_client_that_closes_are_told(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    told: list[str] = []
    async with td.open_engine(app, store=store) as engine:
        await engine.start(waits, run_id="waiting")
        await engine.drain()
    with trio.fail_after(3600):
        async with trio.open_nursery() as nursery:
            opened: list[td.Client] = []
            ready = trio.Event()
            hosting = trio.CancelScope()

            async def host() -> None:
                with hosting:
                    async with td.open_client(store=store, app=app) as client:
                        opened.append(client)
                        ready.set()
                        await trio.sleep_forever()

            async def wait() -> None:
                try:
                    told.append(repr(await opened[0].get_event("waiting", "never")))
                except trio.ClosedResourceError:
                    told.append("client closed")

            nursery.start_soon(host)
            await ready.wait()
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert told == []
            hosting.cancel()
    assert told == ["client closed"]
