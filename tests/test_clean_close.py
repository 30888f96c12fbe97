"""A clean close strands no remote step: the last engine of a process on
its memory broker marks the attempts still out on it as it closes, so an
engine of another process, which sees that process alive, sends them
again instead of waiting for ever.

In one process under the autojump clock, engine "a"'s broker is made to
count as a live other process's (`holder_alive`), as it does for an engine
elsewhere; tests/integration/test_clean_close_processes.py runs engine "a"
in a process of its own that lives on after the close.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store
from trio_durable import MemoryBroker
from trio_durable._kernel._carrier import LOST_WITH_BROKER, OUT, Carrier

app = td.App("clean-close")

calls: Counter[int] = Counter()
"""Calls of `work` by input, on any worker."""

hold: set[int] = set()
"""Inputs whose call of `work` never returns (its worker holds the task)."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    hold.clear()
    yield
    calls.clear()
    hold.clear()


@app.step(group="g")
async def work(x: int) -> int:
    calls[x] += 1
    if x in hold:
        await trio.sleep_forever()
    return 10 * x


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(work, x)


RUNS = 6


@pytest.fixture
def a_broker(monkeypatch: pytest.MonkeyPatch) -> MemoryBroker:
    """Engine a's broker, counted alive as the broker of a live process
    other than this one would be."""
    broker = MemoryBroker()
    holder = Carrier.of(broker, None).holder
    from trio_durable._kernel import _carrier

    real = _carrier.holder_alive
    monkeypatch.setattr(_carrier, "holder_alive", lambda name: name == holder or real(name))
    return broker


async def until_called(count: int) -> None:
    while sum(calls.values()) < count:  # noqa: ASYNC110 (steps run in the workers' tasks)
        await trio.sleep(0.01)


async def serve_a_until(
    open_test_engine: EngineFactory,
    store: td.Store,
    broker: MemoryBroker,
    close: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Engine a: starts the runs (their ids begin with "a"), runs the even
    steps to their end and holds the odd ones on its worker, then closes
    cleanly when told (its process, this one, lives on)."""
    hold.update(range(1, RUNS, 2))
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], engine_id="a", seed=1
    ) as a:
        for x in range(RUNS):
            await a.start(one, x, run_id=f"a-{x}")
        await until_called(RUNS)
        await trio.testing.wait_all_tasks_blocked()
        task_status.started()
        await close.wait()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_engine_elsewhere_sends_again_at_once_what_a_clean_close_left_out(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    a_broker: MemoryBroker,
    tmp_path: Path,
    kind: str,
) -> None:
    async with shared_store(kind, tmp_path) as store, trio.open_nursery() as nursery:
        close_a = trio.Event()
        await nursery.start(serve_a_until, open_test_engine, store, a_broker, close_a)
        recorded = {
            x for x in range(RUNS) if (await store.get_checkpoints(f"a-{x}"))[0].status != "pending"
        }
        assert recorded == {0, 2, 4}
        async with open_test_engine(
            app, store=store, broker=MemoryBroker(), serve=["g"], engine_id="b", seed=2
        ) as b:
            # a is open and holds the odd steps: b leaves them alone.
            await b.drain()
            assert calls == dict.fromkeys(range(RUNS), 1)
            hold.clear()
            closed_at = trio.current_time()
            close_a.set()
            with trio.fail_after(60):
                outputs = [await b.result(f"a-{x}") for x in range(RUNS)]
            # At once: no deadline of any kind was waited for.
            assert trio.current_time() == closed_at
        assert outputs == [10 * x for x in range(RUNS)]
        # No step whose result was recorded ran again; each held one ran
        # again once, on b, as a new attempt.
        assert calls == {x: 1 if x in recorded else 2 for x in range(RUNS)}
        for x in range(RUNS):
            [cp] = await store.get_checkpoints(f"a-{x}")
            assert cp.status == "completed"
            if x in recorded:
                assert (cp.attempts, cp.errors) == (1, ())
            else:
                assert (cp.attempts, [e.code for e in cp.errors]) == (2, [LOST_WITH_BROKER])


async def test_an_engine_opened_later_sends_again_what_a_clean_close_left_out(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    a_broker: MemoryBroker,
) -> None:
    store = td.MemoryStore()
    close_a = trio.Event()
    close_a.set()
    await serve_a_until(open_test_engine, store, a_broker, close_a)
    # What a left out says so: out on a broker whose last engine closed.
    holder = Carrier.of(a_broker, None).holder
    for x in range(1, RUNS, 2):
        [cp] = await store.get_checkpoints(f"a-{x}")
        assert cp.status == "pending"
        assert cp.mark is not None
        assert cp.mark.code == OUT
        assert cp.mark.details == {"broker": "memory://", "durable": False, "closed": holder}
        assert (await store.get_run(f"a-{x}")).status == "suspended"  # type: ignore[union-attr]
    hold.clear()
    await trio.sleep(100)
    opened_at = trio.current_time()
    async with open_test_engine(
        app, store=store, broker=MemoryBroker(), serve=["g"], engine_id="b", seed=2
    ) as b:
        with trio.fail_after(60):
            outputs = [await b.result(f"a-{x}") for x in range(RUNS)]
        assert trio.current_time() == opened_at
    assert outputs == [10 * x for x in range(RUNS)]
    assert calls == {x: 1 + x % 2 for x in range(RUNS)}


async def test_only_the_last_engine_on_a_broker_marks_what_is_out_on_it(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    a_broker: MemoryBroker,
) -> None:
    store = td.MemoryStore()
    holder = Carrier.of(a_broker, None).holder

    async def marks() -> list[object]:
        found = []
        for x in range(1, RUNS, 2):
            [cp] = await store.get_checkpoints(f"a-{x}")
            assert cp.mark is not None
            found.append(cp.mark.details)
        return found

    async with open_test_engine(app, store=store, broker=a_broker, engine_id="a2", seed=3) as other:
        close_a = trio.Event()
        close_a.set()
        await serve_a_until(open_test_engine, store, a_broker, close_a)
        # Another engine of this process still sends on that broker, which
        # still holds the tasks: nothing is marked.
        out = {"broker": "memory://", "durable": False, "holder": holder}
        assert await marks() == [out] * 3
        await other.drain()
    # The last one closed: now they are.
    closed = {"broker": "memory://", "durable": False, "closed": holder}
    assert await marks() == [closed] * 3


async def test_an_engine_on_the_same_broker_again_leaves_the_tasks_it_still_holds(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    a_broker: MemoryBroker,
) -> None:
    # The broker object outlived the engine (this test holds it): an
    # engine that sends on it again finds the tasks still there, marked or
    # not, and sends nothing again.
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, broker=a_broker, engine_id="a") as a:
        await a.start(one, 7, run_id="a-7")
        await a.drain()
    async with open_test_engine(
        app, store=store, broker=a_broker, serve=["g"], engine_id="a", seed=4
    ) as a:
        assert await a.result("a-7") == 70
    [cp] = await store.get_checkpoints("a-7")
    assert (cp.status, cp.attempts, cp.errors) == ("completed", 1, ())
    assert calls == {7: 1}
