"""Calls are checked where they are made: inputs against the signature of the
workflow or step they go to (`td.InvalidArgumentsError`, nothing written),
workflows must take the context first, and both decorator forms register."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory


@attrs.define(frozen=True)
class Item:
    sku: str
    qty: int


@attrs.define(frozen=True)
class Other:
    sku: str
    qty: int


app = td.App("calls")

ran: list[str] = []
"""Step functions that really ran, by name."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


@app.step
async def bare(x: int) -> int:
    ran.append("bare")
    return x + 1


@app.step(retry=td.Retry(attempts=1))
async def pair(a: str, b: int = 2) -> str:
    ran.append("pair")
    return a * b


@app.step(group="far", retry=td.Retry(attempts=1))
async def far(x: int) -> int:
    ran.append("far")
    return -x


@app.step
async def undo_one(a: str) -> None:
    ran.append("undo_one")


@app.workflow
async def order(ctx: td.Context, item: Item, note: str | None = None) -> int:
    return item.qty


@app.workflow
async def counted(ctx: td.Context, items: list[Item]) -> int:
    return sum(i.qty for i in items)


@app.workflow
async def square(ctx: td.Context, x: int) -> int:
    return x * x


@app.workflow
async def call(ctx: td.Context, how: str) -> dict[str, Any]:
    """Makes one bad call (``how``), catches it, then runs one good step: the
    bad call recorded nothing, so the good step shows where the run is."""
    # Wrong on purpose: mypy refuses such calls (tests/typecheck/), so they
    # go through an untyped alias to reach the run-time check.
    untyped: Any = ctx
    bad: dict[str, Callable[[], Awaitable[Any]]] = {
        "step arity": lambda: untyped.step(bare, 1, 2),
        "step none": lambda: untyped.step(bare),
        "step type": lambda: untyped.step(bare, "1"),
        "step undo": lambda: untyped.step(pair, "a", 3, compensate=undo_one),
        "remote arity": lambda: untyped.step(far),
        "remote type": lambda: untyped.step(far, 1.5),
        "child": lambda: untyped.child(square, "x"),
        "start_child": lambda: untyped.start_child(square, 1, 2),
        "child fan": lambda: untyped.all(square, [1, 2, "3"], concurrency=1),
        "step fan": lambda: untyped.all_settled(far, [1, None]),
    }
    try:
        await bad[how]()
    except td.InvalidArgumentsError as exc:
        error = {"message": str(exc), "target": exc.target, "parameter": exc.parameter}
    else:  # pragma: no cover - the test fails on it
        error = {}
    return {"error": error, "after": await ctx.step(bare, 41)}


@app.workflow
async def uncaught(ctx: td.Context) -> int:
    return await ctx.step(bare, "one")  # type: ignore[arg-type]


# -- engine.start ------------------------------------------------------------


BAD_STARTS: dict[str, tuple[tuple[Any, ...], str | None, str]] = {
    "none": ((), None, r"workflow 'order' takes 1 to 2 positional inputs after the context"),
    "too many": ((Item("a", 1), "n", 3), None, r"\(item, note\), but 3 were given"),
    "str for int": (("5",), "x", r"input 'x' does not fit int.*expected int"),
    "float for int": ((1.5,), "x", r"input 'x' does not fit int"),
    "bool for int": ((True,), "x", r"input 'x' does not fit int"),
    "dict for attrs": (({"sku": "a"},), "item", r"'item'.*required field missing @ item.qty"),
    "other attrs": ((Other("a", 1),), "item", r"'item' must be an instance of Item, not Other"),
    "bad field": ((Item("a", "1"),), "item", r"expected int @ item.qty"),  # type: ignore[arg-type]
    "int for str | None": ((Item("a", 1), 5), "note", r"input 'note' does not fit"),
    "nested": (
        ([Item("a", 1), {"sku": 1, "qty": 1}],),
        "items",
        r"does not fit list\[test_calls.Item\].*@ items\[1\].sku",
    ),
}


@pytest.mark.parametrize("case", list(BAD_STARTS))
async def test_start_with_inputs_that_do_not_fit_writes_nothing(
    open_test_engine: EngineFactory, case: str
) -> None:
    args, parameter, message = BAD_STARTS[case]
    by_parameter: dict[str, td.Workflow[Any, Any]] = {"x": square, "items": counted}
    workflow = by_parameter.get(parameter or "", order)
    async with open_test_engine(app) as engine:
        with pytest.raises(td.InvalidArgumentsError, match=message) as caught:
            await engine.start(workflow, *args, run_id="bad")
        assert caught.value.target == f"workflow {workflow.name!r}"
        assert caught.value.parameter == parameter
        # A usage error, and a TypeError like a bad call of a function.
        assert isinstance(caught.value, td.UsageError)
        assert isinstance(caught.value, TypeError)
        assert engine.store.statistics().ops == 0
        with pytest.raises(td.RunNotFoundError):
            await engine.get("bad")


