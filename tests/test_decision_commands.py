"""Several commands per decision: the operations a remote workflow's body
goes past without waiting (``set_event``, ``upsert_search_attributes``, a
child started and not awaited) travel in one decision with the operation
it then waits on, or its end, and the engine carries them out in order
(docs/remote-workflows.md). On the memory broker and store, under the
autojump clock; the same body run locally records the same history.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from trio_durable._base._clock import Clock
from trio_durable._base._records import Run
from trio_durable._front._remote_turns import worker_features
from trio_durable._kernel._decide import decide
from trio_durable._wire._decision_wire import Decision, request_input
from trio_durable._wire._messages import Task, WireError


def _bodies(app: td.App, **options: Any) -> None:
    """The same bodies, registered on ``app`` (a worker's group, or none:
    local)."""

    @app.workflow(**options)
    async def sleeper(ctx: td.Context, n: int) -> int:
        await ctx.sleep(3600)
        return n

    @app.workflow(**options)
    async def launcher(ctx: td.Context, n: int) -> list[str]:
        ids = [await ctx.start_child(sleeper, i) for i in range(n)]
        await ctx.set_event("launched", ids)
        ctx.upsert_search_attributes({"stage": "launched"})
        await ctx.wait_signal("go")
        ctx.set_event("done", True)
        return ids


workers = td.App("several-workers")
workers.search_attribute("stage", str)
_bodies(workers, group="deciders")

service = td.App("several-service")
for _name in ("sleeper", "launcher"):
    service.remote_workflow(_name, group="deciders")

local = td.App("several-local")
local.search_attribute("stage", str)
_bodies(local)


@asynccontextmanager
async def fleet() -> AsyncIterator[td.Engine]:
    """An engine that declares the bodies, and a worker that decides them."""
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        yield engine


def _shape(history: td.RunHistory) -> list[tuple[int, str, str, str]]:
    return [(e.seq, e.kind, e.name, e.status) for e in history.entries]


async def _decision_tasks(engine: td.Engine, run_id: str) -> int:
    [record] = [r for r in await engine.store.get_records(run_id) if r.kind == "decision"]
    return record.attempts


async def test_a_body_that_goes_past_operations_sends_them_in_one_decision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fleet() as engine:
        await engine.start("launcher", 3, run_id="l")
        launched = await engine.get_event("l", "launched", timeout=60)
        assert launched == ["l.child.1", "l.child.2", "l.child.3"]
        await engine.drain()
        # Three children started, an event set and an attribute upserted,
        # then the wait: one decision task.
        assert await _decision_tasks(engine, "l") == 1
        kids = await engine.list_runs(parent_id="l")
        assert sorted(r.id for r in kids.runs) == launched
        assert (await engine.get("l")).search_attributes == {"stage": "launched"}
        found = await engine.list_runs(search_attributes={"stage": "launched"})
        assert [r.id for r in found.runs] == ["l"]
        await engine.signal("l", "go")
        assert await engine.result("l") == launched
        assert await engine.get_event("l", "done", timeout=0) is True
        # The event set, then the end: one more decision task.
        assert await _decision_tasks(engine, "l") == 2
        remote = _shape(await engine.history("l"))
    async with td.open_engine(local, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start("launcher", 3, run_id="l")
        await engine.drain()
        await engine.signal("l", "go")
        assert await engine.result("l") == launched
        assert _shape(await engine.history("l")) == remote


def _task(**fields: Any) -> Task:
    wf = workers.get_workflow("launcher")
    run = Run(id="r", workflow="launcher", version=wf.version, input="[2]")
    return Task(
        run_id="r",
        seq=999_999_999,
        attempt=1,
        step="launcher",
        workflow="launcher",
        route="deciders",
        input=request_input(run, [], {}, **fields),
        kind="decision",
    )


async def _decide(task: Task) -> Decision:
    return await decide(
        workers,
        task,
        clock=Clock(lambda: 1_700_000_000.0),
        rng=random.Random(0),
        worker_id="w",
        traceback_limit=10,
        features=worker_features(),
    )


async def test_only_an_engine_that_carries_several_out_gets_them() -> None:
    # An engine of the release before sends no ``several``: the body stops
    # at the first operation, as that engine expects.
    decision = await _decide(_task())
    assert decision.passed == ()
    assert decision.next is not None
    assert (decision.next.op, decision.next.seq, decision.next.args["awaited"]) == (
        "child",
        1,
        False,
    )
    assert decision.wire_version == 1
    decision = await _decide(_task(several=True))
    assert [(c.op, c.seq) for c in decision.passed] == [
        ("child", 1),
        ("child", 2),
        ("set_event", 3),
        ("upsert_search", 4),
    ]
    assert decision.next is not None
    assert (decision.next.op, decision.next.seq) == ("signal", 5)
    # The children's ids the body saw are those the engine gives them.
    assert json.loads(decision.passed[2].args["value"]) == ["r.child.1", "r.child.2"]
    # Nothing but the local steps it ran goes back as checkpoints.
    assert decision.local == ()
    assert decision.wire_version == 2
    decoded = Decision.decode(decision.encode(), "r")
    assert [(c.op, c.seq) for c in decoded.passed] == [(c.op, c.seq) for c in decision.passed]
    assert decoded.passed[2].args == decision.passed[2].args


def _encoded(**fields: Any) -> str:
    data: dict[str, Any] = {"version": "1", "local": [], **fields}
    return json.dumps(data)


@pytest.mark.parametrize(
    ("passed", "message"),
    [
        ([{"op": "sleep", "seq": 1, "seconds": 1.0}], "goes past"),
        (
            [
                {"op": "set_event", "seq": 2, "key": "a", "value": "1"},
                {"op": "set_event", "seq": 1, "key": "b", "value": "1"},
            ],
            "must increase",
        ),
        ([{"op": "set_event", "seq": 5, "key": "a", "value": "1"}], "before the decision's next"),
        ({"op": "set_event", "seq": 1}, "must be a list"),
    ],
)
def test_a_decision_whose_passed_commands_are_malformed_is_refused(
    passed: object, message: str
) -> None:
    text = _encoded(passed=passed, next={"op": "sleep", "seq": 5, "seconds": 1.0})
    with pytest.raises(WireError, match=message):
        Decision.decode(text, "r")


async def test_passed_commands_go_before_the_end_of_the_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with fleet() as engine:
        await engine.start("launcher", 0, run_id="z")
        await trio.sleep(1)
        await engine.signal("z", "go")
        assert await engine.result("z") == []
        assert await engine.get_event("z", "launched", timeout=0) == []
        assert await engine.get_event("z", "done", timeout=0) is True
