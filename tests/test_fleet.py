"""Worker announcements and the fleet: descriptors refreshed by heartbeats and
forgotten after their time to live, `Engine.fleet` with its deploys and
disagreements, `App.registration_hash`, and routing of steps that require a
capability no live worker offers (parking with code ``blocked``)."""

from __future__ import annotations

import logging
import math
import platform
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from trio_durable._brokers._base import (
    Broker,
    BrokerUnavailable,
    Consumer,
    Outgoing,
    WorkerDescriptor,
)
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._front._open_worker import open_worker
from trio_durable._front._worker import Worker
from trio_durable._front._worker import crash as crash_worker
from trio_durable._kernel._dispatch import broker_queue, served_broker_queues
from trio_durable._kernel._fleet import Disagreement, aggregate

HEARTBEAT = 5.0
TTL = 15.0
RECHECK = 5.0


def running_worker(
    app: td.App, broker: Broker, *, groups: Sequence[str], instance_id: str, **kwargs: object
) -> AbstractAsyncContextManager[Worker]:
    """`open_worker` with the fixed wall clock and this module's heartbeat."""
    return open_worker(
        app,
        broker=broker,
        groups=groups,
        instance_id=instance_id,
        heartbeat=HEARTBEAT,
        ttl=TTL,
        wall_clock=fixed_wall,
        seed=0,
        **kwargs,  # type: ignore[arg-type]
    )


class ServerLikeBroker:
    """A view of a `MemoryBroker` whose announcements need heartbeats, as a
    broker on a server's do (`Broker.needs_heartbeat`): each lapses ``ttl``
    seconds after the worker last announced itself."""

    needs_heartbeat = True

    def __init__(self, inner: MemoryBroker) -> None:
        self.inner = inner
        self.announcements: list[tuple[float, str, float]] = []

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        self.announcements.append((trio.current_time(), descriptor.instance_id, ttl))
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


class CrashingBroker(ServerLikeBroker):
    """A `ServerLikeBroker` whose ``withdraw`` fails, so a worker that
    leaves its block goes away like a crashed process: its announcement stays
    until its time to live runs out."""

    def __init__(self, inner: MemoryBroker) -> None:
        super().__init__(inner)
        self.withdraw_attempts: list[str] = []

    async def withdraw(self, instance_id: str) -> None:
        self.withdraw_attempts.append(instance_id)
        await trio.lowlevel.checkpoint()
        raise BrokerUnavailable("the process died before it could withdraw")


# -- A deploy, built on demand ----------------------------------------------------


def build_app(
    *,
    reverse: bool = False,
    charge_group: str = "payments",
    charge_requires: Sequence[str] = (),
    charge_retry: td.Retry | None = None,
    charge_timeout: float | None = None,
    checkout_versions: Sequence[str] = ("1",),
    app_version: str = "1.0",
    charge_queue: int | None = None,
) -> td.App:
    """One build of the "shop" app; ``reverse`` registers everything in the
    opposite order, which must not change what it announces."""
    app = td.App("shop", version=app_version)

    async def charge(amount: int) -> int:
        return amount

    async def ship(item: str) -> str:
        return item

    async def audit(note: str) -> str:
        return note

    async def checkout(ctx: td.Context, amount: int) -> int:
        return amount

    async def report(ctx: td.Context) -> None:
        return None

    registrations: list[Callable[[], object]] = [
        lambda: app.step(
            group=charge_group,
            requires=charge_requires,
            retry=charge_retry,
            timeout=charge_timeout,
            queue=None if charge_queue is None else "charges",
        )(charge),
        *(
            [lambda: app.queue("charges", concurrency=charge_queue)]
            if charge_queue is not None
            else []
        ),
        lambda: app.step(group="shipping", requires=["truck", "crane"])(ship),
        lambda: app.step()(audit),
        *(
            (lambda version=version: app.workflow(name="checkout", version=version)(checkout))
            for version in checkout_versions
        ),
        lambda: app.workflow()(report),
    ]
    for register in reversed(registrations) if reverse else registrations:
        register()
    return app


