"""No remote step is ever stranded: steps that went out on a broker that
kept nothing across its process are sent again when an engine recovers or
takes over their run; ``remote_redispatch`` applies to steps already out;
a send the broker refuses becomes a retry due later; `Engine.retry` sends
again the steps a suspended run waits on.

On the memory store under the autojump clock. A ``memory://<name>`` URL
names a broker that goes when its last user closes it, as a process's
memory broker goes with its process: closing an engine that holds it is
the kill -9 of these tests (tests/integration/test_stranded_processes.py
kills real processes).
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable import MemoryBroker
from trio_durable._brokers._base import Consumer, Outgoing, WorkerDescriptor
from trio_durable._kernel._carrier import BROKER_WAIT, LOST_WITH_BROKER, OUT, Carrier, holder_alive
from trio_durable._kernel._dispatch import BROKER_RETRY_CAP, QUICK_TRIES
from trio_durable._wire._messages import Result
from trio_durable.brokers import BrokerUnavailable, open_broker

app = td.App("stranded")

calls: Counter[int] = Counter()
"""Calls of `work` by input, on any worker."""

hold: set[int] = set()
"""Inputs whose call of `work` never returns (its worker holds the task)."""

slow: set[int] = set()
"""Inputs whose call of `work` takes a second."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    hold.clear()
    slow.clear()
    yield
    calls.clear()
    hold.clear()
    slow.clear()


@app.step(group="g", retry=td.Retry(attempts=3, backoff=1.0, jitter=0))
async def work(x: int) -> int:
    calls[x] += 1
    if x in hold:
        await trio.sleep_forever()
    if x in slow:
        await trio.sleep(1)
    return 10 * x


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(work, x)


@app.workflow()
async def fan(ctx: td.Context, n: int, concurrency: int | None) -> list[int]:
    return await ctx.all(work, list(range(n)), concurrency=concurrency)


@app.workflow()
async def sleeper(ctx: td.Context) -> None:
    await ctx.sleep(3600)


_names = itertools.count()


def fresh_url() -> str:
    """A memory broker of this test's own."""
    return f"memory://stranded-{next(_names)}"


async def step_cp(store: td.Store, run_id: str, seq: int = 1) -> td.Checkpoint:
    [cp] = await store.get_checkpoints(run_id, seq, seq)
    return cp


async def until_calls(count: int) -> None:
    """Wait until `work` was called ``count`` times in all."""
    while sum(calls.values()) < count:  # noqa: ASYNC110 (steps run in the worker's tasks)
        await trio.sleep(0.01)


# -- the property ------------------------------------------------------------------


async def test_the_memory_broker_says_it_keeps_nothing_across_its_process() -> None:
    assert MemoryBroker().durable is False
    async with open_broker("memory://") as broker:
        assert broker.durable is False


def test_a_holder_is_alive_while_its_process_runs_and_an_engine_of_it_sends_on_it() -> None:
    broker = MemoryBroker()
    carrier = Carrier.of(broker, "memory://x")
    assert carrier.holder is not None
    # This process: alive while an engine that sends on it is open.
    assert not holder_alive(carrier.holder)
    with carrier.open():
        assert holder_alive(carrier.holder)
        # The same broker object, the same name, whoever sends on it.
        assert Carrier.of(broker, None).holder == carrier.holder
    assert not holder_alive(carrier.holder)
    host, pid, start, n = carrier.holder.split("/")
    assert (host, int(pid)) == (socket.gethostname(), os.getpid())
    # Another process of this host: alive while it runs.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stat = Path(f"/proc/{child.pid}/stat").read_text()
        child_start = stat[stat.rfind(")") + 2 :].split()[19]
        other = f"{host}/{child.pid}/{child_start}/1"
        assert holder_alive(other)
        # Its pid with another start time is another process.
        assert not holder_alive(f"{host}/{child.pid}/1{child_start}/1")
    finally:
        child.kill()
        child.wait(timeout=30)
    assert not holder_alive(other)
    # Another host cannot be asked: gone.
    assert not holder_alive(f"elsewhere.{host}/{pid}/{start}/{n}")


# -- sent again when the broker that held them went away ----------------------------


