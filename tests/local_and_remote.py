"""A harness that runs one workflow scenario with its bodies decided in the
engine or on a worker (tests/test_workflow_features_local_and_remote.py,
tests/test_workflow_operations_local_and_remote.py).

With ``body="local"`` the bodies are registered in the engine's own app;
with ``body="remote"`` the same functions are registered only in a workers'
app served by `td.open_worker` over a `td.MemoryBroker`, and the engine's
app declares them with `App.remote_workflow` (docs/remote-workflows.md). In
both modes a worker serves the remote steps' group, so where the body runs
is the only difference between the two.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Literal

import attrs
import pytest

import trio_durable as td
from conftest import fixed_wall

Body = Literal["local", "remote"]
WorkflowBody = Callable[..., Awaitable[Any]]
Scenario = Callable[["Harness"], Awaitable[None]]

DECIDERS = "deciders"
"""The group of the workers that decide the bodies in remote mode."""

STEPS = "steps"
"""The group of the remote steps, served by a worker in both modes."""


# -- the steps, and what each mode's app registers of them -----------------------------


@attrs.define(frozen=True, kw_only=True)
class Steps:
    """The steps of one app: a body calls the ones of the app it runs in,
    since `Context.step` takes only the objects that app registered."""

    flaky: td.Step[[str], str]
    shout: td.Step[[str], str]
    double: td.Step[[int], int]
    book: td.Step[[str], str]
    unbook: td.Step[[str], None]
    decline: td.Step[[str], str]
    note: td.Step[[str], None]


@attrs.define(frozen=True, kw_only=True)
class Kit:
    """What the bodies and steps of one test share: its app's steps and a
    journal of the side effects they had."""

    steps: Steps
    journal: list[Any] = attrs.field(factory=list)


# The engine's and the worker's tasks inherit it from the test's task (as
# examples/shop_workers.py's steps inherit their worker's name), so one body
# reaches the steps of whichever app it runs in.
_kit: ContextVar[Kit] = ContextVar("local_and_remote_kit")


def kit() -> Kit:
    """The kit of the test this body or step runs for."""
    return _kit.get()


async def flaky(key: str) -> str:
    kit().journal.append(f"try {key}")
    if kit().journal.count(f"try {key}") < 3:
        raise RuntimeError(f"{key} not yet")
    return f"{key} ok"


async def shout(text: str) -> str:
    return text.upper()


async def double(n: int) -> int:
    return 2 * n


async def book(what: str) -> str:
    kit().journal.append(f"book {what}")
    return f"booked {what}"


async def unbook(what: str) -> None:
    kit().journal.append(f"unbook {what}")


async def decline(what: str) -> str:
    raise td.FatalError(f"no {what} left", code="sold_out", details={"what": what})


async def note(what: str) -> None:
    kit().journal.append(what)


def register_steps(app: td.App) -> Steps:
    return Steps(
        flaky=app.step(retry=td.Retry(attempts=3, backoff=2.0, jitter=0.0))(flaky),
        shout=app.step(group=STEPS)(shout),
        double=app.step(group=STEPS)(double),
        book=app.step()(book),
        unbook=app.step()(unbook),
        decline=app.step()(decline),
        note=app.step()(note),
    )


class Tally:
    """An entity every app registers: its calls run on the engine."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @td.exclusive
    async def add(self, item: str) -> int:
        self.seen.append(item)
        return len(self.seen)

    @td.shared
    async def items(self) -> list[str]:
        return list(self.seen)


def declare_shared(app: td.App) -> None:
    """What the engine's app and the workers' app both declare."""
    app.entity("tally")(Tally)
    app.search_attribute("customer", str)
    app.search_attribute("tier", int)
    app.queue("dedup", concurrency=1)


# -- the harness -----------------------------------------------------------------------


@attrs.define(frozen=True, kw_only=True)
class Harness:
    """What a scenario drives: the engine, and the journal its steps keep."""

    body: Body
    engine: td.Engine
    journal: list[Any]

    async def start(self, workflow: str, *args: Any, run_id: str) -> td.RunHandle[Any]:
        return await self.engine.start(workflow, *args, run_id=run_id)

    async def entries(self, run_id: str, name: str) -> list[td.HistoryEntry]:
        """The history entries of ``run_id`` named ``name``, by seq."""
        return [e for e in (await self.engine.history(run_id)).entries if e.name == name]


def apps(body: Body, bodies: Sequence[WorkflowBody]) -> tuple[td.App, td.App, Steps]:
    """The engine's app, the worker's app and the steps the bodies call."""
    if body == "local":
        app = td.App("features-local")
        declare_shared(app)
        steps = register_steps(app)
        for fn in bodies:
            app.workflow(name=fn.__name__)(fn)
        return app, app, steps
    workers = td.App("features-workers")
    declare_shared(workers)
    steps = register_steps(workers)
    service = td.App("features-service")
    declare_shared(service)
    for fn in bodies:
        workers.workflow(name=fn.__name__, group=DECIDERS)(fn)
        service.remote_workflow(fn.__name__, group=DECIDERS)
    return service, workers, steps


@asynccontextmanager
async def open_harness(body: Body, bodies: Sequence[WorkflowBody]) -> AsyncIterator[Harness]:
    """An engine, and a worker for the steps (and in remote mode the
    bodies), over one memory broker."""
    engine_app, worker_app, steps = apps(body, bodies)
    test_kit = Kit(steps=steps)
    token = _kit.set(test_kit)
    groups = [STEPS] if body == "local" else [STEPS, DECIDERS]
    broker = td.MemoryBroker()
    try:
        async with (
            td.open_engine(engine_app, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
            td.open_worker(worker_app, broker=broker, groups=groups, seed=0, wall_clock=fixed_wall),
        ):
            yield Harness(body=body, engine=engine, journal=test_kit.journal)
    finally:
        _kit.reset(token)


def cases(scenarios: Sequence[Scenario], known_gaps: dict[tuple[str, Body], str]) -> list[Any]:
    """Every scenario in both modes; one that ``known_gaps`` names (by the
    scenario's name and the mode, with the reason) is a strict xfail."""
    params = []
    for scenario in scenarios:
        for body in ("local", "remote"):
            gap = known_gaps.get((scenario.__name__, body))
            marks = [] if gap is None else [pytest.mark.xfail(strict=True, reason=gap)]
            params.append(
                pytest.param(scenario, body, id=f"{scenario.__name__}-{body}", marks=marks)
            )
    return params
