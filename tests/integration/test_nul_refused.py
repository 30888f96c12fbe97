"""NUL (``"\\x00"``) in a name or key the stores index is refused the same
way on every store (memory, SQLite, PostgreSQL), through the public API: a
`td.UsageError` (or its documented subclass) before anything holding it is
written. Without the check the stores disagreed: the memory store kept it,
SQLite's indexes cut a text at it (``tags=["t"]`` found ``"t\\x00nul"``) and
PostgreSQL refused the write. Payloads are JSON and may hold a NUL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._stores._ops import Op
from trio_durable._stores._wrapping import StoreWrapper

NUL = "t\x00nul"

app = td.App("nul")
app.search_attribute("customer", str)
app.search_attribute("labels", list[str])


@app.step()
async def echo(value: str) -> str:
    return value


@app.workflow()
async def plain(ctx: td.Context) -> str:
    return str(await ctx.wait_signal("go"))


@app.workflow()
async def echoes(ctx: td.Context, value: str) -> str:
    return await ctx.step(echo, value)


@app.workflow()
async def fails(ctx: td.Context, message: str) -> str:
    raise td.FatalError(message, code="nul")


@app.workflow(concurrency_key=lambda key: key)
async def keyed(ctx: td.Context, key: str) -> str:
    return key


@app.workflow(dedup_key=lambda key: key)
async def deduped(ctx: td.Context, key: str) -> str:
    return key


@app.workflow(singleton=True, concurrency_key=lambda key: key)
async def single(ctx: td.Context, key: str) -> str:
    return key


@app.entity("box")
class Box:
    def __init__(self) -> None:
        self.items: list[str] = []

    @td.exclusive
    async def put(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)


def _body(use: Callable[[td.Context], Awaitable[Any]]) -> Any:
    async def body(ctx: td.Context) -> str:
        await use(ctx)
        return "went through"

    return body


async def _upsert(ctx: td.Context, attributes: dict[str, Any]) -> None:
    ctx.upsert_search_attributes(attributes)
    await ctx.wait_signal("never")


BODIES: dict[str, Callable[[td.Context], Awaitable[Any]]] = {
    "wait_signal name": lambda ctx: ctx.wait_signal(NUL),
    "signal name": lambda ctx: ctx.signal(ctx.run_id, NUL, 1),
    "signal idempotency_key": lambda ctx: ctx.signal(ctx.run_id, "go", 1, idempotency_key=NUL),
    "webhook name": lambda ctx: ctx.webhook(NUL),
    "set_event key": lambda ctx: ctx.set_event(NUL, 1),
    "upsert search attribute": lambda ctx: _upsert(ctx, {"customer": NUL}),
    "upsert keyword": lambda ctx: _upsert(ctx, {"labels": ["a", NUL]}),
    "start_child search attribute": lambda ctx: ctx.start_child(
        plain, search_attributes={"customer": NUL}
    ),
    "entity key": lambda ctx: ctx.entity("box", NUL).put("x"),
    "child by name": lambda ctx: ctx.child("pla\x00in"),
    "start_child by name": lambda ctx: ctx.start_child("pla\x00in"),
    "fan by name": lambda ctx: ctx.all("pla\x00in", [(), ()]),
}
for _name, _use in BODIES.items():
    app.workflow(name="uses_" + _name.replace(" ", "_"))(_body(_use))


def holds_nul(value: Any) -> bool:
    """Whether ``value`` (an operation, record, or plain data) holds a
    string with a NUL character anywhere."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, bytes):
        return False
    if attrs.has(type(value)):
        return any(holds_nul(getattr(value, field.name)) for field in attrs.fields(type(value)))
    if isinstance(value, Mapping):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, Sequence | frozenset | set):
        return any(holds_nul(item) for item in value)
    return False


class Recording(StoreWrapper):
    """Passes everything to a store; keeps every operation written."""

    def __init__(self, inner: td.Store) -> None:
        self.inner = inner
        self.written: list[Op] = []

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        self.written.extend(ops)
        return await self.inner.apply(ops)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, real_server: Callable[[str], str]
) -> AsyncIterator[Recording]:
    @asynccontextmanager
    async def inner() -> AsyncIterator[td.Store]:
        if request.param == "memory":
            yield td.MemoryStore()
        elif request.param == "sqlite":
            async with td.open_store(f"sqlite:///{tmp_path / 'nul.db'}") as sqlite:
                yield sqlite
        else:
            async with (
                scratch_schema(real_server("postgres")) as url,
                td.open_store(url) as postgres,
            ):
                yield postgres

    async with inner() as opened:
        yield Recording(opened)


