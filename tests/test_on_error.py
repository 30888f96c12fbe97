"""On-error routing: routes and their checks, codes and details that travel
with a failure, handoffs to handler workflows (and their recovery after a
crash), retries that retire a handoff, lineage of engine-made ids, unserved
routes, and the events and metrics of routing.

Engines run on the memory store; tests that need workers share a
`MemoryBroker` the test owns. `bodies` counts the turns that entered each
run's body, so "the body never runs again" is checked, not assumed.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from prometheus_samples import families, sample, samples
from trio_durable._base._on_error import (
    HANDOFF_BASE,
    NEVER_ROUTED,
    pick_on_error_route,
)
from trio_durable._kernel._catalogue import CACHE_SECONDS
from trio_durable._stores._ops import CreateRun, Op, PutCheckpoint, ReleaseRun, UpdateRun

app = td.App("routing")

bodies: Counter[str] = Counter()
"""Body entries per run id: one per turn that replayed the body."""

handler_inputs: dict[str, dict[str, Any]] = {}
"""The input each handler run's body was given, by handler run id."""

step_calls: Counter[str] = Counter()
"""How often each step function really ran."""

DETAILS: dict[str, Any] = {"amount": 12.5, "items": ["sku-1", None, {"n": 2}], "final": False}
"""JSON details that must arrive everywhere exactly as raised."""


class Gate:
    """Lets a test hold the second call of `pay` while it looks at the store."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.lenient = False


gate = Gate()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    global gate
    bodies.clear()
    handler_inputs.clear()
    step_calls.clear()
    gate = Gate()
    yield
    bodies.clear()
    handler_inputs.clear()
    step_calls.clear()


# -- handlers -----------------------------------------------------------------


@app.workflow()
async def refund(ctx: td.Context, info: dict[str, Any]) -> str:
    bodies[ctx.run_id] += 1
    handler_inputs[ctx.run_id] = info
    return f"refunded {info['run_id']}"


@app.workflow()
async def page_oncall(ctx: td.Context, info: dict[str, Any]) -> str:
    bodies[ctx.run_id] += 1
    handler_inputs[ctx.run_id] = info
    raise td.FatalError("pager down", code="pager_down", details={"tried": ["sms", "call"]})


@app.step()
async def decide(verdict: str) -> str:
    step_calls["decide"] += 1
    if verdict == "fail" and not gate.lenient:
        raise td.FatalError("handler gave up", code="gave_up", details={"verdict": verdict})
    return verdict


@app.workflow()
async def waiting_handler(ctx: td.Context, info: dict[str, Any]) -> str:
    """Waits for the signal ``verdict``; ``"fail"`` fails it (unless the gate
    is lenient), anything else completes it."""
    bodies[ctx.run_id] += 1
    handler_inputs[ctx.run_id] = info
    verdict = await ctx.wait_signal("verdict", type=str)
    decided = await ctx.step(decide, verdict)
    return f"handled {info['run_id']}: {decided}"


@app.workflow()
async def echo(ctx: td.Context, info: dict[str, Any]) -> dict[str, Any]:
    bodies[ctx.run_id] += 1
    return info


# -- routed workflows ---------------------------------------------------------


@app.workflow(
    on_error=[td.OnError("card_declined", workflow="refund"), td.OnError(workflow="page_oncall")]
)
async def checkout(ctx: td.Context, code: str | None) -> str:
    bodies[ctx.run_id] += 1
    raise td.FatalError("payment failed", code=code, details=DETAILS)


@app.workflow(on_error=[td.OnError("card_declined", workflow="refund")])
async def code_only(ctx: td.Context, code: str | None) -> str:
    bodies[ctx.run_id] += 1
    raise td.FatalError("payment failed", code=code, details=DETAILS)


@app.step()
async def reserve(item: str) -> str:
    step_calls["reserve"] += 1
    return f"reserved {item}"


@app.workflow(on_error=[td.OnError(workflow="waiting_handler")])
async def held(ctx: td.Context, item: str) -> str:
    bodies[ctx.run_id] += 1
    await ctx.step(reserve, item)
    raise td.FatalError("held failed", code="held", details=DETAILS)


@app.step()
async def pay(amount: int) -> str:
    """Declines every call; the second call waits for the gate first."""
    step_calls["pay"] += 1
    attempt = step_calls["pay"]
    if attempt >= 2:
        gate.entered.set()
        await gate.release.wait()
    raise td.FatalError("declined", code="declined", details={"call": attempt})


@app.workflow(on_error=[td.OnError("declined", workflow="waiting_handler")])
async def payment(ctx: td.Context, amount: int) -> str:
    bodies[ctx.run_id] += 1
    await ctx.step(reserve, f"{amount}")
    return await ctx.step(pay, amount)


@app.workflow(on_error=[td.OnError(workflow="refund")])
async def nests(ctx: td.Context, x: int) -> str:
    bodies[ctx.run_id] += 1
    # A workflow called like a function: a program bug, never routed.
    value: str = await refund(ctx, {"run_id": ctx.run_id})
    return value


@app.workflow()
async def parent(ctx: td.Context, code: str) -> dict[str, Any]:
    bodies[ctx.run_id] += 1
    try:
        value = await ctx.child(checkout, code)
    except td.RunFailed as exc:
        return {
            "failed": exc.run_id,
            "error": exc.message,
            "code": exc.code,
            "details": exc.details,
        }
    return {"value": value}


@app.workflow()
async def strict_parent(ctx: td.Context, code: str) -> str:
    bodies[ctx.run_id] += 1
    return await ctx.child(checkout, code)


@app.step()
async def unbook(item: str) -> None:
    step_calls["unbook"] += 1


@app.step()
async def book(item: str) -> str:
    step_calls["book"] += 1
    return f"booked {item}"


@app.workflow(on_error=[td.OnError(workflow="page_oncall")])
async def trip(ctx: td.Context, item: str) -> str:
    bodies[ctx.run_id] += 1
    await ctx.step(book, item, compensate=unbook)
    raise td.FatalError("trip failed", code="no_seats")


@app.workflow()
async def settle_checkouts(ctx: td.Context, codes: list[str]) -> list[dict[str, Any]]:
    bodies[ctx.run_id] += 1
    return await ctx.all_settled(checkout, codes)


# -- failures raised everywhere -----------------------------------------------


@app.step()
async def local_boom(x: int) -> int:
    step_calls["local_boom"] += 1
    raise td.FatalError("local step failed", code="boom", details=DETAILS)


@app.step(group="far")
async def remote_boom(x: int) -> int:
    step_calls["remote_boom"] += 1
    raise td.FatalError("remote step failed", code="boom", details=DETAILS)


async def _explode(ctx: td.Context, where: str) -> int:
    if where == "local":
        return await ctx.step(local_boom, 1)
    if where == "remote":
        return await ctx.step(remote_boom, 1)
    if where == "child":
        return await ctx.child(explode, "body")
    raise td.FatalError("body failed", code="boom", details=DETAILS)


@app.workflow()
async def explode(ctx: td.Context, where: str) -> int:
    bodies[ctx.run_id] += 1
    return await _explode(ctx, where)


@app.workflow(on_error=[td.OnError(workflow="echo")])
async def explode_routed(ctx: td.Context, where: str) -> dict[str, Any]:
    bodies[ctx.run_id] += 1
    return {"value": await _explode(ctx, where)}


@app.workflow()
async def settle_each(ctx: td.Context, wheres: list[str]) -> list[dict[str, Any]]:
    return await ctx.all_settled(explode, wheres)


@app.workflow()
async def gather_each(ctx: td.Context, wheres: list[str]) -> list[dict[str, Any]]:
    try:
        await ctx.all(explode, wheres, mode="wait_all")
    except td.GatherError as exc:
        return [attrs.asdict(failure) for failure in exc.failures]
    return []


# -- helpers ------------------------------------------------------------------


def _received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    out: list[td.Event] = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


def _error(
    message: str, code: str | None, details: Any, type: str, step: str | None = None
) -> dict[str, Any]:
    """An error as a handler's input carries it (`ErrorInfo.to_json`), but
    for its traceback (see `_untraced`)."""
    error: dict[str, Any] = {"message": message}
    if code is not None:
        error["code"] = code
    if details is not None:
        error["details"] = details
    error["type"] = type
    if step is not None:
        error["step"] = step
    return error


def _untraced(error: dict[str, Any]) -> dict[str, Any]:
    """``error`` without its traceback, which must be there and end with
    the exception the run failed with."""
    error = dict(error)
    traceback = error.pop("traceback")
    assert (
        traceback.rstrip()
        .rsplit("\n", 1)[-1]
        .startswith(f"trio_durable._base._exceptions.{error['type']}: ")
    ), traceback
    return error


def _untraced_input(text: str) -> str:
    """A handler's stored input with the traceback taken out of its error."""
    [info] = json.loads(text)
    return json.dumps([{**info, "error": _untraced(info["error"])}], separators=(",", ":"))