async def test_a_step_out_on_a_memory_broker_that_went_away_is_sent_again_at_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    url = fresh_url()
    async with open_test_engine(app, store=store, broker=url) as engine:
        await engine.start(one, 3, run_id="r")
        await engine.drain()
    # No worker took it: it went with the broker.
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts, cp.started_at) == ("pending", 1, WALL_START)
    assert cp.mark is not None
    assert cp.mark.code == OUT
    assert cp.mark.details["broker"] == url
    assert cp.mark.details["durable"] is False
    await trio.sleep(100)
    async with open_test_engine(app, store=store, broker=url, serve=["g"]) as engine:
        with trio.fail_after(1):
            assert await engine.result("r") == 30
        # At once: no deadline of any kind was waited for.
        assert trio.current_time() == 100
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts) == ("completed", 2)
    assert [e.code for e in cp.errors] == [LOST_WITH_BROKER]
    assert calls == {3: 1}


async def test_a_step_its_broker_still_holds_is_not_sent_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # The same broker object, still open (a worker of this process holds
    # it): the task is still on it, and the next engine leaves it there.
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with open_test_engine(app, store=store, broker=broker) as engine:
        await engine.start(one, 4, run_id="r")
        await engine.drain()
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        assert await engine.result("r") == 40
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts, cp.errors) == ("completed", 1, ())
    assert calls == {4: 1}


@pytest.mark.parametrize("concurrency", [None, 4])
async def test_a_fan_recovered_from_a_lost_broker_runs_again_only_members_not_recorded(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    concurrency: int | None,
) -> None:
    store = td.MemoryStore()
    url = fresh_url()
    size = 12
    hold.update(range(1, size, 2))
    async with open_test_engine(app, store=store, broker=url, serve=["g"]) as engine:
        await engine.start(fan, size, concurrency, run_id="f")
        # Every even member completes; the odd ones hang on the worker (and,
        # with a window, hold back the members after them).
        in_flight = size if concurrency is None else concurrency
        await until_calls(in_flight)
        await trio.testing.wait_all_tasks_blocked()
    recorded = {cp.seq - 1 for cp in await store.get_checkpoints("f") if cp.status == "completed"}
    assert recorded
    assert all(x % 2 == 0 for x in recorded)
    before = Counter(calls)
    hold.clear()
    async with open_test_engine(app, store=store, broker=url, serve=["g"]) as engine:
        with trio.fail_after(60):
            assert await engine.result("f") == [10 * x for x in range(size)]
    # No member whose result was recorded ran again.
    assert all(calls[x] == before[x] for x in recorded)
    assert all(calls[x] >= 1 for x in range(size))
    resent = [cp for cp in await store.get_checkpoints("f") if cp.errors]
    assert resent
    assert all([e.code for e in cp.errors] == [LOST_WITH_BROKER] for cp in resent)


async def test_a_decision_task_out_on_a_memory_broker_that_went_away_is_sent_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    deciders = td.App("deciders")

    @deciders.step(group="g")
    async def double(x: int) -> int:
        return 2 * x

    @deciders.workflow(group="orders")
    async def decided(ctx: td.Context, x: int) -> int:
        return await ctx.step(double, x)

    service = td.App("service")
    service.remote_workflow("decided", group="orders")
    store = td.MemoryStore()
    url = fresh_url()
    async with open_test_engine(service, store=store, broker=url) as engine:
        await engine.start("decided", 5, run_id="d")
        await engine.drain()
    [marker] = await store.get_records("d")
    assert (marker.kind, marker.status, marker.attempts) == ("decision", "pending", 1)
    async with (
        open_broker(url) as broker,
        td.open_worker(deciders, broker=broker, groups=["orders", "g"]),
        open_test_engine(service, store=store, broker=url) as engine,
    ):
        with trio.fail_after(5):
            assert await engine.result("d") == 10
    [marker] = await store.get_records("d")
    # The lost task, and the one sent again, whose worker ran the step at
    # once (it serves the step's group ``g``).
    assert (marker.status, marker.attempts) == ("completed", 2)
    assert [e.code for e in marker.errors] == [LOST_WITH_BROKER]


# -- late results of the attempt that was sent again --------------------------------