@asynccontextmanager
async def _engine_and_client(
    store: Recording,
) -> AsyncIterator[tuple[td.Engine, td.Client]]:
    async with (
        td.open_engine(app, store=store, seed=0) as engine,
        td.open_client(store, app=app) as client,
    ):
        yield engine, client


async def _start_without_app(store: td.Store) -> None:
    # A client without the app takes a workflow's name as it is.
    async with td.open_client(store) as client:
        await client.start("pla\x00in")


Call = Callable[[td.Engine, td.Client], Awaitable[Any]]

CALLS: dict[str, tuple[type[td.UsageError], Call]] = {
    "start tag": (td.UsageError, lambda e, c: e.start(plain, tags=["a", NUL])),
    "start_many tag": (td.UsageError, lambda e, c: e.start_many(plain, [(), ()], tags=[NUL])),
    "client start tag": (td.UsageError, lambda e, c: c.start(plain, tags=[NUL])),
    "client start by name": (td.UsageError, lambda e, c: _start_without_app(e.store)),
    "start search attribute": (
        td.SearchAttributeError,
        lambda e, c: e.start(plain, search_attributes={"customer": NUL}),
    ),
    "start keyword": (
        td.SearchAttributeError,
        lambda e, c: c.start(plain, search_attributes={"labels": [NUL]}),
    ),
    "concurrency key": (td.UsageError, lambda e, c: e.start(keyed, NUL)),
    "dedup key": (td.UsageError, lambda e, c: c.start(deduped, NUL)),
    "singleton key": (td.UsageError, lambda e, c: e.start(single, NUL)),
    "signal name": (td.UsageError, lambda e, c: e.signal("r", NUL, 1)),
    "client signal name": (td.UsageError, lambda e, c: c.signal("r", NUL, 1)),
    "send_event name": (td.UsageError, lambda e, c: e.send_event(NUL, 1)),
    "send_event key": (td.UsageError, lambda e, c: c.send_event("placed", 1, key=NUL)),
    "breakpoint step": (td.UsageError, lambda e, c: e.set_breakpoint(workflow="plain", step=NUL)),
    "breakpoint workflow": (
        td.UsageError,
        lambda e, c: c.set_breakpoint(workflow=NUL, step="echo"),
    ),
    "update name": (td.UsageError, lambda e, c: e.update("r", NUL)),
    "entity key": (td.UsageError, lambda e, c: e.entity("box", NUL).put("x")),
    "client entity key": (td.UsageError, lambda e, c: c.entity("box", NUL).put("x")),
    "get_event key": (td.UsageError, lambda e, c: e.get_event("r", NUL, timeout=1)),
    "list_runs tag": (td.UsageError, lambda e, c: e.list_runs(tags=[NUL])),
    "list_runs workflow": (td.UsageError, lambda e, c: c.list_runs(workflow=NUL)),
    "list_runs parent": (td.UsageError, lambda e, c: e.list_runs(parent_id=NUL)),
    "list_runs search attribute": (
        td.SearchAttributeError,
        lambda e, c: e.list_runs(search_attributes={"customer": NUL}),
    ),
    "get run id": (td.UsageError, lambda e, c: e.get(NUL)),
    "client result run id": (td.UsageError, lambda e, c: c.result(NUL)),
    "cancel run id": (td.UsageError, lambda e, c: e.cancel(NUL)),
    "signal run id": (td.UsageError, lambda e, c: c.signal(NUL, "go")),
    "history run id": (td.UsageError, lambda e, c: e.history(NUL)),
    "run_detail run id": (td.UsageError, lambda e, c: c.run_detail(NUL)),
    "fan_page run id": (td.UsageError, lambda e, c: e.fan_page(NUL, 1)),
    "query run id": (td.UsageError, lambda e, c: e.query(NUL, "q")),
    "update run id": (td.UsageError, lambda e, c: c.update(NUL, "u")),
    "get_event run id": (td.UsageError, lambda e, c: e.get_event(NUL, "k", timeout=1)),
    "retry run id": (td.UsageError, lambda e, c: e.retry(NUL)),
    "fork run id": (td.UsageError, lambda e, c: c.fork(NUL, from_seq=1)),
    "continue_run run id": (td.UsageError, lambda e, c: e.continue_run(NUL)),
    "skip_step run id": (td.UsageError, lambda e, c: c.skip_step(NUL)),
    "paused_steps run id": (td.UsageError, lambda e, c: e.paused_steps(NUL)),
    "stream run id": (td.UsageError, lambda e, c: _first(e.stream(NUL))),
    "entity call id": (td.UsageError, lambda e, c: e.entity("box", "k", call_id=NUL).put("x")),
    "event id": (td.UsageError, lambda e, c: e.get_event_record(NUL)),
    "list_events after": (td.UsageError, lambda e, c: c.list_events(after=NUL)),
    "schedule name": (td.UsageError, lambda e, c: e.get_schedule(NUL)),
    "clear_breakpoint id": (td.UsageError, lambda e, c: c.clear_breakpoint(NUL)),
}