def _handoff_input(run_id: str, workflow: str, args: list[Any], error: dict[str, Any]) -> str:
    return json.dumps(
        [{"run_id": run_id, "workflow": workflow, "input": args, "error": error}],
        separators=(",", ":"),
    )


async def _get(engine: td.Engine, run_id: str) -> td.Run:
    run = await engine.store.get_run(run_id)
    assert run is not None, run_id
    return run


async def _handoff(engine: td.Engine, run_id: str, attempt: int = 0) -> td.Checkpoint:
    seq = HANDOFF_BASE + attempt
    [cp] = await engine.store.get_checkpoints(run_id, seq, seq)
    return cp


# -- 1. routes: registration and selection ------------------------------------


def test_a_second_route_for_one_code_is_refused_naming_workflow_and_code() -> None:
    local = td.App("checks")
    with pytest.raises(td.RegistrationError) as info:

        @local.workflow(
            name="charge_card",
            on_error=[
                td.OnError("card_declined", workflow="refund"),
                td.OnError("card_declined", workflow="page_oncall"),
            ],
        )
        async def charge_card(ctx: td.Context) -> None: ...

    message = str(info.value)
    assert "'charge_card'" in message
    assert "'card_declined'" in message
    assert "'page_oncall'" in message
    assert "'refund'" in message
    assert not local.has_workflow("charge_card", "1")


def test_a_second_catch_all_is_refused_naming_the_workflow() -> None:
    local = td.App("checks")
    with pytest.raises(td.RegistrationError, match=r"'ship'.*second catch-all route") as info:

        @local.workflow(name="ship", on_error=[td.OnError(workflow="a"), td.OnError(workflow="b")])
        async def ship(ctx: td.Context) -> None: ...

    assert "'a'" in str(info.value)
    assert "'b'" in str(info.value)
    assert not local.has_workflow("ship", "1")


def test_one_route_per_code_and_one_catch_all_register() -> None:
    local = td.App("checks")
    routes = [
        td.OnError("card_declined", workflow="refund"),
        td.OnError("fraud", workflow="refund"),
        td.OnError(workflow="page_oncall"),
    ]

    @local.workflow(on_error=routes)
    async def fine(ctx: td.Context) -> None: ...

    assert fine.on_error == tuple(routes)
    assert local.get_workflow("fine").on_error == tuple(routes)


@pytest.mark.parametrize(
    "entry", ["refund", ("card_declined", "refund"), {"code": None, "workflow": "refund"}]
)
def test_on_error_takes_only_on_error_routes(entry: object) -> None:
    local = td.App("checks")
    with pytest.raises(td.RegistrationError, match=r"on_error of workflow 'w' takes td.OnError"):

        @local.workflow(name="w", on_error=[entry])  # type: ignore[list-item]
        async def w(ctx: td.Context) -> None: ...

    assert not local.has_workflow("w", "1")


@pytest.mark.parametrize(
    ("code", "workflow"), [("", "refund"), (3, "refund"), ("x", ""), (None, None)]
)
def test_a_route_needs_a_code_string_and_a_handler_name(code: Any, workflow: Any) -> None:
    with pytest.raises(td.RegistrationError):
        td.OnError(code, workflow=workflow)


def test_pick_route_takes_the_codes_route_else_the_catch_all_else_none() -> None:
    declined = td.OnError("card_declined", workflow="refund")
    catch_all = td.OnError(workflow="page_oncall")

    def error(code: str | None) -> td.ErrorInfo:
        return td.ErrorInfo(message="x", code=code)

    assert pick_on_error_route([catch_all, declined], error("card_declined")) is declined
    assert pick_on_error_route([declined, catch_all], error("fraud")) is catch_all
    assert pick_on_error_route([declined, catch_all], error(None)) is catch_all
    assert pick_on_error_route([declined], error("fraud")) is None
    assert pick_on_error_route([declined], error(None)) is None
    assert pick_on_error_route([], error("card_declined")) is None
    assert {"non_determinism", "nested_workflow_call"} == NEVER_ROUTED
    for code in NEVER_ROUTED:
        # Not even by a route naming the code itself.
        assert pick_on_error_route([td.OnError(code, workflow="x"), catch_all], error(code)) is None


async def test_a_failure_no_route_matches_just_fails_the_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            for run_id, code in (("other", "fraud"), ("uncoded", None)):
                await engine.start(code_only, code, run_id=run_id)
                with pytest.raises(td.RunFailed) as info:
                    await engine.result(run_id)
                assert (info.value.code, info.value.details) == (code, DETAILS)
                run = await _get(engine, run_id)
                assert run.status == "failed"
                assert run.error == td.ErrorInfo(
                    message="payment failed", code=code, details=DETAILS, type="FatalError"
                )
                assert run.tags == ()
                assert await engine.store.get_checkpoints(run_id) == []
                assert await engine.store.get_run(f"{run_id}.onError.0") is None
            await engine.drain()
            kinds = [(e.kind, e.run_id) for e in _received(events)]
    assert kinds == [
        ("run.started", "other"),
        ("run.failed", "other"),
        ("run.started", "uncoded"),
        ("run.failed", "uncoded"),
    ]
    assert bodies == {"other": 1, "uncoded": 1}
    assert "refund" not in handler_inputs


# Two deploys of one app: the second changed the body under a run in flight,
# and both route every failure to `rescue`.

deploy_1 = td.App("deploys")
deploy_2 = td.App("deploys")