async def test_a_late_result_of_an_older_attempt_fails_nothing_and_a_late_success_counts(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    url = fresh_url()
    async with open_test_engine(app, store=store, broker=url) as engine:
        await engine.start(one, 6, run_id="r")
        await engine.drain()
    async with (
        open_broker(url) as broker,
        open_test_engine(app, store=store, broker=broker) as engine,
    ):
        await engine.drain()
        # Sent again on open, as attempt 2 (no worker takes it).
        cp = await step_cp(store, "r")
        assert (cp.status, cp.attempts) == ("pending", 2)
        # Each attempt went out as an execution of its own.
        first, _ = cp.executions

        async def deliver(**fields: Any) -> None:
            result = Result(
                run_id="r", seq=1, attempt=1, step="work", workflow="one", execution=first, **fields
            )
            await broker.dispatch([Outgoing(queue=engine.results_queue, body=result.encode())])
            await engine.drain()

        await deliver(status="failed", error="gone", retryable=False)
        await deliver(status="failed", error="again", retryable=True)
        assert await step_cp(store, "r") == cp
        assert engine.statistics().rejected_stale == 2
        # A success of the step is a success, whichever of its executions
        # ran it.
        await deliver(status="completed", output="60")
        assert await engine.result("r") == 60
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts, cp.output) == ("completed", 2, "60")


# -- remote_redispatch applies to steps already out ---------------------------------


@attrs.define(eq=False)
class DurableView:
    """A memory broker seen as a durable one (a server's), whose queues a
    test can purge: a server that lost what it acknowledged."""

    inner: MemoryBroker = attrs.field(factory=MemoryBroker)

    @property
    def durable(self) -> bool:
        return True

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def purge(self, queue: str) -> int:
        """Drop every message waiting on ``queue``."""
        purged = 0
        async with self.inner.open_consumer(queue, prefetch=1000) as consumer:
            while self.inner.depth(queue):
                taken = await consumer.receive(1000)
                await consumer.ack(taken)
                purged += len(taken)
        return purged


@pytest.mark.parametrize("before", [None, (60.0, 1)])
async def test_remote_redispatch_set_later_applies_to_steps_already_out(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    before: tuple[float, int] | None,
) -> None:
    store = td.MemoryStore()
    broker = DurableView()
    async with open_test_engine(app, store=store, broker=broker, remote_redispatch=before) as e:
        await e.start(one, 7, run_id="r")
        await e.drain()
    cp = await step_cp(store, "r")
    assert cp.wake_at == (None if before is None else WALL_START + 60)
    assert cp.mark is not None
    assert cp.mark.details == {"broker": "DurableView", "durable": True}
    # The server lost it: nothing would ever send it again.
    assert await broker.purge("g") == 1
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], remote_redispatch=(5.0, 2)
    ) as engine:
        with trio.fail_after(30):
            assert await engine.result("r") == 70
        # Five seconds after it was sent (at 0), by this engine's setting.
        assert trio.current_time() == 5
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts) == ("completed", 2)
    assert [e.code for e in cp.errors] == ["redispatched"]
    assert calls == {7: 1}


# -- refused sends ------------------------------------------------------------------


@attrs.define(eq=False)
class Refusing(DurableView):
    """A broker whose server is away while ``down``: every dispatch fails."""

    down: bool = False
    refused_at: list[float] = attrs.field(factory=list)

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        if self.down and any(m.queue == "g" for m in messages):
            self.refused_at.append(trio.current_time())
            raise BrokerUnavailable("connection refused")
        await self.inner.dispatch(messages)