# -- Descriptors and heartbeats ---------------------------------------------------


async def test_descriptor_says_what_the_worker_serves(autojump_clock: trio.abc.Clock) -> None:
    app = build_app(checkout_versions=("1", "2"), charge_requires=["gpu"])
    broker = MemoryBroker()
    async with running_worker(
        app,
        broker,
        groups=["payments", "shipping@acme"],
        instance_id="w-1",
        capabilities=["gpu", "crane", "gpu"],
    ):
        [d] = await broker.worker_descriptors()
    assert d.instance_id == "w-1"
    assert d.app == "shop"
    assert d.app_version == "1.0"
    assert d.runtime["python"] == platform.python_version()
    assert d.runtime["trio"] == trio.__version__
    assert d.groups == ("payments", "shipping@acme")
    # Only the remote steps of the groups it serves; the local step is not
    # announced. Requirements are sorted; retries and timeouts are told, for
    # an engine without the steps' code, and their parameters, for the
    # safety checks of a new build.
    default_retry = {"attempts": 3, "backoff": 1.0, "max_backoff": 60.0, "jitter": 0.1}
    assert d.steps == {
        "charge": {
            "group": "payments",
            "requires": ["gpu"],
            "retry": default_retry,
            "timeout": None,
            "queue": None,
            "params": [{"name": "amount", "type": ["integer"]}],
        },
        "ship": {
            "group": "shipping",
            "requires": ["crane", "truck"],
            "retry": default_retry,
            "timeout": None,
            "queue": None,
            "params": [{"name": "item", "type": ["string"]}],
        },
    }
    # It serves neither "checkout" nor "report" as a group: no "group".
    assert d.workflows == {
        "checkout": {
            "versions": ["1", "2"],
            "on_error": [],
            "routes": {"1": [], "2": []},
            "params": [{"name": "amount", "type": ["integer"]}],
        },
        "report": {"versions": ["1"], "on_error": [], "routes": {"1": []}, "params": []},
    }
    assert d.capabilities == ("crane", "gpu")
    assert d.registration_hash == app.registration_hash()
    # No build given: the registration hash is its build.
    assert d.build_id == app.registration_hash()
    assert (d.announced_at, d.held) == (WALL_START, True)


async def test_heartbeat_refreshes_the_announcement(autojump_clock: trio.abc.Clock) -> None:
    app = build_app()
    broker = ServerLikeBroker(MemoryBroker())
    seen: list[tuple[float, float, bool]] = []
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1"):
        # Well past the time to live: heartbeats keep the worker announced.
        for tick in range(10):
            await trio.sleep_until(tick * HEARTBEAT + 1.0)
            [d] = await broker.worker_descriptors()
            seen.append((trio.current_time(), d.announced_at - WALL_START, d.held))
    assert seen == [(tick * HEARTBEAT + 1.0, tick * HEARTBEAT, False) for tick in range(10)]
    # One announcement as it opened, then one per heartbeat, each with the
    # time to live.
    assert broker.announcements == [(tick * HEARTBEAT, "w-1", TTL) for tick in range(10)]