@deploy_1.step(name="first")
async def first_1(x: int) -> int:
    step_calls["first"] += 1
    return x


@deploy_1.workflow(name="deployed", on_error=[td.OnError(workflow="rescue")])
async def deployed_1(ctx: td.Context, x: int) -> int:
    bodies[ctx.run_id] += 1
    value = await ctx.step(first_1, x)
    await ctx.wait_signal("go")
    return value


@deploy_2.step(name="second")
async def second_2(x: int) -> int:
    step_calls["second"] += 1
    return x


@deploy_2.workflow(name="deployed", on_error=[td.OnError(workflow="rescue")])
async def deployed_2(ctx: td.Context, x: int) -> int:
    bodies[ctx.run_id] += 1
    # seq 1 recorded the step "first"; this deploy asks for "second" there.
    value = await ctx.step(second_2, x)
    await ctx.wait_signal("go")
    return value


for _deploy in (deploy_1, deploy_2):

    @_deploy.workflow(name="rescue")
    async def rescue(ctx: td.Context, info: dict[str, Any]) -> int:
        bodies[ctx.run_id] += 1
        return 0


async def test_non_determinism_is_never_routed_even_with_a_catch_all(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(deploy_1, store=store) as engine:
        await engine.start(deployed_1, 7, run_id="r")
        await engine.drain()
        assert (await _get(engine, "r")).status == "suspended"
    async with open_test_engine(deploy_2, store=store, engine_id="new-deploy") as engine:
        with engine.subscribe() as events:
            await engine.signal("r", "go")
            with pytest.raises(td.RunFailed) as info:
                await engine.result("r")
            await engine.drain()
            kinds = [e.kind for e in _received(events)]
        assert info.value.code == "non_determinism"
        run = await _get(engine, "r")
        assert run.status == "failed"
        assert run.error is not None
        assert run.error.code == "non_determinism"
        assert run.tags == ()
        cps = await store.get_checkpoints("r")
        assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
            (1, "first", "completed"),
            (2, "go", "completed"),
        ]
        assert await store.get_run("r.onError.0") is None
        assert samples(engine.metrics(), "trio_durable_runs_routed_total") == {}
    assert kinds == ["run.failed"]
    assert bodies == {"r": 2}
    assert step_calls == {"first": 1}


