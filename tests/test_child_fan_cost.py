"""What a fan of child workflows joined by its parent costs the store.

Children of a workflow the parent's engine runs are created leased to it, so
their first turns begin without a write of their own; and the members of a
fan that end together count their fan's pending members once between them,
not once each. These tests pin both as counts of store calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import trio_durable as td
from conftest import EngineFactory

N = 200

app = td.App("child-fan-cost")


@app.workflow()
async def member(ctx: td.Context, x: int) -> int:
    return x


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    values = await ctx.all(member, list(range(n)))
    return sum(values)


@app.workflow()
async def one_child(ctx: td.Context, x: int) -> int:
    return await ctx.child(member, x) + 1


def _count_calls(store: Any, names: tuple[str, ...]) -> Counter[str]:
    """Count the calls of some of the store's methods from now on."""
    calls: Counter[str] = Counter()
    for name in names:
        method = getattr(store, name)

        def counted(method: Callable[..., Any], name: str) -> Callable[..., Any]:
            async def call(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return await method(*args, **kwargs)

            return call

        setattr(store, name, counted(method, name))
    return calls


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'fan.db'}"


async def test_a_fan_of_children_costs_no_begin_turn_per_child(
    open_test_engine: EngineFactory, store_url: str
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        calls = _count_calls(engine.store, ("begin_turn", "count_checkpoints", "apply"))
        run = await engine.start(fan, N, run_id="fan")
        assert await engine.result(run.id) == N * (N - 1) // 2
        await engine.drain()
        # The parent's turn after the fan; each child's only turn starts
        # from the run as its parent's write created it.
        assert calls["begin_turn"] == 1
        # Each child's end, the parent's start, turns and end: no write
        # takes a child's lease.
        assert calls["apply"] <= N + 4
        kid = await engine.store.get_run("fan.all.1.7")
        assert kid is not None
        assert (kid.status, kid.lease_owner, kid.parent_id) == ("completed", None, "fan")


async def test_members_ending_together_count_their_fan_a_few_times(
    open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    """On SQLite, whose calls wait for a thread, members end while others
    count: the counts are a handful, not one per member."""
    async with open_test_engine(app, store=f"sqlite:///{tmp_path / 'fan.db'}") as engine:
        calls = _count_calls(engine.store, ("count_checkpoints",))
        run = await engine.start(fan, N, run_id="fan")
        assert await engine.result(run.id) == N * (N - 1) // 2
        assert 1 <= calls["count_checkpoints"] <= N // 10
        # Group commit: the children's ends share transactions.
        assert engine.store.statistics().transactions < N // 4


async def test_an_awaited_child_starts_leased_and_its_parent_gets_its_value(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app, store="memory://") as engine:
        calls = _count_calls(engine.store, ("begin_turn",))
        run = await engine.start(one_child, 4, run_id="p")
        assert await engine.result(run.id) == 5
        # Only the parent's turn after its child ended.
        assert calls["begin_turn"] == 1