async def test_a_refused_send_becomes_a_claimed_retry_that_backs_off_to_a_ceiling(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    broker = Refusing(down=True)
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(one, 8, run_id="r")
        with trio.move_on_after(1):
            await engine.result("r")
        cp = await step_cp(store, "r")
        # Waiting for the broker, by claim: not out, due again soon.
        assert (cp.status, cp.started_at, cp.attempts) == ("pending", None, 1)
        assert cp.mark is not None
        assert cp.mark.code == BROKER_WAIT
        assert "connection refused" in cp.mark.message
        # Due a second (less jitter) after the last quick try of the send.
        assert cp.wake_at is not None
        assert len(broker.refused_at) == QUICK_TRIES
        assert 0.75 <= cp.wake_at - WALL_START - broker.refused_at[-1] <= 1.0
        [entry] = (await engine.history("r")).entries
        assert entry.waiting is not None
        assert entry.waiting.startswith("waiting for the broker")
        assert entry.out_on is None
        # Down for ten minutes: the retries back off (as long as the
        # outage lasted so far), to the ceiling.
        await trio.sleep(600)
        tries = broker.refused_at
        assert len(tries) % QUICK_TRIES == 0
        # The last try of each send, and the first of the next.
        ends = tries[QUICK_TRIES - 1 :: QUICK_TRIES]
        starts = tries[QUICK_TRIES::QUICK_TRIES]
        assert len(starts) >= 10
        for end, start in zip(ends, starts, strict=False):
            backoff = min(BROKER_RETRY_CAP, max(1.0, end - ends[0]))
            assert 0.75 * backoff <= start - end <= backoff, (end - ends[0], start - end)
        assert starts[-1] - ends[len(starts) - 1] >= 0.75 * BROKER_RETRY_CAP
        # Back: the next retry sends it, with no setting changed.
        broker.down = False
        back = trio.current_time()
        assert await engine.result("r") == 80
        assert trio.current_time() - back <= BROKER_RETRY_CAP
    cp = await step_cp(store, "r")
    assert (cp.status, cp.attempts) == ("completed", 1)
    assert calls == {8: 1}


async def test_a_window_fans_refused_starts_wait_for_the_broker_too(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # A sliding window starts its next members from the result consumer:
    # a start the broker refuses there becomes a retry of the send too.
    store = td.MemoryStore()
    broker = Refusing()
    size = 9
    slow.update(range(size))
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(fan, size, 3, run_id="f")
        await until_calls(3)
        # The first three are out; the members they start when they end
        # (at t=1) meet a broker that is away.
        broker.down = True
        await trio.sleep(3)
        waiting = [
            cp.seq
            for cp in await store.get_checkpoints("f")
            if cp.mark is not None and cp.mark.code == BROKER_WAIT
        ]
        assert waiting == [4, 5, 6]
        await trio.sleep(60)
        broker.down = False
        with trio.fail_after(BROKER_RETRY_CAP + 10):
            assert await engine.result("f") == [10 * x for x in range(size)]
    assert calls == dict.fromkeys(range(size), 1)


# -- retry of a suspended run -------------------------------------------------------


async def test_retry_of_a_suspended_run_sends_its_remote_steps_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    broker = DurableView()
    async with open_test_engine(app, store=store, broker=broker) as engine:
        await engine.start(fan, 3, None, run_id="f")
        await engine.start(sleeper, run_id="s")
        await engine.drain()
        # The server lost them.
        assert await broker.purge("g") == 3
        await trio.sleep(10)
        retried = await engine.retry("f")
        assert (retried.status, retried.wake_at) == ("suspended", WALL_START + 10)
        await engine.drain()
        members = await store.get_checkpoints("f")
        assert [(cp.attempts, [e.code for e in cp.errors]) for cp in members] == [
            (2, ["retried"])
        ] * 3
        assert all(cp.started_at == WALL_START + 10 for cp in members)
        async with td.open_worker(app, broker=broker, groups=["g"]):
            assert await engine.result("f") == [0, 10, 20]
        # A run waiting on no remote step is not retried.
        with pytest.raises(td.InvalidRunStateError, match="waits on no remote step"):
            await engine.retry("s")
        with pytest.raises(td.InvalidRunStateError, match="only failed or dead runs"):
            await engine.retry("f")
    assert calls == {0: 1, 1: 1, 2: 1}


async def test_retry_of_a_suspended_run_with_a_refused_send_tries_at_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    broker = Refusing(down=True)
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(one, 9, run_id="r")
        for _ in range(6):
            # Well into the backoff: the next retry is far off.
            await trio.sleep(BROKER_RETRY_CAP)
        cp = await step_cp(store, "r")
        assert cp.wake_at is not None
        broker.down = False
        await engine.retry("r")
        assert await engine.result("r") == 90
        # At once, not at the retry's due time.
        assert WALL_START + trio.current_time() < cp.wake_at


# -- history ------------------------------------------------------------------------


async def test_the_history_says_on_which_broker_a_step_is_out_and_since_when(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    url = fresh_url()
    async with open_test_engine(app, broker=url) as engine:
        await engine.start(one, 1, run_id="r")
        await engine.drain()
        [entry] = (await engine.history("r")).entries
        assert (entry.status, entry.out_on, entry.started_at) == ("pending", url, WALL_START)
        assert entry.waiting is None
        detail = await engine.run_detail("r")
        assert detail.timeline == (entry,)
