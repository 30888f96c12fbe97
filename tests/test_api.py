"""The public API: its surface, starting runs, reading results, bad input."""

from __future__ import annotations

import types
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
from conftest import EngineFactory


def test_public_api_is_pinned() -> None:
    assert sorted(td.__all__) == [
        "AesGcmCodec",
        "App",
        "AttemptEntry",
        "BlobCorrupted",
        "BlobInfo",
        "BlobNotFound",
        "BlobStore",
        "Breakpoint",
        "BreakpointNotFoundError",
        "Broker",
        "BrokerError",
        "BrokerFaults",
        "BrokerUnavailable",
        "BuildStatus",
        "BulkProgress",
        "BulkReport",
        "Cancelled",
        "Checkpoint",
        "Client",
        "Clock",
        "CodecError",
        "ConsoleOptions",
        "Context",
        "ContinueAsNewError",
        "Deployment",
        "DeploymentError",
        "DeploymentReport",
        "Disagreement",
        "EncryptedHistoryError",
        "Engine",
        "EngineClosedError",
        "EngineStatistics",
        "EntityError",
        "EntityKeyError",
        "EntityRef",
        "ErrorInfo",
        "Event",
        "EventConflictError",
        "EventReceipt",
        "EventRecord",
        "FanPage",
        "FanStats",
        "FatalError",
        "Fleet",
        "FlowQueue",
        "ForkPointError",
        "GatherError",
        "GatherFailure",
        "HistoryEntry",
        "HistoryError",
        "InvalidArgumentsError",
        "InvalidRunStateError",
        "InvalidURLError",
        "Keyring",
        "KeyringError",
        "LeaseLostError",
        "LocalBlobStore",
        "Mark",
        "MemoryBroker",
        "MemoryStore",
        "NonDeterminismError",
        "OnError",
        "PausedStep",
        "PayloadCodec",
        "QueryFailed",
        "RateLimit",
        "RegistrationError",
        "RemoteStepError",
        "Retention",
        "RetriedHistory",
        "Retry",
        "Run",
        "RunCancelled",
        "RunConflictError",
        "RunControls",
        "RunDetail",
        "RunFailed",
        "RunHandle",
        "RunHistory",
        "RunNotFoundError",
        "RunPage",
        "RunSelection",
        "RunTerminated",
        "ScheduleError",
        "ScheduleInfo",
        "ScheduleNotFoundError",
        "SchemaVersionError",
        "SearchAttributeError",
        "SearchRange",
        "SerializationError",
        "SignalTargetNotFoundError",
        "SignalTimeout",
        "Step",
        "StepFailed",
        "StepInfo",
        "Store",
        "StoreError",
        "StoreStatistics",
        "TrioDurableError",
        "UnknownEntityError",
        "UnknownHandlerError",
        "UnknownWorkflowError",
        "UnservedRoute",
        "UnsubscribedEventWarning",
        "UpdateFailed",
        "UpdateRejected",
        "UsageError",
        "WebhookError",
        "WebhookNotFoundError",
        "WebhookUsedError",
        "Worker",
        "WorkerDescriptor",
        "WorkerStatistics",
        "Workflow",
        "current_step",
        "exclusive",
        "lineage",
        "open_broker",
        "open_client",
        "open_engine",
        "open_store",
        "open_worker",
        "parent_of",
        "shared",
    ]
    # Public submodules (trio_durable.testing, .brokers) become attributes
    # once imported; they are not names of the top-level API.
    public = {
        name
        for name in dir(td)
        if not name.startswith("_") and not isinstance(getattr(td, name), types.ModuleType)
    }
    assert public - set(td.__all__) == set()


def test_public_names_are_documented() -> None:
    for name in td.__all__:
        assert getattr(td, name).__doc__, name


@attrs.define(frozen=True)
class Item:
    sku: str
    qty: int


app = td.App("api")


@app.step()
async def double(x: int) -> int:
    return 2 * x


@app.step()
async def total(items: list[Item]) -> Item:
    return Item(sku="+".join(i.sku for i in items), qty=sum(i.qty for i in items))


@app.workflow()
async def pipeline(ctx: td.Context, x: int) -> int:
    y = await ctx.step(double, x)
    return await ctx.step(double, y)


@app.workflow()
async def basket(ctx: td.Context, items: list[Item]) -> Item:
    return await ctx.step(total, items)


@app.workflow()
async def refuses(ctx: td.Context, reason: str) -> None:
    raise td.FatalError(f"refused: {reason}", code="refused", details={"reason": reason})


@app.workflow(name="pipeline", version="2")
async def pipeline_v2(ctx: td.Context, x: int) -> int:
    return x


@app.workflow()
async def returns_junk(ctx: td.Context) -> Any:
    return object()