async def test_on_the_memory_broker_a_worker_announces_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The memory broker lives in its workers' process, so what they
    announce goes with it: a worker announces itself once, until it
    withdraws, and nothing wakes it on a timer meanwhile."""
    app = build_app()
    broker = MemoryBroker()
    assert broker.needs_heartbeat is False
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1") as worker:
        assert worker.heartbeats is False
        [d] = await broker.worker_descriptors()
        assert (d.announced_at, d.held) == (WALL_START, True)
        # A year on, with no heartbeat between: the one announcement holds.
        # (Under the autojump clock, one jump: nothing of the worker woke.)
        await trio.sleep(365 * 86_400.0)
        [d] = await broker.worker_descriptors()
        assert (d.announced_at, d.held) == (WALL_START, True)
    assert await broker.worker_descriptors() == []


async def test_on_the_memory_broker_a_worker_announces_registrations_made_since_as_tasks_come(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    app = build_app()
    broker = ServerLikeBroker(MemoryBroker())
    # The memory broker's own rule, with its announcements counted.
    broker.needs_heartbeat = False
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1"):
        await trio.sleep(60.0)
        assert broker.announcements == [(0.0, "w-1", math.inf)]

        charge = app.get_step("charge")
        assert charge is not None

        async def pay(ctx: td.Context, amount: int) -> int:
            result: int = await ctx.step(charge, amount)
            return result

        # Registered after the worker opened: announced with no timer, as
        # the worker's next tasks arrive.
        paying = app.workflow(name="pay")(pay)
        await trio.sleep(60.0)
        assert broker.announcements == [(0.0, "w-1", math.inf)]
        async with open_test_engine(app, broker=broker) as engine:
            run = await engine.start(paying, 5)
            assert await engine.result(run.id) == 5
        assert broker.announcements == [(0.0, "w-1", math.inf), (120.0, "w-1", math.inf)]
        [d] = await broker.worker_descriptors()
        assert "pay" in d.workflows
        assert d.registration_hash == app.registration_hash()
        assert (d.announced_at, d.held) == (WALL_START + 120.0, True)
        # Nothing changed since: more tasks announce nothing more.
        assert await engine_run(open_test_engine, app, broker, paying) == 7
        assert len(broker.announcements) == 2
    assert await broker.worker_descriptors() == []


async def engine_run(
    open_test_engine: EngineFactory, app: td.App, broker: Broker, wf: td.Workflow[..., int]
) -> int:
    async with open_test_engine(app, broker=broker) as engine:
        result: int = await engine.result((await engine.start(wf, 7)).id)
    return result


async def test_on_the_memory_broker_a_crashed_worker_lapses_its_ttl_later(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A simulated crash (`trio_durable.testing`) leaves a worker's
    announcement to lapse, as a killed process's would, even where it was
    held until withdrawn."""
    app = build_app()
    broker = MemoryBroker()
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1") as worker:
        await trio.sleep(100.0)
        crash_worker(worker)
    assert trio.current_time() == 100.0
    [d] = await broker.worker_descriptors()
    # As a heartbeat at the crash would have left it.
    assert (d.announced_at, d.held) == (WALL_START + 100.0, False)
    await trio.sleep_until(100.0 + TTL - 0.5)
    assert [d.instance_id for d in await broker.worker_descriptors()] == ["w-1"]
    await trio.sleep_until(100.0 + TTL)
    assert await broker.worker_descriptors() == []


async def test_clean_exit_withdraws_at_once(autojump_clock: trio.abc.Clock) -> None:
    app = build_app()
    broker = MemoryBroker()
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1"):
        await trio.sleep(7.0)
        assert [d.instance_id for d in await broker.worker_descriptors()] == ["w-1"]
    assert trio.current_time() == 7.0
    assert await broker.worker_descriptors() == []
    assert await broker.worker_groups() == []


@pytest.mark.parametrize("exit_at", [2 * HEARTBEAT, 2 * HEARTBEAT + 3.0])
async def test_clean_exit_leaves_no_ghost_announcement(
    autojump_clock: trio.abc.Clock, exit_at: float
) -> None:
    """Leaving at the very moment a heartbeat is due must not re-announce the
    worker after it withdrew."""
    app = build_app()
    for _ in range(20):
        broker = MemoryBroker()
        start = trio.current_time()
        async with running_worker(app, broker, groups=["payments"], instance_id="w-1"):
            await trio.sleep_until(start + exit_at)
        assert await broker.worker_descriptors() == []
        await trio.sleep(1.0)
        assert await broker.worker_descriptors() == []


