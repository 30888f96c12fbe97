"""Workflows served by convention: workflow groups, what workers announce of
workflows and steps, and the `Catalogue` that reads those announcements
through a 5 s cache on Trio's clock (the decision group route, the agreed
on-error routes, steps' and queues' specs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from types import SimpleNamespace
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import fixed_wall
from counting_broker import CountingBroker
from trio_durable._base._serde import check_workflow_args
from trio_durable._brokers._base import Broker, WorkerDescriptor
from trio_durable._front._descriptor import check_group_routes
from trio_durable._front._open_worker import open_worker
from trio_durable._front._worker import Worker
from trio_durable._kernel._catalogue import CACHE_SECONDS, FAILED_READ_SECONDS, Catalogue
from trio_durable.brokers import descriptor_from_json, descriptor_to_json


def running_worker(
    app: td.App, broker: Broker, *, groups: Sequence[str], instance_id: str
) -> AbstractAsyncContextManager[Worker]:
    return open_worker(
        app,
        broker=broker,
        groups=groups,
        instance_id=instance_id,
        heartbeat=5.0,
        ttl=15.0,
        wall_clock=fixed_wall,
        seed=0,
    )


def shop(
    *,
    version: str = "1",
    group: str | None = "orders",
    on_error: Sequence[td.OnError] = (),
    versions: Sequence[str] | None = None,
) -> td.App:
    """A worker's app: the remote workflow ``checkout`` (at ``versions``, or
    ``version``), decided by workers of ``group``, and the remote step
    ``charge`` of ``payments`` going through the queue ``charges``."""
    app = td.App("shop")
    app.queue("charges", concurrency=4, priority=2)

    @app.step(group="payments", queue="charges", retry=td.Retry(attempts=5, backoff=2), timeout=30)
    async def charge(order: str) -> str:
        return order

    @app.step()
    async def reserve(order: str) -> str:
        return order

    for each in versions or [version]:

        async def checkout(ctx: td.Context, order: str) -> str:
            return await ctx.step(charge, order)

        app.workflow(name="checkout", version=each, group=group, on_error=on_error)(checkout)

    @app.workflow
    async def refund(ctx: td.Context, failure: dict[str, Any]) -> None:
        return None

    return app


# -- Declaring ----------------------------------------------------------------------


def test_a_workflow_group_must_be_broker_safe() -> None:
    app = td.App("shop")

    async def checkout(ctx: td.Context) -> None:
        return None

    for bad in ["bad group", "", ".hidden", "a" * 101, "orders@acme"]:
        with pytest.raises(td.RegistrationError, match=r"workflow group .* is not broker-safe"):
            app.workflow(group=bad)(checkout)
    assert app.workflows == []
    wf = app.workflow(group="orders")(checkout)
    assert (wf.group, wf.decision_group, wf.remote) == ("orders", "orders", True)


def test_workflow_groups_are_decision_groups() -> None:
    app = td.App("shop")

    @app.step(group="payments")
    async def charge() -> None:
        return None

    @app.workflow(group="orders")
    async def checkout(ctx: td.Context) -> None:
        return None

    @app.workflow
    async def report(ctx: td.Context) -> None:
        return None

    app.remote_workflow("audit", group="audits")
    # A workflow without a group is decided under its own name; steps' groups
    # stay apart; a workflow declared by name has no body here to serve.
    assert (report.group, report.decision_group, report.remote) == (None, "report", False)
    assert app.groups == ["payments"]
    assert app.workflow_groups == ["orders", "report"]


def test_a_workflow_group_changes_the_registration_hash() -> None:
    assert shop(group="orders").registration_hash() != shop(group=None).registration_hash()
    assert shop(group="orders").registration_hash() != shop(group="sales").registration_hash()
    assert shop(group="orders").registration_hash() == shop(group="orders").registration_hash()


def test_remote_workflow_declares_a_workflow_by_name() -> None:
    app = td.App("service")
    checkout = app.remote_workflow("checkout", group="orders")
    assert (checkout.name, checkout.version, checkout.group) == ("checkout", "", "orders")
    assert (checkout.remote, checkout.decision_group) == (True, "orders")
    assert app.get_workflow("checkout") is checkout
    # Without a group it is decided under its name, until workers say otherwise.
    assert app.remote_workflow("report").decision_group == "report"
    with pytest.raises(td.RegistrationError, match="already registered"):
        app.remote_workflow("checkout")
    with pytest.raises(td.RegistrationError, match="not broker-safe"):
        app.remote_workflow("audit", group="bad group")
    with pytest.raises(td.RegistrationError, match="invalid"):
        app.remote_workflow("bad name")

    async def report(ctx: td.Context) -> None:
        return None

    with pytest.raises(td.RegistrationError, match="declared remote"):
        app.workflow(name="report")(report)


async def test_a_remote_declarations_body_refuses_to_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = td.App("service")
    checkout = app.remote_workflow("checkout", group="orders")
    # Any inputs fit (the workers' body checks them), with nothing to warn of.
    assert check_workflow_args(checkout, ["o-1", {"n": 1}]) == '["o-1",{"n":1}]'
    assert caplog.records == []
    with pytest.raises(td.FatalError, match="'checkout' runs on workers") as caught:
        await checkout.fn(SimpleNamespace(workflow="checkout"), "o-1")
    assert caught.value.code == "remote_workflow"


def test_group_routes_accept_workflow_groups_and_names() -> None:
    app = shop(group="orders")
    assert check_group_routes(app, ["orders", "payments@acme", "refund"], "groups") == (
        "orders",
        "payments@acme",
        "refund",
    )
    # A workflow with a group is not served under its name.
    for unknown in ["checkout", "nowhere", "nowhere@acme"]:
        with pytest.raises(td.UsageError, match="which no step or workflow of app 'shop' has"):
            check_group_routes(app, [unknown], "groups")
    service = td.App("service")
    service.remote_workflow("audit", group="audits")
    with pytest.raises(td.UsageError, match="names the group 'audits'"):
        check_group_routes(service, ["audits"], "serve")


async def test_a_worker_serves_a_workflow_group(autojump_clock: trio.abc.Clock) -> None:
    broker = td.MemoryBroker()
    with pytest.raises(td.UsageError, match="names the group 'nowhere'"):
        async with running_worker(shop(), broker, groups=["nowhere"], instance_id="w-0"):
            pass
    async with running_worker(shop(), broker, groups=["orders"], instance_id="w-1"):
        [d] = await broker.worker_descriptors()
    assert d.groups == ("orders",)


# -- What workers announce ---------------------------------------------------------


async def test_workers_announce_decision_groups_routes_and_step_specs(
    autojump_clock: trio.abc.Clock,
) -> None:
    routes = [td.OnError(workflow="refund"), td.OnError("declined", workflow="refund")]
    app = shop(versions=["1", "2"], on_error=routes)
    app.remote_workflow("audit", group="audits")
    broker = td.MemoryBroker()
    async with (
        running_worker(app, broker, groups=["orders@acme", "payments"], instance_id="w-1"),
        running_worker(app, broker, groups=["payments"], instance_id="w-2"),
    ):
        serving, other = await broker.worker_descriptors()
    sorted_routes = [
        {"code": None, "workflow": "refund"},
        {"code": "declined", "workflow": "refund"},
    ]
    # The workflow declared by name is not announced: other workers run it.
    assert serving.workflows == {
        "checkout": {
            "versions": ["1", "2"],
            "on_error": sorted_routes,
            "routes": {"1": sorted_routes, "2": sorted_routes},
            "group": "orders",
            # Its inputs after the context, with their JSON types.
            "params": [{"name": "order", "type": ["string"]}],
        },
        "refund": {
            "versions": ["1"],
            "on_error": [],
            "routes": {"1": []},
            "params": [{"name": "failure", "type": ["object"]}],
        },
    }
    # The group is announced only by the workers that serve it.
    assert "group" not in other.workflows["checkout"]
    assert serving.steps == {
        "charge": {
            "group": "payments",
            "requires": [],
            "retry": {"attempts": 5, "backoff": 2.0, "max_backoff": 60.0, "jitter": 0.1},
            "timeout": 30.0,
            "queue": {"name": "charges", "concurrency": 4, "priority": 2},
            "params": [{"name": "order", "type": ["string"]}],
        }
    }


# -- The catalogue's cache ---------------------------------------------------------


async def test_a_burst_of_lookups_within_5_s_costs_one_read(
    autojump_clock: trio.abc.Clock,
) -> None:
    assert CACHE_SECONDS == 5.0
    broker = CountingBroker()
    catalogue = Catalogue(broker)
    async with running_worker(shop(), broker, groups=["orders"], instance_id="w-1"):
        start = trio.current_time()
        for _ in range(10):
            assert await catalogue.served("checkout", "1", "default") == "orders"
            assert await catalogue.on_error_routes("checkout", "1") == ()
            assert await catalogue.served("refund", "1", "default") is None
            await trio.sleep(0.49)
        assert broker.reads == 1
        # A worker that appears within the 5 s is not seen until they are up.
        async with running_worker(shop(), broker, groups=["refund"], instance_id="w-2"):
            await trio.sleep_until(start + CACHE_SECONDS - 0.01)
            assert await catalogue.served("refund", "1", "default") is None
            assert broker.reads == 1
            await trio.sleep_until(start + CACHE_SECONDS)
            assert await catalogue.served("refund", "1", "default") == "refund"
            assert broker.reads == 2
            # invalidate() forgets what was read.
            catalogue.invalidate()
            assert await catalogue.served("refund", "1", "default") == "refund"
            assert broker.reads == 3


async def test_lookups_during_a_read_share_it(autojump_clock: trio.abc.Clock) -> None:
    broker = CountingBroker()
    broker.read_time = 2.0
    catalogue = Catalogue(broker)
    found: list[tuple[float, str | None]] = []

    async def look_up() -> None:
        route = await catalogue.served("checkout", "1", "default")
        found.append((trio.current_time(), route))

    async with running_worker(shop(), broker, groups=["orders"], instance_id="w-1"):
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(look_up)
    assert broker.reads == 1
    assert found == [(start + 2.0, "orders")] * 10


async def test_a_read_under_way_when_invalidated_is_not_kept(
    autojump_clock: trio.abc.Clock,
) -> None:
    broker = CountingBroker()
    broker.read_time = 2.0
    catalogue = Catalogue(broker)
    async with running_worker(shop(), broker, groups=["orders"], instance_id="w-1"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(catalogue.served, "checkout", "1", "default")
            await trio.sleep(1.0)
            # A worker appears and the caller knows: the read under way may
            # have missed it.
            catalogue.invalidate()
        assert broker.reads == 1
        assert await catalogue.served("checkout", "1", "default") == "orders"
        assert broker.reads == 2
        assert await catalogue.served("checkout", "1", "default") == "orders"
        assert broker.reads == 2


async def test_a_failed_read_counts_as_no_workers_for_a_second(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    broker = CountingBroker()
    catalogue = Catalogue(broker)
    async with running_worker(shop(), broker, groups=["orders"], instance_id="w-1"):
        broker.down = True
        start = trio.current_time()
        assert await catalogue.served("checkout", "1", "default") is None
        assert await catalogue.on_error_routes("checkout", "1") == ()
        assert "cannot read worker announcements: the broker is down" in caplog.text
        broker.down = False
        await trio.sleep_until(start + FAILED_READ_SECONDS - 0.01)
        assert await catalogue.step("charge") is None
        assert broker.reads == 1
        await trio.sleep_until(start + FAILED_READ_SECONDS)
        assert await catalogue.served("checkout", "1", "default") == "orders"
        assert broker.reads == 2


# -- What the catalogue answers ----------------------------------------------------


async def test_served_by_namespace_and_version(autojump_clock: trio.abc.Clock) -> None:
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    async with (
        running_worker(shop(version="2"), broker, groups=["orders@acme"], instance_id="w-1"),
        # Knows checkout but serves only its steps: it takes no decision tasks.
        running_worker(shop(version="3"), broker, groups=["payments"], instance_id="w-2"),
        # No group: served by convention under its name.
        running_worker(shop(group=None), broker, groups=["checkout"], instance_id="w-3"),
    ):
        assert await catalogue.served("checkout", "2", "acme") == "orders@acme"
        assert await catalogue.served("checkout", "", "acme") == "orders@acme"
        assert await catalogue.served("checkout", "1", "acme") is None
        assert await catalogue.served("checkout", "3", "acme") is None
        assert await catalogue.served("checkout", "3", "default") is None
        assert await catalogue.served("checkout", "1", "default") == "checkout"
        assert await catalogue.served("checkout", "", "default") == "checkout"
        assert await catalogue.served("checkout", "2", "default") is None
        assert await catalogue.served("checkout", "1", "beta") is None
        assert await catalogue.served("nothing", "", "default") is None


async def test_served_prefers_the_route_most_workers_serve(
    autojump_clock: trio.abc.Clock,
) -> None:
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    async with (
        running_worker(shop(group="sales"), broker, groups=["sales"], instance_id="w-1"),
        running_worker(shop(group="orders"), broker, groups=["orders"], instance_id="w-2"),
    ):
        # One each: the first by name.
        assert await catalogue.served("checkout", "1", "default") == "orders"
        async with running_worker(shop(group="sales"), broker, groups=["sales"], instance_id="w-3"):
            catalogue.invalidate()
            assert await catalogue.served("checkout", "1", "default") == "sales"


async def test_on_error_routes_agreed_by_the_announcers_of_the_version(
    autojump_clock: trio.abc.Clock,
) -> None:
    declined = [td.OnError("declined", workflow="refund")]
    catch_all = [td.OnError(workflow="refund")]
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    async with (
        running_worker(shop(on_error=declined), broker, groups=["orders"], instance_id="w-1"),
        running_worker(shop(on_error=declined), broker, groups=["payments"], instance_id="w-2"),
        # Another version, other routes: ignored for version 1.
        running_worker(
            shop(version="2", on_error=catch_all), broker, groups=["orders"], instance_id="w-3"
        ),
    ):
        assert await catalogue.on_error_routes("checkout", "1") == tuple(declined)
        assert await catalogue.on_error_routes("checkout", "2") == tuple(catch_all)
        # Latest: each announcer's version registered last, which disagree.
        assert isinstance(await catalogue.on_error_routes("checkout", ""), str)
        assert await catalogue.on_error_routes("checkout", "9") == ()
        assert await catalogue.on_error_routes("nothing", "1") == ()
        assert await catalogue.on_error_routes("refund", "1") == ()


async def test_on_error_routes_of_disagreeing_announcers_are_a_reason(
    autojump_clock: trio.abc.Clock,
) -> None:
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    declined = [td.OnError("declined", workflow="refund")]
    async with (
        running_worker(shop(on_error=declined), broker, groups=["orders"], instance_id="w-1"),
        running_worker(shop(), broker, groups=["orders"], instance_id="w-2"),
    ):
        reason = await catalogue.on_error_routes("checkout", "1")
    assert reason == (
        "live workers announce different on-error routes for 'checkout' version '1':"
        ' w-2: []; w-1: [{"code":"declined","workflow":"refund"}]'
    )


async def test_steps_and_queues_as_announced(autojump_clock: trio.abc.Clock) -> None:
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    async with running_worker(shop(), broker, groups=["payments"], instance_id="w-1"):
        assert await catalogue.step("charge") == {
            "group": "payments",
            "requires": [],
            "retry": {"attempts": 5, "backoff": 2.0, "max_backoff": 60.0, "jitter": 0.1},
            "timeout": 30.0,
            "queue": {"name": "charges", "concurrency": 4, "priority": 2},
            "params": [{"name": "order", "type": ["string"]}],
        }
        assert await catalogue.queue("charges") == td.FlowQueue(
            name="charges", concurrency=4, priority=2
        )
        # Local steps are not announced, nor queues no announced step uses.
        assert await catalogue.step("reserve") is None
        assert await catalogue.queue("other") is None


async def test_the_new_fields_survive_the_adapters_codec(autojump_clock: trio.abc.Clock) -> None:
    """RabbitMQ and NATS carry descriptors as JSON through one codec."""
    routes = [td.OnError("declined", workflow="refund")]
    broker = td.MemoryBroker()
    async with running_worker(
        shop(on_error=routes), broker, groups=["orders", "payments"], instance_id="w-1"
    ):
        [d] = await broker.worker_descriptors()
    text = json.dumps(descriptor_to_json(d))
    assert descriptor_from_json(json.loads(text)) == d
    assert d.workflows["checkout"]["group"] == "orders"
    assert d.steps["charge"]["queue"] == {"name": "charges", "concurrency": 4, "priority": 2}


async def test_announcements_of_older_or_other_programs(autojump_clock: trio.abc.Clock) -> None:
    broker = td.MemoryBroker()
    catalogue = Catalogue(broker)
    # A worker from before per-version routes and workflow groups: its
    # routes are read from "on_error"; it serves no decision tasks.
    older = WorkerDescriptor(
        instance_id="w-old",
        app="shop",
        groups=("checkout",),
        workflows={
            "checkout": {"versions": ["1"], "on_error": [{"code": None, "workflow": "refund"}]}
        },
    )
    # Something else announcing malformed entries breaks no lookup.
    other = WorkerDescriptor(
        instance_id="w-odd",
        app="odd",
        groups=("odd",),
        workflows={"odd": {"versions": 3, "group": "odd"}, "checkout": {"versions": "1"}},
        steps={"charge": {"queue": {"name": "charges", "concurrency": "four"}}},
    )
    await broker.announce(older, 15.0)
    await broker.announce(other, 15.0)
    assert await catalogue.on_error_routes("checkout", "1") == (td.OnError(workflow="refund"),)
    assert await catalogue.served("checkout", "1", "default") is None
    assert await catalogue.served("odd", "1", "default") is None
    assert await catalogue.served("odd", "", "default") == "odd"
    assert await catalogue.queue("charges") is None
