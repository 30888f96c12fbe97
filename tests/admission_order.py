"""The admission order of a concurrency key, as a property checked on every
store (``tests/test_admission_order.py`` and the PostgreSQL one in
``tests/integration``): starts that do not overlap are admitted in start
order (docs/concurrency-keys.md), whatever other starts overlap beside them
and whichever of two engines sharing the store makes each start.

A scenario is a list of waves of starts, each start naming the engine that
makes it. The starts of one wave run side by side (they overlap); a wave
begins once every start of the wave before it returned, so any two starts
of different waves do not overlap. The first run admitted holds the key's
one slot until every start returned (its body waits at a gate), so the
others stand in line and the line decides their order. Then the gate
opens, and each run, let in when the one before it ends, enters its body in
the order of admission: the waves of the runs in the order their bodies
were entered must never go down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import trio
from hypothesis import strategies as st

import trio_durable as td
from conftest import fixed_wall
from trio_durable._base._records import QueueDepth

app = td.App("admission-order")

KEY: Final = "line"
entered: list[int] = []
"""The runs (by start index) in the order they entered their bodies."""
inside: list[int] = [0, 0]
"""How many runs are inside their bodies now, and the most at once."""
_gate: list[trio.Event] = []


@app.step()
async def wait_at_gate(i: int) -> int:
    """Counts the run in, then holds its slot until the gate opens."""
    entered.append(i)
    inside[0] += 1
    inside[1] = max(inside[1], inside[0])
    try:
        await _gate[0].wait()
    finally:
        inside[0] -= 1
    return i


@app.workflow(concurrency_key=lambda key, i: key)
async def in_line(ctx: td.Context, key: str, i: int) -> int:
    return await ctx.step(wait_at_gate, i)


WAVES: Final = st.lists(
    st.lists(st.sampled_from((0, 1)), min_size=1, max_size=3), min_size=2, max_size=5
)
"""Waves of starts, each start the index of its engine (a or b)."""


async def check_admission_order(
    store_a: td.Store | str, store_b: td.Store | str, waves: Sequence[Sequence[int]]
) -> None:
    """Start ``waves`` of `in_line` runs from engines a and b (on
    ``store_a`` and ``store_b``, one store or two openings of one), then let
    them through one at a time: the runs enter their bodies wave by wave,
    never two at once, and all complete."""
    entered.clear()
    inside[:] = [0, 0]
    _gate[:] = [trio.Event()]
    wave_of: list[int] = []
    ids: list[str] = []
    async with (
        td.open_engine(app, store=store_a, engine_id="a", seed=1, wall_clock=fixed_wall) as a,
        td.open_engine(app, store=store_b, engine_id="b", seed=2, wall_clock=fixed_wall) as b,
    ):
        engines = (a, b)

        async def start(engine: td.Engine, i: int) -> None:
            ids[i] = (await engine.start(in_line, KEY, i)).id

        for number, wave in enumerate(waves):
            async with trio.open_nursery() as nursery:
                for engine in wave:
                    ids.append("")
                    wave_of.append(number)
                    nursery.start_soon(start, engines[engine], len(ids) - 1)
        # Every start returned: one run holds the slot (taken as it was
        # created), the others wait in line behind it.
        assert await a.store.queue_depths() == [
            QueueDepth(queue=f"wf:in_line:{KEY}", admitted=1, waiting=len(ids) - 1)
        ]
        _gate[0].set()
        results = [await engines[i % 2].result(run_id) for i, run_id in enumerate(ids)]
    assert results == list(range(len(ids)))
    assert sorted(entered) == list(range(len(ids)))
    assert inside[1] == 1
    waves_entered = [wave_of[i] for i in entered]
    assert waves_entered == sorted(waves_entered), (waves, entered)