async def test_crashed_worker_is_forgotten_when_its_ttl_runs_out(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    app = build_app()
    broker = MemoryBroker()
    crashing = CrashingBroker(broker)
    caplog.set_level(logging.WARNING, logger="trio_durable")
    async with running_worker(app, crashing, groups=["payments"], instance_id="w-1"):
        await trio.sleep_until(12.0)
    # The last heartbeat was at 10; nothing withdrew the announcement.
    assert crashing.withdraw_attempts == ["w-1"]
    assert "w-1 could not withdraw" in caplog.text
    await trio.sleep_until(10.0 + TTL - 0.5)
    [d] = await broker.worker_descriptors()
    assert d.announced_at == WALL_START + 10.0
    await trio.sleep_until(10.0 + TTL)
    assert await broker.worker_descriptors() == []
    assert await broker.worker_groups() == []


async def test_engine_sees_live_workers_by_group(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    app = build_app()
    broker = MemoryBroker()
    crashing = CrashingBroker(broker)
    async with open_test_engine(app, broker=broker) as engine:
        assert await engine.broker.worker_groups() == []
        async with trio.open_nursery() as nursery:
            stop_a = trio.Event()
            stop_b = trio.Event()

            async def serve(
                b: Broker, groups: list[str], instance_id: str, stop: trio.Event
            ) -> None:
                async with running_worker(app, b, groups=groups, instance_id=instance_id):
                    await stop.wait()

            nursery.start_soon(serve, broker, ["payments"], "w-a", stop_a)
            nursery.start_soon(serve, crashing, ["payments", "shipping@acme"], "w-b", stop_b)
            await trio.testing.wait_all_tasks_blocked()
            assert trio.current_time() == 0.0

            async def ids(group: str | None = None) -> list[str]:
                return [d.instance_id for d in await engine.broker.worker_descriptors(group)]

            assert await ids() == ["w-a", "w-b"]
            assert await ids("payments") == ["w-a", "w-b"]
            assert await ids("shipping@acme") == ["w-b"]
            assert await ids("shipping") == []
            assert await engine.broker.worker_groups() == ["payments", "shipping@acme"]

            # Still there long after one time to live, thanks to heartbeats.
            await trio.sleep_until(3 * TTL)
            assert await ids() == ["w-a", "w-b"]

            stop_a.set()
            await trio.testing.wait_all_tasks_blocked()
            assert await ids("payments") == ["w-b"]
            assert await engine.broker.worker_groups() == ["payments", "shipping@acme"]

            # w-b "crashes" right after its heartbeat at 45.
            stop_b.set()
        assert trio.current_time() == 3 * TTL
        assert await ids() == ["w-b"]
        await trio.sleep_until(3 * TTL + TTL - 0.5)
        assert await ids() == ["w-b"]
        await trio.sleep_until(3 * TTL + TTL)
        assert await ids() == []
        assert await engine.broker.worker_groups() == []


# -- The fleet --------------------------------------------------------------------


@asynccontextmanager
async def fleet_of(
    broker: Broker, *members: tuple[td.App, str, Sequence[str]]
) -> AsyncIterator[None]:
    """Run one worker per (app, instance id, groups) until the block exits."""
    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        for app, instance_id, groups in members:

            async def serve(
                app: td.App = app, instance_id: str = instance_id, groups: Sequence[str] = groups
            ) -> None:
                async with running_worker(app, broker, groups=groups, instance_id=instance_id):
                    await stop.wait()

            nursery.start_soon(serve)
        await trio.testing.wait_all_tasks_blocked()
        try:
            yield
        finally:
            stop.set()


async def test_identical_workers_agree(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    # Two processes of one deploy: separate App objects, same registrations.
    one, two = build_app(), build_app(reverse=True)
    async with (
        open_test_engine(one, broker=broker) as engine,
        fleet_of(broker, (one, "w-1", ["payments", "shipping"]), (two, "w-2", ["payments"])),
    ):
        fleet = await engine.fleet()
    assert [d.instance_id for d in fleet.workers] == ["w-1", "w-2"]
    assert fleet.workflows == {"checkout": ("w-1", "w-2"), "report": ("w-1", "w-2")}
    assert fleet.steps == {"charge": ("w-1", "w-2"), "ship": ("w-1",)}
    assert fleet.deploys == {one.registration_hash(): ("w-1", "w-2")}
    assert fleet.disagreements == ()


async def test_rollout_shows_disagreements(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    old = build_app()
    new = build_app(charge_group="billing", charge_requires=["pci"], checkout_versions=("1", "2"))
    async with (
        open_test_engine(old, broker=broker) as engine,
        fleet_of(
            broker,
            (new, "w-new", ["billing"]),
            (old, "w-old-1", ["payments"]),
            (old, "w-old-2", ["payments", "shipping"]),
        ),
    ):
        fleet = await engine.fleet()
    assert fleet.steps == {"charge": ("w-new", "w-old-1", "w-old-2"), "ship": ("w-old-2",)}
    assert fleet.workflows == {
        "checkout": ("w-new", "w-old-1", "w-old-2"),
        "report": ("w-new", "w-old-1", "w-old-2"),
    }
    assert fleet.deploys == {
        new.registration_hash(): ("w-new",),
        old.registration_hash(): ("w-old-1", "w-old-2"),
    }
    assert len(fleet.deploys) == 2
    assert fleet.disagreements == (
        Disagreement(
            kind="group",
            subject="charge",
            values={'"billing"': ("w-new",), '"payments"': ("w-old-1", "w-old-2")},
        ),
        Disagreement(
            kind="requires",
            subject="charge",
            values={'["pci"]': ("w-new",), "[]": ("w-old-1", "w-old-2")},
        ),
        Disagreement(
            kind="version",
            subject="checkout",
            values={'["1","2"]': ("w-new",), '["1"]': ("w-old-1", "w-old-2")},
        ),
    )
    # The same announcements in any order aggregate to the same fleet.
    assert aggregate(list(reversed(fleet.workers))) == fleet


async def test_rollout_ends_when_old_workers_go(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    old = build_app()
    new = build_app(checkout_versions=("2",))
    async with open_test_engine(old, broker=broker) as engine:
        async with fleet_of(broker, (new, "w-new", ["payments"])):
            async with fleet_of(broker, (old, "w-old", ["payments"])):
                [disagreement] = (await engine.fleet()).disagreements
                assert disagreement == Disagreement(
                    kind="version",
                    subject="checkout",
                    values={'["1"]': ("w-old",), '["2"]': ("w-new",)},
                )
            fleet = await engine.fleet()
            assert fleet.disagreements == ()
            assert fleet.deploys == {new.registration_hash(): ("w-new",)}
        assert (await engine.fleet()).workers == ()


# -- Registration hashes ----------------------------------------------------------


def test_registration_hash_ignores_registration_order() -> None:
    assert build_app().registration_hash() == build_app(reverse=True).registration_hash()
    assert (
        build_app(checkout_versions=("1", "2")).registration_hash()
        == build_app(checkout_versions=("2", "1"), reverse=True).registration_hash()
    )
    # Requirements are a set.
    assert (
        build_app(charge_requires=["gpu", "pci"]).registration_hash()
        == build_app(charge_requires=["pci", "gpu", "gpu"]).registration_hash()
    )
    # Equal numbers are equal, however they are written.
    assert (
        build_app(
            charge_retry=td.Retry(attempts=3, backoff=2, max_backoff=60, jitter=0), charge_timeout=5
        ).registration_hash()
        == build_app(
            charge_retry=td.Retry(attempts=3, backoff=2.0, max_backoff=60.0, jitter=0.0),
            charge_timeout=5.0,
        ).registration_hash()
    )
    # The default retry, given or not.
    assert build_app(charge_retry=td.Retry()).registration_hash() == build_app().registration_hash()
    # The app's own version labels a build for people; it is not a registration.
    assert build_app(app_version="2.0").registration_hash() == build_app().registration_hash()


@pytest.mark.parametrize(
    "change",
    [
        {"charge_retry": td.Retry(attempts=4)},
        {"charge_retry": td.Retry(backoff=1.5)},
        {"charge_retry": td.Retry(jitter=0.0)},
        {"charge_timeout": 30.0},
        {"charge_group": "billing"},
        {"charge_requires": ["gpu"]},
        {"checkout_versions": ("2",)},
        {"checkout_versions": ("1", "2")},
        {"charge_queue": 2},
    ],
)
def test_registration_hash_changes_with_a_registration(change: dict[str, object]) -> None:
    changed = build_app(**change)  # type: ignore[arg-type]
    assert changed.registration_hash() != build_app().registration_hash()
    assert changed.registration_hash() == build_app(reverse=True, **change).registration_hash()  # type: ignore[arg-type]


def test_registration_hash_changes_with_a_flow_queue_limit() -> None:
    assert (
        build_app(charge_queue=2).registration_hash()
        != build_app(charge_queue=3).registration_hash()
    )


def test_registration_hash_changes_with_a_queue_rate_limit() -> None:
    def app(rate: td.RateLimit | None) -> td.App:
        a = td.App("shop")
        a.queue("calls", concurrency=2, rate_limit=rate)
        return a

    assert app(None).registration_hash() != app(td.RateLimit(10, 1.0)).registration_hash()
    assert (
        app(td.RateLimit(10, 1)).registration_hash()
        == app(td.RateLimit(10, 1.0)).registration_hash()
    )


def test_registration_hash_follows_registrations_made_after_it_was_read() -> None:
    app = build_app()
    first = app.registration_hash()
    assert app.registration_hash() == first

    @app.step()
    async def later() -> None: ...

    assert app.registration_hash() != first
    fresh = build_app()
    fresh.step(later.fn)
    assert app.registration_hash() == fresh.registration_hash()


# -- Capability routing -----------------------------------------------------------

gpu_app = td.App("render")


@gpu_app.step(group="render", requires=["gpu"])
async def render(scene: str) -> str:
    return f"rendered {scene}"


@gpu_app.step(group="render")
async def thumbnail(scene: str) -> str:
    return f"thumbnail of {scene}"


@gpu_app.step(group="plain")
async def tally(n: int) -> int:
    return n + 1


@gpu_app.workflow()
async def film(ctx: td.Context, scene: str) -> str:
    return await ctx.step(render, scene)


@gpu_app.workflow()
async def preview(ctx: td.Context, scene: str) -> str:
    return await ctx.step(thumbnail, scene)


@gpu_app.workflow()
async def reel(ctx: td.Context, scenes: list[str]) -> list[str]:
    return await ctx.all(render, scenes, concurrency=2)


@gpu_app.workflow()
async def count(ctx: td.Context, n: int) -> int:
    return await ctx.step(tally, n)


async def serve_until(
    app: td.App,
    broker: Broker,
    groups: Sequence[str],
    instance_id: str,
    stop: trio.Event,
    capabilities: Sequence[str] = (),
) -> None:
    async with running_worker(
        app, broker, groups=groups, instance_id=instance_id, capabilities=capabilities
    ):
        await stop.wait()


async def test_step_parks_until_a_capable_worker_announces(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(gpu_app, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, gpu_app, broker, ["render"], "w-cpu", stop, ["avx"])
        await trio.testing.wait_all_tasks_blocked()
        with engine.subscribe() as events:
            await engine.start(film, "intro", run_id="film-1")
            await engine.drain()
            assert trio.current_time() == 0.0

            async def parked(recheck_at: float) -> None:
                run = await engine.get("film-1")
                assert run.status == "suspended"
                assert run.wake_at == WALL_START + recheck_at
                [cp] = await engine.store.get_checkpoints("film-1")
                assert (cp.kind, cp.status, cp.attempts, cp.group) == (
                    "remote",
                    "pending",
                    1,
                    "render",
                )
                # Not dispatched: no start stamp and nothing on the queue.
                assert cp.started_at is None
                assert cp.enqueued_at == WALL_START
                assert cp.wake_at == WALL_START + recheck_at
                assert cp.mark is not None
                assert cp.mark.code == "blocked"
                assert "gpu" in cp.mark.message
                assert "'render'" in cp.mark.message
                assert cp.errors == ()
                assert broker.depth("render") == 0
                assert broker.depth(broker_queue("render", ["gpu"])) == 0
                assert broker.dispatched == 0

            await parked(RECHECK)
            # The recheck finds only the cpu worker again: parked once more.
            await trio.sleep_until(RECHECK + 1.0)
            await parked(2 * RECHECK)

            nursery.start_soon(
                serve_until, gpu_app, broker, ["render"], "w-gpu", stop, ["gpu", "avx"]
            )
            assert await engine.result("film-1") == "rendered intro"
            assert trio.current_time() == 2 * RECHECK
            [cp] = await engine.store.get_checkpoints("film-1")
            assert cp.status == "completed"
            assert cp.started_at == WALL_START + 2 * RECHECK
            assert cp.error is None
            assert cp.attempts == 1
            assert broker.dispatched == 2  # the task, and its result
            received = drain_events(events)
        stop.set()
    steps = [
        (e.kind, e.at - WALL_START, e.data.get("worker")) for e in received if e.name == "render"
    ]
    assert steps == [
        ("step.started", 2 * RECHECK, None),
        ("step.completed", 2 * RECHECK, "w-gpu"),
    ]


async def test_step_without_requires_waits_on_the_queue_for_a_worker(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(gpu_app, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.start(count, 41, run_id="count-1")
        await engine.drain()
        assert trio.current_time() == 0.0
        run = await engine.get("count-1")
        assert (run.status, run.wake_at) == ("suspended", None)
        [cp] = await engine.store.get_checkpoints("count-1")
        # Out (marked with the broker it went out on), not parked.
        assert cp.mark is not None
        assert (cp.status, cp.mark.code, cp.started_at) == ("pending", "out", WALL_START)
        assert broker.depth("plain") == 1
        await trio.sleep_until(100.0)
        assert broker.depth("plain") == 1
        assert (await engine.get("count-1")).status == "suspended"

        nursery.start_soon(serve_until, gpu_app, broker, ["plain"], "w-1", stop)
        assert await engine.result("count-1") == 42
        assert trio.current_time() == 100.0
        assert broker.depth("plain") == 0
        stop.set()


def drain_events(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    received = []
    while True:
        try:
            received.append(events.receive_nowait())
        except trio.WouldBlock:
            return received


def test_only_capable_workers_consume_a_steps_capability_queue() -> None:
    assert broker_queue("render", []) == "render"
    assert broker_queue("render@acme", ["gpu", "avx", "gpu"]) == "render@acme~avx~gpu"
    assert served_broker_queues(gpu_app, ["render"], ["avx"]) == ("render",)
    assert served_broker_queues(gpu_app, ["render", "plain@acme"], ["gpu"]) == (
        "render",
        "render~gpu",
        "plain@acme",
    )
    assert served_broker_queues(gpu_app, ["render@acme"], ["gpu", "avx"]) == (
        "render@acme",
        "render@acme~gpu",
    )


async def test_a_worker_without_the_capability_never_runs_the_step(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    """Both workers serve the group; only the one offering gpu may take a
    step that requires it (the other would, from a queue they share)."""
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(gpu_app, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, gpu_app, broker, ["render"], "w-cpu", stop, ["avx"])
        nursery.start_soon(serve_until, gpu_app, broker, ["render"], "w-gpu", stop, ["gpu"])
        await trio.testing.wait_all_tasks_blocked()
        with engine.subscribe() as events:
            for i in range(20):
                await engine.start(film, f"s{i}", run_id=f"film-{i}")
                await engine.start(preview, f"s{i}", run_id=f"preview-{i}")
            for i in range(20):
                assert await engine.result(f"film-{i}") == f"rendered s{i}"
                assert await engine.result(f"preview-{i}") == f"thumbnail of s{i}"
            assert trio.current_time() == 0.0
            done = [e for e in drain_events(events) if e.kind == "step.completed"]
        stop.set()
    assert {e.data["worker"] for e in done if e.name == "render"} == {"w-gpu"}
    assert len([e for e in done if e.name == "render"]) == 20
    assert len([e for e in done if e.name == "thumbnail"]) == 20


async def test_an_embedded_worker_with_the_capability_serves_the_step(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(
        gpu_app, broker=MemoryBroker(), serve=["render"], capabilities=["gpu"]
    ) as engine:
        await engine.start(reel, ["a", "b", "c"], run_id="reel-1")
        await engine.drain()
        run = await engine.get("reel-1")
        assert run.status == "completed"
        assert await engine.result("reel-1") == ["rendered a", "rendered b", "rendered c"]
        assert trio.current_time() == 0.0


async def test_a_fan_parks_every_member_and_sends_them_at_the_recheck(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(gpu_app, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        await engine.start(reel, ["a", "b", "c"], run_id="reel-1")
        await engine.drain()
        # concurrency=2: every member is recorded, the first two parked, the
        # third waiting for its place in the window.
        cps = await engine.store.get_checkpoints("reel-1")
        assert [(cp.seq, cp.status, cp.started_at) for cp in cps] == [
            (1, "pending", None),
            (2, "pending", None),
            (3, "pending", None),
        ]
        codes = [cp.mark.code if cp.mark else None for cp in cps]
        assert codes == ["blocked", "blocked", "fan_window"]
        assert (await engine.get("reel-1")).wake_at == WALL_START + RECHECK
        assert broker.dispatched == 0

        await trio.sleep_until(2.0)
        nursery.start_soon(serve_until, gpu_app, broker, ["render"], "w-gpu", stop, ["gpu"])
        assert await engine.result("reel-1") == ["rendered a", "rendered b", "rendered c"]
        assert trio.current_time() == RECHECK
        cps = await engine.store.get_checkpoints("reel-1")
        assert [(cp.status, cp.started_at, cp.error) for cp in cps] == [
            ("completed", WALL_START + RECHECK, None)
        ] * 3
        stop.set()


async def test_a_crashed_capable_worker_counts_until_its_ttl_runs_out(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop_crashed = trio.Event()
    stop = trio.Event()
    async with (
        open_test_engine(gpu_app, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(
            serve_until,
            gpu_app,
            CrashingBroker(broker),
            ["render"],
            "w-gone",
            stop_crashed,
            ["gpu"],
        )
        await trio.testing.wait_all_tasks_blocked()
        stop_crashed.set()
        await trio.sleep_until(1.0)
        # Its announcement (made at 0) still stands: the task is sent to the
        # capability queue and waits there for a consumer.
        await engine.start(film, "early", run_id="film-early")
        await engine.drain()
        [cp] = await engine.store.get_checkpoints("film-early")
        assert cp.mark is not None
        assert (cp.status, cp.started_at, cp.mark.code) == ("pending", WALL_START + 1.0, "out")
        assert broker.depth(broker_queue("render", ["gpu"])) == 1
        # Once it is forgotten, new steps park.
        await trio.sleep_until(TTL)
        await engine.start(film, "late", run_id="film-late")
        await engine.drain()
        [cp] = await engine.store.get_checkpoints("film-late")
        assert cp.started_at is None
        assert cp.mark is not None
        assert cp.mark.code == "blocked"
        assert cp.wake_at == WALL_START + TTL + RECHECK

        await trio.sleep_until(TTL + 2.0)
        nursery.start_soon(serve_until, gpu_app, broker, ["render"], "w-new", stop, ["gpu"])
        assert await engine.result("film-early") == "rendered early"
        assert trio.current_time() == TTL + 2.0
        assert await engine.result("film-late") == "rendered late"
        assert trio.current_time() == TTL + RECHECK
        stop.set()