async def test_inputs_that_fit_start_the_run(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        assert await (await engine.start(order, Item("a", 3))).result() == 3
        assert await (await engine.start(order, Item("a", 4), None)).result() == 4
        assert await (await engine.start(counted, [Item("a", 1), Item("b", 2)])).result() == 3
        assert await (await engine.start("square", 2)).result() == 4


# -- calls inside a workflow -------------------------------------------------


CALLS: dict[str, tuple[str, str | None, str]] = {
    "step arity": ("step 'bare'", None, r"step 'bare' takes 1 positional input \(x\), but 2"),
    "step none": ("step 'bare'", None, r"but 0 were given"),
    "step type": ("step 'bare'", "x", r"input 'x' does not fit int"),
    "step undo": ("step 'undo_one'", None, r"step 'undo_one' takes 1 .*but 2 were given"),
    "remote arity": ("step 'far'", None, r"step 'far' takes 1 positional input"),
    "remote type": ("step 'far'", "x", r"input 'x' does not fit int"),
    "child": ("workflow 'square'", "x", r"input 'x' does not fit int"),
    "start_child": ("workflow 'square'", None, r"but 2 were given"),
    "child fan": ("workflow 'square'", "x", r"input 'x' does not fit int"),
    "step fan": ("step 'far'", "x", r"input 'x' does not fit int"),
}


@pytest.mark.parametrize("how", list(CALLS))
async def test_a_bad_call_in_a_body_fails_that_call_and_records_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, how: str
) -> None:
    target, parameter, message = CALLS[how]
    async with open_test_engine(app, serve=["far"]) as engine:
        run = await engine.start(call, how, run_id="r")
        outcome = await run.result()
        assert outcome["error"]["target"] == target
        assert outcome["error"]["parameter"] == parameter
        assert re.search(message, outcome["error"]["message"]), outcome["error"]["message"]
        assert outcome["after"] == 42
        # Nothing ran but the good step, and the only checkpoint is its own:
        # the bad call took a seq (so fans, which reserve theirs, took
        # several) but recorded nothing under it.
        assert ran == ["bare"]
        [cp] = await engine.store.get_checkpoints("r")
        assert (cp.name, cp.status) == ("bare", "completed")
        assert await engine.store.list_runs(parent_id="r") == []


async def test_an_uncaught_bad_call_fails_the_run_with_its_code(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(uncaught, run_id="u")
        with pytest.raises(td.RunFailed) as caught:
            await run.result()
        assert caught.value.code == "invalid_arguments"
        assert "step 'bare': input 'x' does not fit int" in caught.value.message
        assert ran == []
        assert await engine.store.get_checkpoints("u") == []
        stored = await engine.get("u")
        assert stored.error is not None
        assert stored.error.type == "InvalidArgumentsError"


# -- registration ------------------------------------------------------------


def test_both_decorator_forms_register() -> None:
    local = td.App("forms")

    @local.step
    async def plain(x: int) -> int:
        return x

    @local.step(name="named", retry=td.Retry(attempts=1))
    async def with_options(x: int) -> int:
        return x

    @local.workflow
    async def flow(ctx: td.Context) -> None: ...

    @local.workflow(version="2")
    async def flow2(ctx: td.Context) -> None: ...

    assert isinstance(plain, td.Step)
    assert (plain.name, plain.retry) == ("plain", td.Retry())
    assert (with_options.name, with_options.retry.attempts) == ("named", 1)
    assert isinstance(flow, td.Workflow)
    assert (flow.name, flow.version) == ("flow", "1")
    assert (flow2.name, flow2.version) == ("flow2", "2")
    assert local.get_step("plain") is plain
    assert local.get_workflow("flow") is flow


async def _no_context(order: Item) -> None: ...


async def _context_not_first(order: Item, ctx: td.Context) -> None: ...


async def _nothing() -> None: ...


async def _only_star(*args: Any) -> None: ...


async def _keyword_context(*, ctx: td.Context) -> None: ...


async def _required_keyword(ctx: td.Context, *, order: Item) -> None: ...


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_no_context, r"first parameter 'order' is annotated Item, not td.Context"),
        (_context_not_first, r"first parameter 'order' is annotated Item"),
        (_nothing, r"must take the context first"),
        (_only_star, r"must take the context first"),
        (_keyword_context, r"must take the context first"),
        (_required_keyword, r"required keyword-only parameter 'order'"),
    ],
)
def test_a_workflow_must_take_the_context_first(fn: Any, message: str) -> None:
    local = td.App("reg")
    with pytest.raises(td.RegistrationError, match=message):
        local.workflow(fn)
    with pytest.raises(td.RegistrationError, match=message):
        local.workflow(name="again")(fn)
    assert local.workflows == []


def test_the_context_may_be_unannotated_or_any() -> None:
    local = td.App("loose")

    @local.workflow
    async def unannotated(ctx, x: int) -> int:  # type: ignore[no-untyped-def]
        return x

    @local.workflow
    async def anything(ctx: Any, x: int) -> int:
        return x

    assert [wf.name for wf in local.workflows] == ["unannotated", "anything"]


def test_a_step_may_not_require_keywords() -> None:
    local = td.App("kw")

    async def keyword(x: int, *, y: int) -> int:
        return x + y

    with pytest.raises(td.RegistrationError, match=r"step 'keyword'.*keyword-only.*'y'"):
        local.step(keyword)

    async def optional_keyword(x: int, *, y: int = 0) -> int:
        return x + y

    assert local.step(optional_keyword).name == "optional_keyword"