async def test_a_nested_workflow_call_is_never_routed_even_with_a_catch_all(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            await engine.start(nests, 1, run_id="n")
            with pytest.raises(td.RunFailed) as info:
                await engine.result("n")
            await engine.drain()
            kinds = [e.kind for e in _received(events)]
        assert info.value.code == "nested_workflow_call"
        run = await _get(engine, "n")
        assert run.status == "failed"
        assert run.tags == ()
        assert await engine.store.get_checkpoints("n") == []
        assert await engine.store.get_run("n.onError.0") is None
    assert kinds == ["run.started", "run.failed"]
    assert bodies == {"n": 1}


# -- 2. codes and details travel ----------------------------------------------

WHERES = ["local", "remote", "child", "body"]
EXPECTED: dict[str, tuple[str, str]] = {
    # where -> (message, the exception type the run failed with)
    "local": ("local step failed", "StepFailed"),
    "remote": ("remote step failed", "RemoteStepError"),
    "child": ("body failed", "RunFailed"),
    "body": ("body failed", "FatalError"),
}
STEPS: dict[str, str | None] = {
    # where -> the step whose failure failed the run
    "local": "local_boom",
    "remote": "remote_boom",
    "child": None,
    "body": None,
}


def _far_engine(open_test_engine: EngineFactory) -> AbstractAsyncContextManager[td.Engine]:
    return open_test_engine(app, broker=td.MemoryBroker(), serve=["far"])


@pytest.mark.parametrize("where", WHERES)
async def test_code_and_details_reach_the_runs_stored_error(
    open_test_engine: EngineFactory, where: str, autojump_clock: trio.abc.Clock
) -> None:
    message, kind = EXPECTED[where]
    async with _far_engine(open_test_engine) as engine:
        await engine.start(explode, where, run_id="x")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("x")
        assert (info.value.message, info.value.code, info.value.details) == (
            message,
            "boom",
            DETAILS,
        )
        run = await _get(engine, "x")
        assert run.error == td.ErrorInfo(
            message=message, code="boom", details=DETAILS, type=kind, step=STEPS[where]
        )
        if where == "child":
            child = await _get(engine, "x.child.1")
            assert child.error == td.ErrorInfo(
                message="body failed", code="boom", details=DETAILS, type="FatalError"
            )
            [cp] = await engine.store.get_checkpoints("x")
            assert json.loads(cp.output or "") == {
                "ok": False,
                "error": "body failed",
                "code": "boom",
                "details": DETAILS,
            }


async def test_code_and_details_reach_all_settled_items(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with _far_engine(open_test_engine) as engine:
        await engine.start(settle_each, WHERES, run_id="s")
        items = await engine.result("s")
        runs = await engine.store.list_runs()
    assert items == [
        {
            "status": "rejected",
            "id": f"s.all.1.{i}",
            "error": EXPECTED[where][0],
            "code": "boom",
            "details": DETAILS,
        }
        for i, where in enumerate(WHERES)
    ]
    # Every id the engine made names its parent.
    assert {run.id: run.parent_id for run in runs} == {run.id: td.parent_of(run.id) for run in runs}
    assert {run.id for run in runs} == {
        "s",
        *(f"s.all.1.{i}" for i in range(4)),
        "s.all.1.2.child.1",
    }


async def test_code_and_details_reach_gather_error_failures(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with _far_engine(open_test_engine) as engine:
        await engine.start(gather_each, WHERES, run_id="g")
        failures = await engine.result("g")
    assert failures == [
        {
            "index": i,
            "id": f"g.all.1.{i}",
            "error": EXPECTED[where][0],
            "code": "boom",
            "details": DETAILS,
        }
        for i, where in enumerate(WHERES)
    ]


@pytest.mark.parametrize("where", WHERES)
async def test_code_and_details_reach_the_handlers_input(
    open_test_engine: EngineFactory, where: str, autojump_clock: trio.abc.Clock
) -> None:
    message, kind = EXPECTED[where]
    async with _far_engine(open_test_engine) as engine:
        await engine.start(explode_routed, where, run_id="x")
        info = await engine.result("x")
        handoff = await _handoff(engine, "x")
    error = _error(message, "boom", DETAILS, kind, STEPS[where])
    # The handler (echo) returned its input, and the run completed with it.
    assert {**info, "error": _untraced(info["error"])} == {
        "run_id": "x",
        "workflow": "explode_routed",
        "input": [where],
        "error": error,
    }
    assert _untraced_input(handoff.input or "") == _handoff_input(
        "x", "explode_routed", [where], error
    )


# -- 3. handoff ---------------------------------------------------------------


async def test_handoff_to_a_handler_that_completes(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    error = _error("payment failed", "card_declined", DETAILS, "FatalError")
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            await engine.start(checkout, "card_declined", run_id="r", tags=["vip"])
            assert await engine.result("r") == "refunded r"
            await engine.drain()
            got = _received(events)
        run = await _get(engine, "r")
        handler = await _get(engine, "r.onError.0")
        cps = await engine.store.get_checkpoints("r")
    assert run.status == "completed"
    assert run.output == '"refunded r"'
    assert run.error is None
    assert run.tags == ("vip", "onError:card_declined")
    assert (handler.workflow, handler.version, handler.status) == ("refund", "1", "completed")
    assert (handler.parent_id, handler.parent_seq) == ("r", 1_000_000_000)
    assert _untraced_input(handler.input) == _handoff_input(
        "r", "checkout", ["card_declined"], error
    )
    # The handler's input is exactly these four keys.
    [(handler_id, info)] = handler_inputs.items()
    assert (handler_id, {**info, "error": _untraced(info["error"])}) == (
        "r.onError.0",
        {
            "run_id": "r",
            "workflow": "checkout",
            "input": ["card_declined"],
            "error": error,
        },
    )
    [cp] = cps
    assert (cp.seq, cp.kind, cp.name, cp.child_id, cp.status) == (
        1_000_000_000,
        "child",
        "refund",
        "r.onError.0",
        "completed",
    )
    # The handler's end settled it (a completion carries no error); the
    # failure handed off stays in its input.
    assert cp.error is None
    assert cp.input == handler.input
    assert json.loads(cp.output or "") == {"ok": True, "value": "refunded r"}
    assert [(e.kind, e.run_id) for e in got] == [
        ("run.started", "r"),
        ("run.started", "r.onError.0"),
        ("run.routed", "r"),
        ("run.completed", "r.onError.0"),
        ("run.completed", "r"),
    ]
    routed = got[2]
    assert routed.workflow == "checkout"
    assert routed.data == {
        "code": "card_declined",
        "handler": "r.onError.0",
        "workflow_handler": "refund",
    }
    assert bodies == {"r": 1, "r.onError.0": 1}


async def test_handoff_to_a_handler_that_fails_fails_the_run_with_its_error(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(checkout, "fraud", run_id="r")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("r")
        run = await _get(engine, "r")
        handler = await _get(engine, "r.onError.0")
        cp = await _handoff(engine, "r")
    assert (info.value.run_id, info.value.message, info.value.code, info.value.details) == (
        "r",
        "pager down",
        "pager_down",
        {"tried": ["sms", "call"]},
    )
    assert run.status == "failed"
    assert run.error == td.ErrorInfo(
        message="pager down",
        code="pager_down",
        details={"tried": ["sms", "call"]},
        type="RunFailed",
    )
    # The catch-all took it: tagged "*", though the failure had a code.
    assert run.tags == ("onError:*",)
    assert (handler.workflow, handler.status) == ("page_oncall", "failed")
    assert _untraced(handler_inputs["r.onError.0"]["error"]) == _error(
        "payment failed", "fraud", DETAILS, "FatalError"
    )
    assert (cp.name, cp.status) == ("page_oncall", "failed")
    # The checkpoint keeps the failure that was handed off; its output is
    # the handler's end.
    assert cp.error is not None
    assert cp.error.code == "pager_down"
    assert json.loads(cp.output or "") == {
        "ok": False,
        "error": "pager down",
        "code": "pager_down",
        "details": {"tried": ["sms", "call"]},
    }
    assert bodies == {"r": 1, "r.onError.0": 1}


async def test_a_failure_without_a_code_takes_the_catch_all(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(checkout, None, run_id="r")
        with pytest.raises(td.RunFailed):
            await engine.result("r")
        run = await _get(engine, "r")
    assert run.tags == ("onError:*",)
    assert _untraced(handler_inputs["r.onError.0"]["error"]) == _error(
        "payment failed", None, DETAILS, "FatalError"
    )


async def test_the_handoff_is_pending_until_the_handler_ends_and_the_body_never_reruns(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        await engine.start(held, "sku-1", run_id="r")
        await engine.drain()
        run = await _get(engine, "r")
        assert (run.status, run.wake_at, run.lease_owner) == ("suspended", None, None)
        assert run.tags == ("onError:*",)
        cps = await store.get_checkpoints("r")
        assert [(cp.seq, cp.kind, cp.name, cp.status) for cp in cps] == [
            (1, "local", "reserve", "completed"),
            (1_000_000_000, "child", "waiting_handler", "pending"),
        ]
        assert cps[1].output is None
        assert cps[1].finished_at is None
        assert cps[1].error == td.ErrorInfo(
            message="held failed", code="held", details=DETAILS, type="FatalError"
        )
        assert (await _get(engine, "r.onError.0")).status == "suspended"
    # A later engine (a restart) and another after it: the run only follows
    # its handler.
    await trio.sleep(100)
    async with open_test_engine(app, store=store, engine_id="restarted") as engine:
        await engine.drain()
        assert (await _get(engine, "r")).status == "suspended"
    async with open_test_engine(app, store=store, engine_id="again") as engine:
        await engine.signal("r.onError.0", "verdict", "ok")
        assert await engine.result("r") == "handled r: ok"
        assert trio.current_time() == 100
        cp = await _handoff(engine, "r")
        assert cp.status == "completed"
        assert cp.finished_at == WALL_START + 100
        assert json.loads(cp.output or "") == {"ok": True, "value": "handled r: ok"}
    assert bodies == {"r": 1, "r.onError.0": 2}
    assert step_calls == {"reserve": 1, "decide": 1}


class CrashingStore(td.MemoryStore):  # type: ignore[misc]
    """A memory store under which the engine dies around a handoff's write.

    ``after_commit``: the handoff's batch commits whole, then the engine
    dies before the effects that follow a commit (waking the handler): the
    crash window an atomic store leaves. ``handler_lost``: of that batch only
    the run's checkpoints (the handoff among them) are written, not the
    handler's run nor the run's suspension, then the engine dies: the
    handoff is recorded, the handler never started, and the run is left
    leased by an engine that is gone. ``suspend_lost``: the handoff and the
    handler's run are written, not the run's suspension, then the engine
    dies. Unless ``releases``, the dead engine's leases are not given back
    (a killed process gives back nothing).
    """

    def __init__(self, mode: str, *, releases: bool = False) -> None:
        super().__init__()
        self.mode = mode
        self.releases = releases
        self.engine_scope = trio.CancelScope()
        self.crashed = False

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if self.crashed and not self.releases:
            # A process that died gives back no lease: the clean close of the
            # engine that is cancelled here must not either.
            ops = [op for op in ops if not (isinstance(op, ReleaseRun) and op.owner == "doomed")]
        handoff = any(
            isinstance(op, PutCheckpoint) and op.checkpoint.seq >= HANDOFF_BASE for op in ops
        ) and any(isinstance(op, CreateRun) and ".onError." in op.run.id for op in ops)
        if self.crashed or not handoff:
            return await super().apply(ops)
        self.crashed = True
        if self.mode == "handler_lost":
            ops = [op for op in ops if isinstance(op, PutCheckpoint)]
        elif self.mode == "suspend_lost":
            ops = [op for op in ops if isinstance(op, PutCheckpoint | CreateRun)]
        await super().apply(ops)
        self.engine_scope.cancel()
        await trio.lowlevel.checkpoint()
        raise AssertionError("the crashed engine went on")


async def _crash_at_handoff(
    open_test_engine: EngineFactory,
    store: CrashingStore,
    workflow: td.Workflow[..., Any] = checkout,
    arg: str = "card_declined",
) -> None:
    with store.engine_scope:
        async with open_test_engine(app, store=store, engine_id="doomed") as engine:
            await engine.start(workflow, arg, run_id="r")
            await trio.sleep_forever()
    assert store.crashed
    assert bodies == {"r": 1}


async def test_a_crash_after_the_handoff_committed_is_recovered(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = CrashingStore("after_commit")
    await _crash_at_handoff(open_test_engine, store)
    run = await store.get_run("r")
    handler = await store.get_run("r.onError.0")
    assert run is not None
    assert run.status == "suspended"
    # The handler was recorded but never started.
    assert handler is not None
    assert (handler.status, handler.lease_owner) == ("pending", None)
    assert "r.onError.0" not in bodies
    async with open_test_engine(app, store=store, engine_id="heir") as engine:
        assert await engine.result("r") == "refunded r"
        assert trio.current_time() == 0
    assert bodies == {"r": 1, "r.onError.0": 1}


@pytest.mark.parametrize(
    ("releases", "resumed_at", "recoveries"),
    [(False, 30, 1), (True, 0, 0)],
    ids=["lease lapses", "lease given back"],
)
async def test_a_handoff_whose_handler_never_started_starts_it_on_the_next_execution(
    open_test_engine: EngineFactory,
    autojump_clock: trio.abc.Clock,
    releases: bool,
    resumed_at: float,
    recoveries: int,
) -> None:
    store = CrashingStore("handler_lost", releases=releases)
    await _crash_at_handoff(open_test_engine, store)
    run = await store.get_run("r")
    assert run is not None
    assert (run.status, run.lease_owner, run.lease_expiry) == (
        ("running", None, None) if releases else ("running", "doomed", WALL_START + 30)
    )
    [cp] = await store.get_checkpoints("r")
    assert (cp.seq, cp.status, cp.child_id) == (1_000_000_000, "pending", "r.onError.0")
    assert await store.get_run("r.onError.0") is None
    async with open_test_engine(app, store=store, engine_id="heir") as engine:
        # The next execution comes when the dead engine's lease lapses (at
        # once if it was given back): it starts the handler, not the body.
        assert await engine.result("r") == "refunded r"
        assert trio.current_time() == resumed_at
        run = await _get(engine, "r")
        handler = await _get(engine, "r.onError.0")
    assert run.recoveries == recoveries
    assert (handler.status, handler.created_at) == ("completed", WALL_START + resumed_at)
    assert (handler.parent_id, handler.parent_seq) == ("r", 1_000_000_000)
    assert handler.input == cp.input
    assert bodies == {"r": 1, "r.onError.0": 1}


async def test_a_cancelled_run_does_not_follow_its_handoff_and_cancels_the_handler(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(held, "sku-1", run_id="r")
        await engine.drain()
        assert (await _get(engine, "r.onError.0")).status == "suspended"
        with engine.subscribe() as events:
            await engine.cancel("r")
            with pytest.raises(td.RunCancelled) as info:
                await engine.result("r")
            with pytest.raises(td.RunCancelled):
                await engine.result("r.onError.0")
            await engine.drain()
            got = [(e.kind, e.run_id) for e in _received(events)]
        assert info.value.code == "cancelled"
        run = await _get(engine, "r")
        assert run.status == "cancelled"
        handler = await _get(engine, "r.onError.0")
        assert handler.status == "cancelled"
        cp = await _handoff(engine, "r")
        assert cp.status == "failed"
        assert json.loads(cp.output or "")["code"] == "cancelled"
        with pytest.raises(td.InvalidRunStateError):
            await engine.signal("r.onError.0", "verdict", "ok")
    assert sorted(got) == [("run.cancelled", "r"), ("run.cancelled", "r.onError.0")]
    # The failed run's body never runs again; the handler's is replayed once
    # more by its cancel, to deliver td.Cancelled where it waits.
    assert bodies == {"r": 1, "r.onError.0": 2}
    assert "decide" not in step_calls


async def test_a_handler_cancelled_on_its_own_fails_the_run_with_code_cancelled(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(held, "sku-1", run_id="r")
        await engine.drain()
        await engine.cancel("r.onError.0")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("r")
        run = await _get(engine, "r")
    assert not isinstance(info.value, td.RunCancelled)
    assert (info.value.run_id, info.value.code) == ("r", "cancelled")
    assert run.status == "failed"
    assert run.error == td.ErrorInfo(message="cancelled", code="cancelled", type="RunFailed")


# -- 4. retry after a handoff -------------------------------------------------


async def test_retry_retires_the_handoff_and_the_next_failure_hands_off_anew(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(payment, 5, run_id="p", tags=["vip"])
        await engine.drain()
        assert (await _get(engine, "p")).tags == ("vip", "onError:declined")
        await engine.signal("p.onError.0", "verdict", "fail")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "gave_up"
        first = await _handoff(engine, "p")

        with engine.subscribe() as events:
            await engine.retry("p")
            # The body runs again; hold its failing step to look at the
            # store as retry left it.
            await gate.entered.wait()
            run = await _get(engine, "p")
            assert run.status == "running"
            assert run.tags == ("vip",)
            assert run.error is None
            cps = await engine.store.get_checkpoints("p")
            assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
                (1, "reserve", "completed"),
                (1_000_000_000, "onError:retried:p.onError.0", "failed"),
            ]
            retired = cps[1]
            assert attrs.evolve(retired, name=first.name) == first
            old = await _get(engine, "p.onError.0")
            # Its waiter is gone, and it was not retried.
            assert (old.status, old.parent_id, old.parent_seq) == ("failed", "p", None)

            gate.release.set()
            await engine.drain()
            got = _received(events)
        run = await _get(engine, "p")
        assert (run.status, run.tags) == ("suspended", ("vip", "onError:declined"))
        second = await _handoff(engine, "p", 1)
        assert (second.seq, second.name, second.status, second.child_id) == (
            1_000_000_001,
            "waiting_handler",
            "pending",
            "p.onError.1",
        )
        assert second.error == td.ErrorInfo(
            message="declined", code="declined", details={"call": 2}, type="StepFailed", step="pay"
        )
        new = await _get(engine, "p.onError.1")
        assert (new.parent_id, new.parent_seq) == ("p", 1_000_000_001)
        assert handler_inputs["p.onError.1"]["error"]["details"] == {"call": 2}
        routed = [e for e in got if e.kind == "run.routed"]
        assert [e.data["handler"] for e in routed] == ["p.onError.1"]

        # The old handler ending later (retried by hand, now completing)
        # settles nothing of the run's.
        gate.lenient = True
        await engine.retry("p.onError.0")
        assert await engine.result("p.onError.0") == "handled p: fail"
        await engine.drain()
        assert (await _get(engine, "p")).status == "suspended"
        assert await _handoff(engine, "p") == retired
        assert (await _handoff(engine, "p", 1)).status == "pending"

        await engine.signal("p.onError.1", "verdict", "ok")
        assert await engine.result("p") == "handled p: ok"
        cps = await engine.store.get_checkpoints("p")
    assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
        (1, "reserve", "completed"),
        (2, "pay", "failed"),
        (1_000_000_000, "onError:retried:p.onError.0", "failed"),
        (1_000_000_001, "waiting_handler", "completed"),
    ]
    assert bodies["p"] == 2
    assert step_calls["reserve"] == 1
    assert step_calls["pay"] == 2


async def test_retry_of_a_dead_run_retires_a_pending_handoff(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = CrashingStore("handler_lost")
    await _crash_at_handoff(open_test_engine, store)
    async with open_test_engine(app, store=store, engine_id="heir", max_recoveries=0) as engine:
        # Taken over from the dead engine once too often: the run is dead
        # with its handoff still pending.
        with pytest.raises(td.RunFailed) as info:
            await engine.result("r")
        assert info.value.code == "dead"
        assert trio.current_time() == 30
        assert (await _handoff(engine, "r")).status == "pending"
        await engine.retry("r")
        assert await engine.result("r") == "refunded r"
        cps = await engine.store.get_checkpoints("r")
        assert [(cp.seq, cp.name, cp.status, cp.child_id) for cp in cps] == [
            (1_000_000_000, "onError:retried:r.onError.0", "pending", "r.onError.0"),
            (1_000_000_001, "refund", "completed", "r.onError.1"),
        ]
        # The handler of the retired handoff never ran.
        assert await engine.store.get_run("r.onError.0") is None
        run = await _get(engine, "r")
        assert run.tags == ("onError:card_declined",)
    assert bodies == {"r": 2, "r.onError.1": 1}


async def test_a_retired_handoffs_live_handler_settles_nothing_when_it_ends(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    # The run dies (taken over once too often) while its handler still runs:
    # retrying it retires a handoff whose handler is alive.
    store = CrashingStore("suspend_lost")
    await _crash_at_handoff(open_test_engine, store, held, "sku-1")
    async with open_test_engine(app, store=store, engine_id="heir", max_recoveries=0) as engine:
        with pytest.raises(td.RunFailed) as info:
            await engine.result("r")
        assert info.value.code == "dead"
        assert trio.current_time() == 30
        old = await _get(engine, "r.onError.0")
        assert (old.status, old.parent_seq) == ("suspended", 1_000_000_000)

        await engine.retry("r")
        await engine.drain()
        old = await _get(engine, "r.onError.0")
        assert (old.status, old.parent_id, old.parent_seq) == ("suspended", "r", None)
        retired = await _handoff(engine, "r")
        assert (retired.name, retired.status) == ("onError:retried:r.onError.0", "pending")
        assert (await _handoff(engine, "r", 1)).child_id == "r.onError.1"

        # The old handler ends: it settles nothing, and the run keeps
        # following the new one.
        await engine.signal("r.onError.0", "verdict", "ok")
        assert await engine.result("r.onError.0") == "handled r: ok"
        await engine.drain()
        assert (await _get(engine, "r")).status == "suspended"
        assert await _handoff(engine, "r") == retired

        # Cancelling the run cancels the handler it follows, and leaves the
        # retired handoff as it was.
        await engine.cancel("r")
        with pytest.raises(td.RunCancelled):
            await engine.result("r")
        await engine.drain()
        assert (await _get(engine, "r.onError.1")).status == "cancelled"
        assert (await _get(engine, "r.onError.0")).status == "completed"
        assert await _handoff(engine, "r") == retired
    assert bodies["r"] == 2


async def test_a_retired_handoffs_running_handler_survives_the_runs_cancellation(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = CrashingStore("suspend_lost")
    await _crash_at_handoff(open_test_engine, store, held, "sku-1")
    async with open_test_engine(app, store=store, engine_id="heir", max_recoveries=0) as engine:
        with pytest.raises(td.RunFailed):
            await engine.result("r")
        await engine.retry("r")
        await engine.drain()
        retired = await _handoff(engine, "r")
        await engine.cancel("r")
        with pytest.raises(td.RunCancelled):
            await engine.result("r")
        await engine.drain()
        assert (await _get(engine, "r.onError.1")).status == "cancelled"
        # The old handler is no longer the run's to cancel.
        assert (await _get(engine, "r.onError.0")).status == "suspended"
        assert await _handoff(engine, "r") == retired
        await engine.signal("r.onError.0", "verdict", "ok")
        assert await engine.result("r.onError.0") == "handled r: ok"
        assert await _handoff(engine, "r") == retired
        assert (await _get(engine, "r")).status == "cancelled"


async def test_retrying_a_parent_retries_its_routed_child_under_a_new_handoff(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(strict_parent, "fraud", run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert (info.value.run_id, info.value.code) == ("p", "pager_down")
        await engine.retry("p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "pager_down"
        child_cps = await engine.store.get_checkpoints("p.child.1")
        child = await _get(engine, "p.child.1")
    assert [(cp.seq, cp.name, cp.status, cp.child_id) for cp in child_cps] == [
        (1_000_000_000, "onError:retried:p.child.1.onError.0", "failed", "p.child.1.onError.0"),
        (1_000_000_001, "page_oncall", "failed", "p.child.1.onError.1"),
    ]
    assert child.tags == ("onError:*",)
    # Each handler ran once: the first was not retried.
    # The parent's body: at its start, when the child ended, at the retry,
    # when the retried child ended.
    assert bodies == {
        "p": 4,
        "p.child.1": 2,
        "p.child.1.onError.0": 1,
        "p.child.1.onError.1": 1,
    }


async def test_compensation_runs_before_the_handoff_and_only_once(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            await engine.start(trip, "seat", run_id="t", namespace="acme")
            with pytest.raises(td.RunFailed) as info:
                await engine.result("t")
            await engine.drain()
            got = [(e.kind, e.run_id, e.name) for e in _received(events)]
        cps = await engine.store.get_checkpoints("t")
        handler = await _get(engine, "t.onError.0")
    assert info.value.code == "pager_down"
    assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
        (-1, "unbook", "completed"),
        (1, "book", "completed"),
        (1_000_000_000, "page_oncall", "failed"),
    ]
    assert step_calls == {"book": 1, "unbook": 1}
    assert handler.namespace == "acme"
    undo = got.index(("step.completed", "t", "unbook"))
    assert undo < got.index(("run.routed", "t", None)) < got.index(("run.failed", "t", None))


# -- 5. lineage ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "parent_id"),
    [
        ("order-42.child.3", "order-42"),
        ("order-42.all.2.7", "order-42"),
        ("order-42.onError.0", "order-42"),
        ("order-42.onError.12", "order-42"),
        ("a.b.child.1", "a.b"),
        ("r.all.3.1.child.2", "r.all.3.1"),
        ("r.child.1.onError.0", "r.child.1"),
        ("r.onError.1.all.4.0", "r.onError.1"),
        # Ids the engine did not make.
        ("order-42", None),
        ("checkout-00ab12cd34ef5678", None),
        (".child.1", None),
        ("r.child.x", None),
        ("r.child.", None),
        ("r.child.-1", None),
        ("r.all.3", None),
        ("r.all.3.x", None),
        ("r.onError", None),
        ("r.onerror.0", None),
        ("r.children.1", None),
        ("r.child.1.extra", None),
    ],
)
def test_parent_of(run_id: str, parent_id: str | None) -> None:
    assert td.parent_of(run_id) == parent_id


def test_lineage_walks_engine_made_ids_up_to_the_root() -> None:
    assert td.lineage("r.all.3.1.child.2.onError.0") == [
        "r.all.3.1.child.2.onError.0",
        "r.all.3.1.child.2",
        "r.all.3.1",
        "r",
    ]
    assert td.lineage("p.child.1.onError.0") == ["p.child.1.onError.0", "p.child.1", "p"]
    assert td.lineage("order-42") == ["order-42"]
    assert td.lineage("r.child.x") == ["r.child.x"]


# -- a parent awaiting a routed child -----------------------------------------


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("card_declined", {"value": "refunded p.child.1"}),
        (
            "fraud",
            {
                "failed": "p.child.1",
                "error": "pager down",
                "code": "pager_down",
                "details": {"tried": ["sms", "call"]},
            },
        ),
    ],
    ids=["handler completes", "handler fails"],
)
async def test_a_parent_awaiting_a_routed_child_sees_the_handlers_outcome(
    open_test_engine: EngineFactory,
    code: str,
    outcome: dict[str, Any],
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(parent, code, run_id="p")
        assert await engine.result("p") == outcome
        handler = await _get(engine, "p.child.1.onError.0")
        child = await _get(engine, "p.child.1")
        [cp] = await engine.store.get_checkpoints("p")
    assert handler.parent_id == "p.child.1"
    assert td.lineage(handler.id) == ["p.child.1.onError.0", "p.child.1", "p"]
    assert child.status == ("completed" if code == "card_declined" else "failed")
    assert (cp.child_id, cp.status) == ("p.child.1", child.status)
    # The parent's body ran when it started and once more when the child ended
    # (after its handler), never in between.
    assert bodies == {"p": 2, "p.child.1": 1, "p.child.1.onError.0": 1}


async def test_fan_members_that_hand_off_settle_with_their_handlers_outcome(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(settle_checkouts, ["card_declined", "fraud"], run_id="s")
        items = await engine.result("s")
        runs = {run.id: run for run in await engine.store.list_runs()}
    assert items == [
        {"status": "fulfilled", "value": "refunded s.all.1.0"},
        {
            "status": "rejected",
            "id": "s.all.1.1",
            "error": "pager down",
            "code": "pager_down",
            "details": {"tried": ["sms", "call"]},
        },
    ]
    assert sorted(runs) == [
        "s",
        "s.all.1.0",
        "s.all.1.0.onError.0",
        "s.all.1.1",
        "s.all.1.1.onError.0",
    ]
    assert all(run.parent_id == td.parent_of(run.id) for run in runs.values())
    assert td.lineage("s.all.1.1.onError.0") == ["s.all.1.1.onError.0", "s.all.1.1", "s"]
    # The join barrier woke the parent once, when both members had ended.
    assert bodies["s"] == 2


# -- the output of a handed-off run -------------------------------------------


@attrs.define(frozen=True)
class Apology:
    run_id: str
    note: str


@app.workflow()
async def apologise(ctx: td.Context, info: dict[str, Any]) -> Apology:
    return Apology(info["run_id"], "sorry")


@app.workflow()
async def explain(ctx: td.Context, info: dict[str, Any]) -> str:
    return f"explained {info['run_id']}"


@app.workflow(on_error=[td.OnError("oops", workflow="apologise")])
async def apologise_or_explain(ctx: td.Context, info: dict[str, Any]) -> int:
    """A handler that hands off itself: to `apologise` on "oops"."""
    if info["error"]["code"] == "nested":
        raise td.FatalError("handler failed too", code="oops")
    return 7


@app.workflow(
    on_error=[
        td.OnError("sorry", workflow="apologise"),
        td.OnError("nested", workflow="apologise_or_explain"),
        td.OnError(workflow="explain"),
    ]
)
async def count(ctx: td.Context, code: str | None) -> int:
    if code is None:
        return 3
    raise td.FatalError("could not count", code=code)


children_seen: dict[str, Any] = {}
"""What a parent's body got back from each child, by the child's code."""


@app.workflow()
async def counting_parent(ctx: td.Context, codes: list[str | None]) -> None:
    for code in codes:
        children_seen[str(code)] = await ctx.child(count, code)
    members = await ctx.all(count, codes)
    for code, member in zip(codes, members, strict=True):
        children_seen[f"all {code}"] = member


CODES: list[str | None] = [None, "sorry", "other", "nested"]


def _counted(code: str | None, run_id: str) -> Any:
    """What a run of `count` with ``code`` and id ``run_id`` outputs."""
    if code is None:
        return 3
    if code == "sorry":
        return Apology(run_id, "sorry")
    if code == "nested":
        # The handler handed off in turn: the output is its own handler's.
        return Apology(f"{run_id}.onError.0", "sorry")
    return f"explained {run_id}"


@pytest.mark.parametrize("code", CODES)
async def test_a_handed_off_runs_result_has_its_handlers_output_type(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, code: str | None
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(count, code, run_id="r")
        assert await engine.result("r") == _counted(code, "r")
        run = await engine.get("r")
    assert run.status == "completed"


async def test_a_parent_gets_a_routed_childs_output_as_its_handler_returns_it(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    children_seen.clear()
    async with open_test_engine(app) as engine:
        await engine.start(counting_parent, CODES, run_id="p")
        await engine.result("p")
    for n, code in enumerate(CODES):
        assert children_seen[str(code)] == _counted(code, f"p.child.{n + 1}")
        assert children_seen[f"all {code}"] == _counted(code, f"p.all.5.{n}")


@app.workflow()
async def one_count(ctx: td.Context, code: str | None) -> str:
    children_seen["child"] = await ctx.child(count, code)
    return "counted"


async def test_retrying_a_parent_types_a_routed_childs_output_by_its_handler(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    """A retry that finds an awaited child completed (its checkpoint in the
    parent failed meanwhile) hands the parent the handler's output."""
    children_seen.clear()
    async with open_test_engine(app) as engine:
        await engine.start(one_count, "sorry", run_id="q")
        assert await engine.result("q") == "counted"
        assert children_seen == {"child": Apology("q.child.1", "sorry")}
        # As if the parent had lost its wait for the child: a failed
        # checkpoint and a failed run, while the child itself completed.
        [cp] = await engine.store.get_checkpoints("q")
        error = td.ErrorInfo(message="lost", code="lost")
        await engine.store.apply(
            [
                PutCheckpoint(attrs.evolve(cp, status="failed", output=None, error=error)),
                UpdateRun("q", {"status": "failed", "output": None, "error": error}),
            ]
        )
        children_seen.clear()
        await engine.retry("q")
        assert await engine.result("q") == "counted"
    assert children_seen == {"child": Apology("q.child.1", "sorry")}


# -- 6. unserved routes -------------------------------------------------------

served = td.App("served")


@served.workflow()
async def local_fix(ctx: td.Context, info: dict[str, Any]) -> str:
    return "fixed"


@served.workflow(
    on_error=[
        td.OnError("a", workflow="local_fix"),
        td.OnError("b", workflow="remote_fix"),
        td.OnError(workflow="lcoal_fix"),
    ]
)
async def guarded(ctx: td.Context, x: int) -> str:
    raise td.FatalError("guarded failed", code="a")


fixers = td.App("fixers")


@fixers.step(group="fixing")
async def fix_step(x: int) -> int:
    return x


@fixers.workflow()
async def remote_fix(ctx: td.Context, info: dict[str, Any]) -> str:
    return "fixed remotely"


TYPO = td.UnservedRoute(workflow="guarded", version="1", code=None, handler="lcoal_fix")
REMOTE = td.UnservedRoute(workflow="guarded", version="1", code="b", handler="remote_fix")


def _route_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "trio_durable" and record.levelno == logging.WARNING
    ]


async def test_unserved_routes_list_handlers_nothing_knows(
    open_test_engine: EngineFactory,
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    broker = td.MemoryBroker()
    async with open_test_engine(served, broker=broker) as engine:
        assert _route_warnings(caplog) == [
            "workflow 'guarded' routes code 'b' to 'remote_fix', which no engine or live worker "
            "knows",
            "workflow 'guarded' routes every failure to 'lcoal_fix', which no engine or live "
            "worker knows",
        ]
        assert await engine.unserved_on_error_routes() == [REMOTE, TYPO]
        async with td.open_worker(
            fixers, broker=broker, groups=["fixing"], instance_id="fixer", wall_clock=fixed_wall
        ):
            # A live worker of another app knows the remote handler.
            assert await engine.unserved_on_error_routes() == [TYPO]
        assert await engine.unserved_on_error_routes() == [REMOTE, TYPO]


async def test_open_engine_warns_only_of_routes_nothing_serves(
    open_test_engine: EngineFactory,
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    broker = td.MemoryBroker()
    async with (
        td.open_worker(
            fixers, broker=broker, groups=["fixing"], instance_id="fixer", wall_clock=fixed_wall
        ),
        open_test_engine(served, broker=broker) as engine,
    ):
        assert _route_warnings(caplog) == [
            "workflow 'guarded' routes every failure to 'lcoal_fix', which no engine or live "
            "worker knows"
        ]
        assert await engine.unserved_on_error_routes() == [TYPO]


async def test_an_app_whose_handlers_are_all_known_warns_of_nothing(
    open_test_engine: EngineFactory,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.abc.Clock,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    async with open_test_engine(app) as engine:
        assert await engine.unserved_on_error_routes() == []
    assert _route_warnings(caplog) == []


# -- 7. observability ---------------------------------------------------------
# Two builds of one app disagree on the routes of `order`.

build_1 = td.App("shop", version="1")
build_2 = td.App("shop", version="2")


@build_1.step(name="work", group="work")
async def work_1(x: int) -> int:
    return x


@build_2.step(name="work", group="work")
async def work_2(x: int) -> int:
    return x


@build_1.workflow(name="order", on_error=[td.OnError(workflow="h1")])
async def order_1(ctx: td.Context, x: int) -> str:
    bodies[ctx.run_id] += 1
    raise td.FatalError("order failed", code="out_of_stock", details={"sku": "a"})


@build_2.workflow(name="order", on_error=[td.OnError("out_of_stock", workflow="h1")])
async def order_2(ctx: td.Context, x: int) -> str:
    bodies[ctx.run_id] += 1
    raise td.FatalError("order failed", code="out_of_stock", details={"sku": "a"})


for _build in (build_1, build_2):

    @_build.workflow(name="h1")
    async def h1(ctx: td.Context, info: dict[str, Any]) -> str:
        bodies[ctx.run_id] += 1
        return f"h1 handled {info['run_id']}"


async def test_workers_disagreeing_on_routes_leave_the_run_unrouted(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    broker = td.MemoryBroker()
    async with open_test_engine(build_1, broker=broker) as engine:
        async with td.open_worker(
            build_1, broker=broker, groups=["work"], instance_id="w-1", wall_clock=fixed_wall
        ):
            async with td.open_worker(
                build_2, broker=broker, groups=["work"], instance_id="w-2", wall_clock=fixed_wall
            ):
                descriptors = {d.instance_id: d for d in await broker.worker_descriptors()}
                assert descriptors["w-1"].workflows["order"]["on_error"] == [
                    {"code": None, "workflow": "h1"}
                ]
                assert descriptors["w-2"].workflows["order"]["on_error"] == [
                    {"code": "out_of_stock", "workflow": "h1"}
                ]
                with engine.subscribe() as events:
                    await engine.start(order_1, 1, run_id="o")
                    with pytest.raises(td.RunFailed) as info:
                        await engine.result("o")
                    await engine.drain()
                    got = _received(events)
                assert (info.value.code, info.value.details) == ("out_of_stock", {"sku": "a"})
                run = await _get(engine, "o")
                assert run.tags == ()
                assert await engine.store.get_checkpoints("o") == []
                assert await engine.store.get_run("o.onError.0") is None
                assert [(e.kind, e.run_id) for e in got] == [
                    ("run.started", "o"),
                    ("run.unrouted", "o"),
                    ("run.failed", "o"),
                ]
                assert got[1].data == {
                    "code": "out_of_stock",
                    "reason": "live workers announce different on-error routes for 'order': "
                    'w-2: [{"code":"out_of_stock","workflow":"h1"}]; '
                    'w-1: [{"code":null,"workflow":"h1"}]',
                }
            # The rollout is over: once the announcements were read again
            # (they are cached for 5 s), a retry routes the failure.
            await trio.sleep(CACHE_SECONDS)
            await engine.retry("o")
            assert await engine.result("o") == "h1 handled o"
            assert (await _handoff(engine, "o")).child_id == "o.onError.0"
        metrics = engine.metrics()
    runs = "trio_durable_runs_total"
    assert sample(metrics, runs, workflow="order", event="unrouted") == 1
    assert sample(metrics, runs, workflow="order", event="routed") == 1
    assert samples(metrics, "trio_durable_runs_routed_total") == {(("code", "out_of_stock"),): 1}
    assert bodies == {"o": 2, "o.onError.0": 1}


async def test_routed_runs_are_counted_by_code(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        for run_id, code in (
            ("a", "card_declined"),
            ("b", "card_declined"),
            ("c", "fraud"),
            ("d", None),
        ):
            await engine.start(checkout, code, run_id=run_id)
        # Not routed: no route matches, or never routed.
        await engine.start(code_only, "fraud", run_id="e")
        await engine.start(nests, 1, run_id="f")
        await engine.drain()
        metrics = engine.metrics()
    assert families(metrics)["trio_durable_runs_routed"] == "counter"
    assert samples(metrics, "trio_durable_runs_routed_total") == {
        (("code", "*"),): 1,
        (("code", "card_declined"),): 2,
        (("code", "fraud"),): 1,
    }
    runs = samples(metrics, "trio_durable_runs_total")
    assert runs[(("event", "routed"), ("workflow", "checkout"))] == 4
    assert runs[(("event", "failed"), ("workflow", "checkout"))] == 2
    assert runs[(("event", "completed"), ("workflow", "checkout"))] == 2
    assert runs[(("event", "failed"), ("workflow", "code_only"))] == 1
    assert (("event", "routed"), ("workflow", "code_only")) not in runs
    assert not any(
        ("workflow", "nests") in labels for labels in runs if ("event", "routed") in labels
    )
