"""Record runs whose fans with ``concurrency=`` ran in waves, as the release
before sliding windows recorded them, for `test_fan_window_upgrade`.

Run it with that release's code first on the path (a worktree of it)::

    PYTHONPATH=<old worktree>/src python tests/record_wave_history.py tests/data/wave_fans.json

It starts two runs on the memory store and broker under a mock clock and
stops at 1.5 s, mid-wave: ``steps`` has the first wave of its step fan done
and the second in flight; ``children`` has the first wave of its child fan
in flight, one member done. It writes every run and checkpoint then held by
the store as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio
import trio.testing

import trio_durable as td
from trio_durable._base import _serde
from trio_durable._base._records import Checkpoint, Run

WALL_START = 1_700_000_000.0

app = td.App("waves")


@app.step(group="g")
async def work(n: int) -> int:
    await trio.sleep(1)
    return n * 10


@app.workflow()
async def member(ctx: td.Context, n: int) -> int:
    await ctx.sleep(1 + n % 2)
    return n * 10


@app.workflow()
async def step_waves(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(work, list(range(n)), concurrency=2)


@app.workflow()
async def child_waves(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(member, list(range(n)), concurrency=2)


async def record() -> dict[str, Any]:
    async with td.open_engine(
        app,
        serve=["g"],
        seed=0,
        wall_clock=lambda: WALL_START + trio.current_time(),
        remote_redispatch=(5.0, 3),
    ) as engine:
        await engine.start(step_waves, 5, run_id="steps")
        await engine.start(child_waves, 5, run_id="children")
        await trio.sleep(1.5)
        store = engine.store
        runs: list[Run] = await store.list_runs(limit=100)
        checkpoints: list[Checkpoint] = []
        for run in runs:
            checkpoints.extend(await store.get_checkpoints(run.id))
        return {
            "runs": [_serde.converter.unstructure(run) for run in runs],
            "checkpoints": [_serde.converter.unstructure(cp) for cp in checkpoints],
        }


def main() -> None:
    clock = trio.testing.MockClock(autojump_threshold=0)
    data = trio.run(record, clock=clock)
    with open(sys.argv[1], "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
        out.write("\n")


if __name__ == "__main__":
    main()