BY_ID_RULE = {"entity call id"}


async def _first(stream: AsyncIterator[Any]) -> Any:
    async for item in stream:
        return item
    return None


@pytest.mark.parametrize("case", CALLS, ids=str)
async def test_a_call_with_nul_is_refused_before_anything_is_written(
    store: Recording, case: str
) -> None:
    error, call = CALLS[case]
    async with _engine_and_client(store) as (engine, client):
        await engine.start(plain, run_id="r")
        # An id's own rule (letters, digits, ...) refuses a NUL already.
        with pytest.raises(error, match="letters, digits" if case in BY_ID_RULE else "NUL"):
            await call(engine, client)
        assert not any(holds_nul(op) for op in store.written)


@pytest.mark.parametrize("case", BODIES, ids=str)
async def test_a_body_that_uses_nul_fails_with_a_usage_error_and_writes_none(
    store: Recording, case: str
) -> None:
    async with _engine_and_client(store) as (engine, _):
        await engine.start("uses_" + case.replace(" ", "_"), run_id="b")
        # Drained, the run ended or waits: it must have failed at the call.
        await engine.drain()
        run = await engine.get("b")
        assert run.status == "failed"
        assert run.error is not None
        if case.endswith("by name"):
            # No workflow is registered under a name holding a NUL.
            assert run.error.type == "UnknownWorkflowError"
        else:
            assert "NUL" in run.error.message
            assert run.error.type in {"UsageError", "SearchAttributeError", "EntityKeyError"}
        assert not any(holds_nul(op) for op in store.written)


async def _workflow(ctx: td.Context) -> None: ...


async def _step() -> None: ...


class _Entity:
    @td.exclusive
    async def put(self) -> None: ...


REGISTRATIONS: dict[str, Callable[[td.App], object]] = {
    "on-error code": lambda a: td.OnError(NUL, workflow="handler"),
    "on-error handler": lambda a: td.OnError("code", workflow=NUL),
    "workflow name": lambda a: a.workflow(name=NUL)(_workflow),
    "workflow version": lambda a: a.workflow(version=NUL)(_workflow),
    "event name": lambda a: a.workflow(events=["order", NUL])(_workflow),
    "remote workflow": lambda a: a.remote_workflow(NUL),
    "remote workflow group": lambda a: a.remote_workflow("w", group=NUL),
    "step name": lambda a: a.step(name=NUL)(_step),
    "step group": lambda a: a.step(group=NUL)(_step),
    "queue": lambda a: a.queue(NUL, concurrency=1),
    "entity": lambda a: a.entity(NUL)(_Entity),
    "schedule": lambda a: a.schedule(NUL, "w"),
    "search attribute": lambda a: a.search_attribute(NUL, str),
}


@pytest.mark.parametrize("case", REGISTRATIONS, ids=str)
def test_a_registration_with_nul_is_refused(case: str) -> None:
    with pytest.raises(td.UsageError):
        REGISTRATIONS[case](td.App("registrations"))


async def test_payloads_and_error_messages_may_hold_nul(store: Recording) -> None:
    async with _engine_and_client(store) as (engine, client):
        assert await (await engine.start(echoes, NUL)).result() == NUL
        await engine.start(plain, run_id="s", tags=["t"])
        await client.signal("s", "go", NUL)
        assert await engine.result("s") == NUL
        failing = await engine.start(fails, NUL)
        with pytest.raises(td.RunFailed) as info:
            await failing.result()
        assert (info.value.message, info.value.code) == (NUL, "nul")
        # A tag is found by its own text only.
        page = await engine.list_runs(tags=["t"])
        assert [run.id for run in page.runs] == ["s"]