@app.workflow()
async def waits(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


async def test_start_and_result(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(pipeline, 5, run_id="p-1")
        assert run.id == "p-1"
        assert run.workflow == "pipeline"
        assert run.version == "1"
        assert run.status == "running"  # created leased to the engine that starts it
        assert await engine.result("p-1") == 20
        stored = await engine.get("p-1")
        assert stored.status == "completed"
        assert stored.output == "20"
        assert stored.lease_owner is None


async def test_start_by_name_takes_the_latest_version(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start("pipeline", 5)
        assert run.version == "2"
        assert await engine.result(run.id) == 5


async def test_attrs_payloads_round_trip(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(basket, [Item(sku="a", qty=1), Item(sku="b", qty=2)])
        assert await engine.result(run.id) == Item(sku="a+b", qty=3)


async def test_start_is_idempotent_by_run_id(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        first = await engine.start(pipeline, 1, run_id="same")
        await engine.drain()
        stored = (await engine.get("same"), await engine.store.get_checkpoints("same"))
        turns = engine.statistics().turns
        second = await engine.start(pipeline, 99, run_id="same")
        assert second.id == first.id
        assert second.input == first.input
        assert second.status == "completed"
        # Nothing changed, and no turn ran: the start found the run.
        await engine.drain()
        assert (await engine.get("same"), await engine.store.get_checkpoints("same")) == stored
        assert engine.statistics().turns == turns
        assert await engine.result("same") == 4


async def test_start_of_a_taken_id_by_another_workflow_conflicts(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(pipeline, 1, run_id="taken")
        with pytest.raises(td.RunConflictError, match="taken"):
            await engine.start(basket, [], run_id="taken")
        assert (await engine.get("taken")).workflow == "pipeline"


async def test_run_ids_come_from_the_seed(open_test_engine: EngineFactory) -> None:
    ids = []
    for _ in range(2):
        async with open_test_engine(app, seed=7) as engine:
            ids.append([(await engine.start(pipeline, i)).id for i in range(3)])
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 3
    async with open_test_engine(app, seed=8) as engine:
        assert (await engine.start(pipeline, 0)).id not in ids[0]


async def test_result_raises_run_failed_with_code_and_details(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(refuses, "no stock")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        assert caught.value.run_id == run.id
        assert caught.value.message == "refused: no stock"
        assert caught.value.code == "refused"
        assert caught.value.details == {"reason": "no stock"}
        stored = await engine.get(run.id)
        assert stored.status == "failed"
        assert stored.error == td.ErrorInfo(
            message="refused: no stock",
            code="refused",
            details={"reason": "no stock"},
            type="FatalError",
        )


async def test_result_of_a_run_that_ends_on_another_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=1) as a:
        await a.start(waits, run_id="w")
        await a.drain()
        async with td.open_engine(app, store=store, seed=2, engine_id="b") as b:
            async with trio.open_nursery() as nursery:
                results: list[Any] = []

                async def wait_result() -> None:
                    results.append(await a.result("w"))

                nursery.start_soon(wait_result)
                await trio.testing.wait_all_tasks_blocked()
                await b.signal("w", "go", "hi")
            assert results == ["hi"]


class NoFeed:
    """A memory store seen as one other processes write too (no change
    feed), whose reads of one run can be held back."""

    _HIDDEN = frozenset({"run_end_event", "due_event", "unwoken_runs", "unwoken_event"})

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner
        self.hold: str | None = None
        self.reading = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN:
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def get_run(self, run_id: str) -> td.Run | None:
        run = await self.inner.get_run(run_id)
        if run_id == self.hold:
            self.hold = None
            self.reading.set()
            await self.release.wait()
        return run


async def test_result_sees_an_end_that_lands_while_it_reads_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = NoFeed(td.MemoryStore())
    async with td.open_engine(app, store=store, seed=1, result_poll_interval=10.0) as engine:
        await engine.start(waits, run_id="w")
        await engine.drain()
        results: list[Any] = []

        async def wait_result() -> None:
            results.append(await engine.result("w"))

        async with trio.open_nursery() as nursery:
            store.hold = "w"
            nursery.start_soon(wait_result)
            # result() read the run still suspended; it ends before the read
            # returns...
            await store.reading.wait()
            await engine.signal("w", "go", "hi")
            await engine.drain()
            store.release.set()
        # ...and result() saw the end at once, not at its next poll.
        assert results == ["hi"]
        assert trio.current_time() < 10.0


# -- bad input ----------------------------------------------------------------


def test_duplicate_registration_is_refused() -> None:
    local = td.App("dup")

    @local.workflow()
    async def flow(ctx: td.Context) -> None: ...

    with pytest.raises(td.RegistrationError, match=r"flow.*already registered"):

        @local.workflow(name="flow")
        async def other(ctx: td.Context) -> None: ...

    @local.step()
    async def act() -> None: ...

    with pytest.raises(td.RegistrationError, match="act"):

        @local.step(name="act")
        async def act2() -> None: ...


@pytest.mark.parametrize("name", ["", "has space", "1starts-with-digit", "x" * 201, "a/b"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(td.RegistrationError):

        @td.App("n").workflow(name=name)
        async def flow(ctx: td.Context) -> None: ...


def test_sync_functions_are_refused() -> None:
    with pytest.raises(td.RegistrationError, match="async def"):
        td.App("s").step()(lambda: None)  # type: ignore[arg-type, return-value]


def test_calling_a_workflow_directly_is_an_error() -> None:
    with pytest.raises(td.FatalError) as caught:
        pipeline(None, 1)
    assert caught.value.code == "nested_workflow_call"


async def test_unknown_workflow_writes_nothing(open_test_engine: EngineFactory) -> None:
    other = td.App("other")

    @other.workflow()
    async def stranger(ctx: td.Context) -> None: ...

    async with open_test_engine(app) as engine:
        with pytest.raises(td.UnknownWorkflowError, match="nope"):
            await engine.start("nope")
        with pytest.raises(td.UnknownWorkflowError, match="stranger"):
            await engine.start(stranger)
        assert engine.store.statistics().ops == 0


async def test_unserializable_input_writes_nothing(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        with pytest.raises(td.SerializationError):
            await engine.start(pipeline, object(), run_id="bad")  # type: ignore[arg-type]
        with pytest.raises(td.SerializationError):
            await engine.start(pipeline, float("nan"), run_id="bad")  # type: ignore[arg-type]
        assert engine.store.statistics().ops == 0
        with pytest.raises(td.RunNotFoundError):
            await engine.get("bad")


async def test_unserializable_output_fails_the_run(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(returns_junk)
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        assert "serialize" in caught.value.message
        assert (await engine.get(run.id)).output is None


@pytest.mark.parametrize("run_id", ["", "with space", "x" * 256, "ü"])
async def test_malformed_run_ids_write_nothing(
    open_test_engine: EngineFactory, run_id: str
) -> None:
    async with open_test_engine(app) as engine:
        with pytest.raises(td.UsageError, match="run_id"):
            await engine.start(pipeline, 1, run_id=run_id)
        assert engine.store.statistics().ops == 0


async def test_unknown_runs(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        with pytest.raises(td.RunNotFoundError):
            await engine.get("ghost")
        with pytest.raises(td.RunNotFoundError):
            await engine.result("ghost")
        with pytest.raises(td.RunNotFoundError):
            await engine.signal("ghost", "go")
        with pytest.raises(td.RunNotFoundError):
            await engine.cancel("ghost")
        with pytest.raises(td.RunNotFoundError):
            await engine.retry("ghost")
        assert engine.store.statistics().ops == 0


async def test_retry_and_cancel_of_a_completed_run_change_nothing(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(pipeline, 1)
        await engine.result(run.id)
        before = await engine.get(run.id)
        ops = engine.store.statistics().ops
        with pytest.raises(td.InvalidRunStateError, match="completed"):
            await engine.retry(run.id)
        with pytest.raises(td.InvalidRunStateError, match="completed"):
            await engine.cancel(run.id)
        with pytest.raises(td.InvalidRunStateError, match="completed"):
            await engine.signal(run.id, "go")
        assert engine.store.statistics().ops == ops
        assert await engine.get(run.id) == before


@pytest.mark.parametrize(
    "url",
    ["", "nothing", "postgres-ish:/x", "redis://localhost", "sqlite://", "sqlite://host/x.db", 42],
)
async def test_malformed_store_urls(url: Any) -> None:
    with pytest.raises(td.InvalidURLError):
        async with td.open_engine(app, store=url):
            pass  # pragma: no cover


@pytest.mark.parametrize(
    "option",
    [
        {"lease_ttl": 0},
        {"lease_ttl": float("inf")},
        {"reconcile_interval": -1},
        {"result_poll_interval": float("nan")},
        {"max_recoveries": -1},
        {"engine_id": "has space"},
    ],
)
async def test_bad_engine_options(option: dict[str, Any]) -> None:
    with pytest.raises(td.UsageError):
        async with td.open_engine(app, **option):
            pass  # pragma: no cover


async def test_a_closed_engine_refuses_work(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        pass
    with pytest.raises(td.EngineClosedError):
        await engine.start(pipeline, 1)
    with pytest.raises(td.EngineClosedError):
        await engine.drain()


def test_the_adapter_api_is_pinned() -> None:
    from trio_durable import brokers

    assert sorted(brokers.__all__) == [
        "AMBIGUOUS_HINT",
        "Bridge",
        "BridgeMode",
        "BridgeStatistics",
        "Broker",
        "BrokerError",
        "BrokerFaults",
        "BrokerUnavailable",
        "Clock",
        "Consumer",
        "DEFAULT_BRIDGE",
        "Delivery",
        "Inbox",
        "InvalidURLError",
        "MemoryBroker",
        "Outbox",
        "OutboxJob",
        "Outgoing",
        "OwnedTasks",
        "PayloadTooLarge",
        "Pingable",
        "RESULTS",
        "SupportsBacklog",
        "UsageError",
        "WorkerDescriptor",
        "WorkerLoad",
        "backlog",
        "bridge_mode",
        "check_payload_sizes",
        "descriptor_from_json",
        "descriptor_to_json",
        "is_broker_safe",
        "mask_url",
        "needs_heartbeat",
        "open_bridge",
        "open_broker",
        "ping",
        "scrub",
        "userinfo_is_ambiguous",
    ]
    # Every name is there.
    for name in brokers.__all__:
        assert hasattr(brokers, name), name
