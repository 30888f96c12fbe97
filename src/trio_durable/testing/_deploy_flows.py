"""The built-in workload's rollout: builds change while runs are in flight.

Four workflows take remote steps with a pause between them (the pinned
ones a fan in a window of one, then a step; the upgrading ones a step,
then another): two decided on the engines, two on the workers (their decisions
go to a build's workers too), one of each ``pinned`` and one
``auto_upgrade``. The workload adds two workers of build ``A`` and makes
``A`` current, starts a run of each, adds a worker of ``B`` and ramps
``B`` to 30% of the new runs (one upgrading run moves then), starts a
pinned run (which the ramp sends to ``B``), makes ``B`` current (the other
upgrading run moves), then stops the workers of ``A`` while the runs
pinned to it sleep: their next step or decision waits, blocked,
and never fails. A while later a worker of ``A`` comes back, and they end.

The harness checks that no step or decision ran on a build its run was
not allowed on (`_build_checks`); this part checks that every run of it
completed. (A run is given its build at its first turn: under faults, a
run started while ``A`` was current may take its first turn, and its
build, after ``B`` became current.)
"""

from __future__ import annotations

from typing import Any, Final

import trio

from .._front._app import Retry
from .._stores._base import Store
from ._simulation import Simulation
from ._workload_app import app

PAUSE: Final = 120
"""Seconds a rollout run sleeps between its steps: the builds change, and
the workers of ``A`` stop, while it sleeps."""

RAMP: Final = 30
"""The share of new runs (percent) ``B`` takes while ramped: of the runs'
ids, ``rollout-pinned-ramp`` and ``rollout-remote-upgrading-a`` fall below
it (`ramp_share`), ``rollout-upgrading-a`` does not (it moves only when
``B`` becomes current)."""

GROUPS: Final = ("rollout", "rollout-deciders")
"""What the workers of ``A`` and ``B`` serve (the fleet's own workers,
of neither build, serve them too)."""


@app.step(group="rollout", retry=Retry(attempts=6, backoff=2.0, jitter=0.5))
async def rollout_step(x: int) -> int:
    await trio.sleep(1 + x % 2)
    return 3 * x + 1


async def _pinned(ctx: Any, x: int) -> int:
    # A window of one: the fan's second member starts outside the turn
    # that began the fan, and goes to the build the run is pinned to.
    fan = await ctx.all(rollout_step, [x, x + 1], concurrency=1)
    await ctx.sleep(PAUSE)
    return int(await ctx.step(rollout_step, sum(fan)))


async def _upgrading(ctx: Any, x: int) -> int:
    first = await ctx.step(rollout_step, x)
    await ctx.sleep(PAUSE)
    return int(await ctx.step(rollout_step, first))


@app.workflow(versioning="pinned")
async def rollout_pinned(ctx: Any, x: int) -> int:
    return await _pinned(ctx, x)


@app.workflow(versioning="auto_upgrade")
async def rollout_upgrading(ctx: Any, x: int) -> int:
    return await _upgrading(ctx, x)


@app.workflow(group="rollout-deciders", versioning="pinned")
async def rollout_remote_pinned(ctx: Any, x: int) -> int:
    return await _pinned(ctx, x)


@app.workflow(group="rollout-deciders", versioning="auto_upgrade")
async def rollout_remote_upgrading(ctx: Any, x: int) -> int:
    return await _upgrading(ctx, x)


FLOWS: Final = {
    "pinned": rollout_pinned,
    "upgrading": rollout_upgrading,
    "remote-pinned": rollout_remote_pinned,
    "remote-upgrading": rollout_remote_upgrading,
}
"""The rollout's workflows, by the name their runs' ids carry."""


async def rollout(sim: Simulation) -> None:
    """Builds ``A`` then ``B`` (ramped, then current) under runs in flight;
    the workers of ``A`` stop, and one comes back."""
    rng = sim.rng
    started = [f"rollout-{short}-a" for short in FLOWS]

    async def set_current(build: str, ramp: float | None = None) -> None:
        for workflow in FLOWS.values():
            await sim.set_current_build(workflow.name, build, ramp=ramp)

    a_workers = await sim.add_workers("A", 2, groups=GROUPS)
    began = trio.current_time()
    await set_current("A")
    for x, (run_id, workflow) in enumerate(zip(started, FLOWS.values(), strict=True)):
        await sim.start(workflow, x, run_id=run_id)
    await sim.sleep(rng.uniform(5, 20))
    await sim.add_workers("B", 1, groups=GROUPS)
    await set_current("B", ramp=RAMP)
    started.append(await sim.start(rollout_pinned, len(started), run_id="rollout-pinned-ramp"))
    await sim.sleep(rng.uniform(5, 20))
    await set_current("B")
    # The runs pinned to A are asleep: their last step (or decision) finds
    # no worker of A, and waits until one comes back, a little after.
    for worker in a_workers:
        await sim.sleep(rng.uniform(0, 20))
        await sim.stop_workers([worker])
    await trio.sleep_until(began + PAUSE + rng.uniform(10, 40))
    await sim.add_workers("A", 1, groups=GROUPS)

    async def check(store: Store) -> list[str]:
        violations: list[str] = []
        for run_id in started:
            run = await store.get_run(run_id)
            if run is None or run.status != "completed":
                status = None if run is None else run.status
                violations.append(f"the rollout's run {run_id} ended {status}, not completed")
        return violations

    sim.check(check)
