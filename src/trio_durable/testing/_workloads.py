"""The built-in simulation workload: every feature, on one app.

Its workflows are deterministic in their inputs, so their outcomes under any
faults must equal a fault-free execution's: local and remote steps that fail
their first attempt, timers, signals (sent before and after the wait, and one
never sent), children, fans over children and over remote steps in waves, a
flow-control queue, saga compensation, an on-error handoff, a retried run and
a cancelled one; and remote workflows, decided on the workers (a local step
run there, remote steps, a timer, a signal, remote and local children, a
fan over remote children, compensation, and a handoff to a remote handler).
Keyed workflows, an entity and a schedule keep invariants of their own
(`_checks`); so do the runs of `_message_flows` (queries and updates, a
stream, a webhook, large payloads), `_control_flows` (fork and retry from
a seq, breakpoints, cancellation caught in the body) and `_deploy_flows`
(builds changing under pinned and upgrading runs in flight). Steps record
their effects in the simulation's ledger.

`simulate_builtin` runs it on the fleet it is meant for: payloads encrypted
at rest, messages signed, payloads over 256 characters in a blob store.
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Any

import trio

from .._base._exceptions import FatalError
from .._base._keyring import Keyring
from .._base._on_error import OnError
from .._features.entities._entity_defs import exclusive, shared
from .._front._app import Retry
from .._front._engine import Engine
from .._payloads._codec import AesGcmCodec
from ._checks import (
    entity_violations,
    order_violations,
    schedule_violations,
    span_violations,
)
from ._control_flows import (
    breakpoint_runs,
    cancel_cleanup_runs,
    cleanup_runs,
    fork_and_rewind,
    release,
    reserve,
    set_breakpoint,
)
from ._deploy_flows import rollout
from ._faults import Faults
from ._harness import simulate
from ._message_flows import big_payloads, cart_updates, stream_reader, webhook_deliveries
from ._simulation import WALL_START, Simulation, SimulationReport
from ._workload_app import app as app
from ._workload_app import note as _note
from ._workload_app import record as _record
from ._workload_app import use


@app.step(retry=Retry(attempts=4, backoff=1.0, jitter=0.5))
async def local_flaky(key: str, x: int) -> int:
    if _record(key) == 1:
        raise ValueError(f"{key}: the first attempt fails")
    return x * 2


@app.step(group="work", retry=Retry(attempts=6, backoff=2.0, jitter=0.5))
async def remote_flaky(key: str, x: int) -> int:
    if _record(key) == 1:
        raise ValueError(f"{key}: the first attempt fails")
    return x + 1


@app.step(group="work")
async def remote_square(x: int) -> int:
    await trio.sleep(x % 3)
    return x * x


# A timeout it keeps: it takes two of its three seconds. A clock jump across
# an attempt times it out (the clock moved on): the second attempt is for
# that (seed 276); two jumps across both attempts of a step do not happen.
@app.step(group="work", queue="limited", timeout=3.0, retry=Retry(attempts=2, backoff=0.5))
async def limited(x: int) -> int:
    await trio.sleep(2.0)
    return -x


@app.step()
async def flaky_once(key: str) -> str:
    if _record(key) == 1:
        raise FatalError(f"{key}: refused the first time", code="again")
    return "ok"


@app.workflow()
async def steps_flow(ctx: Any, key: str, x: int) -> int:
    a = await ctx.step(local_flaky, f"{key}:l", x)
    b = await ctx.step(remote_flaky, f"{key}:r", a)
    await ctx.sleep((x * 7) % 50)
    return int(a + b)


@app.workflow()
async def signal_flow(ctx: Any, key: str) -> Any:
    return await ctx.wait_signal("go", timeout=3000)


@app.workflow()
async def square_child(ctx: Any, x: int) -> int:
    return int(await ctx.step(remote_square, x))


@app.workflow()
async def child_flow(ctx: Any, x: int) -> int:
    c = await ctx.child(steps_flow, f"c{x}", x)
    fan = await ctx.all(square_child, list(range(5)), concurrency=2)
    return int(c + sum(fan))


@app.workflow()
async def step_fan_flow(ctx: Any, n: int) -> int:
    values = await ctx.all(remote_square, list(range(n)), concurrency=7)
    settled = await ctx.all_settled(remote_square, [n, n + 1])
    return int(sum(values) + sum(item["value"] for item in settled))


@app.workflow()
async def saga_flow(ctx: Any, key: str) -> None:
    await ctx.step(reserve, key, compensate=release)
    await ctx.sleep(5)
    raise FatalError("rejected after the reservation", code="rejected")


@app.workflow()
async def handler(ctx: Any, info: dict[str, Any]) -> str:
    await ctx.sleep(3)
    return f"handled {info['run_id']} ({info['error'].get('code')})"


@app.workflow(on_error=[OnError("rejected", workflow="handler")])
async def routed_flow(ctx: Any, key: str) -> None:
    await ctx.step(reserve, key)
    raise FatalError("routed away", code="rejected", details={"key": key})


@app.workflow()
async def queued_flow(ctx: Any, x: int) -> int:
    return int(await ctx.step(limited, x))


@app.workflow()
async def retried_flow(ctx: Any, key: str) -> str:
    return str(await ctx.step(flaky_once, key))


@app.workflow()
async def long_flow(ctx: Any, key: str) -> str:
    await ctx.step(reserve, key, compensate=release)
    await ctx.sleep(2000)
    return "finished"


# -- concurrency keys and an entity --------------------------------------------

# Runs of one key of `keyed_one` go one at a time, of `keyed_two` two at a
# time; their steps note the run in the key's log (see `_checks`).
KEYED: dict[str, int] = {"one:a": 1, "one:b": 1, "two:c": 2}


@app.step()
async def inside(log: str, label: str) -> None:
    _note(log, label)
    # Local steps that take time keep turns open (an engine crash then
    # lands inside one, and another engine takes its lapsed lease over).
    await trio.sleep(0.5)


async def _keyed_body(ctx: Any, log: str, label: str, pause: int) -> str:
    await ctx.step(inside, log, label)
    await ctx.sleep(pause)
    await ctx.step(inside, log, label)
    await ctx.sleep(pause)
    await ctx.step(inside, log, label)
    return label


@app.workflow(concurrency_key=lambda key, label, pause: key, max_concurrent=1)
async def keyed_one(ctx: Any, key: str, label: str, pause: int) -> str:
    return await _keyed_body(ctx, f"one:{key}", label, pause)


@app.workflow(concurrency_key=lambda key, label, pause: key, max_concurrent=2)
async def keyed_two(ctx: Any, key: str, label: str, pause: int) -> str:
    return await _keyed_body(ctx, f"two:{key}", label, pause)


@app.entity("tally")
class Tally:
    """A total per key: `add` is exclusive, `read` shared."""

    def __init__(self) -> None:
        self.total = 0

    @exclusive
    async def add(self, n: int) -> int:
        self.total += n
        return self.total

    @shared
    async def read(self) -> int:
        return self.total


@app.workflow()
async def tally_flow(ctx: Any, key: str, amounts: list[int]) -> list[int]:
    tally = ctx.entity("tally", key)
    added = []
    for n in amounts:
        added.append(await tally.add(n))
        await ctx.sleep(n)
    return [*added, await tally.read()]


async def _keyed_runs(sim: Simulation) -> None:
    """Eleven runs over three keys, started a second or two apart."""
    started: dict[str, list[str]] = {log: [] for log in KEYED}
    for i in range(4):
        for workflow, key in ((keyed_one, "a"), (keyed_one, "b"), (keyed_two, "c")):
            log = f"{workflow.name[6:]}:{key}"
            if key == "b" and i == 3:
                continue
            label = f"{log}-{i}"
            await sim.start(workflow, key, label, 5 + 7 * i, run_id=f"keyed-{log}-{i}")
            started[log].append(label)
            await sim.sleep(sim.rng.uniform(0, 2))

    async def check(store: Any) -> list[str]:
        violations: list[str] = []
        for log, limit in KEYED.items():
            entries = sim.notes.get(log, [])
            violations.extend(span_violations(log, entries, limit))
            if limit == 1:
                violations.extend(order_violations(log, entries, started[log]))
        return violations

    sim.check(check)


async def _tally_calls(sim: Simulation) -> None:
    """Three workflows and the workload itself add to one key of `Tally`,
    interleaved; the workload reads it too."""
    key = "t"
    amounts: list[int] = []
    results: dict[str, int] = {}
    reads: list[tuple[int, int]] = []
    callers = [f"tally-{w}" for w in range(3)]
    for w, caller in enumerate(callers):
        plan = [3 * w + j + 1 for j in range(3)]
        await sim.start(tally_flow, key, plan, run_id=caller)
        sim.may_differ.add(caller)  # what its calls return depends on the order
        amounts.extend(plan)
        call_id = f"tally-call-{w}"
        sim.may_differ.add(call_id)
        n = 100 * (w + 1)
        amounts.append(n)

        async def add(engine: Engine, call_id: str = call_id, n: int = n) -> int:
            return int(await engine.entity("tally", key, call_id=call_id).add(n))

        results[call_id] = await sim.call(add)
        floor = max(results.values())

        async def read(engine: Engine) -> int:
            return int(await engine.entity("tally", key).read())

        reads.append((floor, await sim.call(read)))
        await sim.sleep(sim.rng.uniform(0, 3))
    sim.check(
        partial(
            entity_violations,
            entity="tally",
            key=key,
            amounts=amounts,
            results=results,
            reads=reads,
            callers=callers,
        )
    )


# A schedule the workload creates, ticking every minute; each tick's run
# outlives the next tick, which the overlap policy ("skip") then skips.
TICK_PERIOD = 60


@app.step()
async def tick_step(run_id: str) -> None:
    _note("ticks", run_id)


@app.workflow()
async def tick_flow(ctx: Any, label: str) -> str:
    await ctx.step(tick_step, ctx.run_id)
    await ctx.sleep(90)
    return label


async def _create_schedule(sim: Simulation) -> tuple[float, float]:
    """Create the schedule "tick"; return when (durable time, bounds)."""
    before = WALL_START + trio.current_time()

    async def create(engine: Engine) -> None:
        await engine.create_schedule(
            "tick", tick_flow, cron="* * * * *", args=["tick"], overlap="skip"
        )

    await sim.call(create)
    return before, WALL_START + trio.current_time()


async def _pause_schedule(sim: Simulation, created: tuple[float, float]) -> None:
    async def pause(engine: Engine) -> None:
        await engine.pause_schedule("tick")

    await sim.call(pause)
    # Paused, it starts nothing more, and the runs it started end; it stays
    # in the store for the check.
    sim.check(
        lambda store: schedule_violations(
            store,
            name="tick",
            period=TICK_PERIOD,
            created=created,
            ticked=sim.notes.get("ticks", []),
        )
    )


# -- remote workflows: decided on the workers of "deciders" ---------------------------


@app.workflow(group="deciders")
async def remote_steps_flow(ctx: Any, key: str, x: int) -> int:
    a = await ctx.step(local_flaky, f"{key}:rl", x)
    b = await ctx.step(remote_flaky, f"{key}:rr", a)
    await ctx.sleep((x * 11) % 40)
    return int(a + b)


@app.workflow(group="deciders")
async def remote_square_child(ctx: Any, x: int) -> int:
    return int(await ctx.step(remote_square, x))


@app.workflow(group="deciders")
async def remote_parent(ctx: Any, x: int) -> int:
    c = await ctx.child(remote_steps_flow, f"rc{x}", x)
    local = await ctx.child(square_child, x)
    fan = await ctx.all(remote_square_child, list(range(4)), concurrency=3)
    go = await ctx.wait_signal("go", timeout=3000)
    return int(c + local + sum(fan) + go)


@app.workflow(group="deciders")
async def remote_handler(ctx: Any, info: dict[str, Any]) -> str:
    return f"remotely handled {info['run_id']} ({info['error'].get('code')})"


@app.workflow(group="deciders", on_error=[OnError("rejected", workflow="remote_handler")])
async def remote_saga_flow(ctx: Any, key: str) -> None:
    await ctx.step(reserve, key, compensate=release)
    await ctx.sleep(5)
    raise FatalError("rejected after the reservation", code="rejected")


async def default_workload(sim: Simulation) -> None:
    """Start one of everything (several of some), spread over time."""
    use(sim)
    rng = sim.rng
    amounts = [rng.randint(1, 9) for _ in range(4)]
    created = await _create_schedule(sim)
    breakpoint_id = await set_breakpoint(sim)
    async with trio.open_nursery() as nursery:
        # Parts that wait on their runs go on beside the rest.
        nursery.start_soon(cart_updates, sim, amounts)
        nursery.start_soon(stream_reader, sim)
        nursery.start_soon(webhook_deliveries, sim)
        nursery.start_soon(fork_and_rewind, sim)
        nursery.start_soon(breakpoint_runs, sim, breakpoint_id)
        nursery.start_soon(big_payloads, sim)
        nursery.start_soon(rollout, sim)
        for i in range(6):
            await sim.start(steps_flow, f"s{i}", i, run_id=f"steps-{i}")
            await sim.sleep(rng.uniform(0, 20))
        await sim.start(signal_flow, "early", run_id="signal-early")
        await sim.signal("signal-early", "go", "early")
        await sim.start(signal_flow, "late", run_id="signal-late")
        await sim.start(signal_flow, "never", run_id="signal-never")
        await sim.start(child_flow, 3, run_id="children")
        await sim.start(step_fan_flow, 30, run_id="step-fan")
        await sim.start(saga_flow, "sg", run_id="saga")
        await sim.start(routed_flow, "rt", run_id="routed")
        for i in range(4):
            await sim.start(queued_flow, i, run_id=f"queued-{i}")
        await sim.start(retried_flow, "rf", run_id="retried")
        nursery.start_soon(sim.retry, "retried")
        for i in range(3):
            await sim.start(remote_steps_flow, f"rs{i}", i, run_id=f"remote-steps-{i}")
        await sim.start(remote_parent, 2, run_id="remote-parent")
        await sim.start(remote_saga_flow, "rsg", run_id="remote-saga")
        await _keyed_runs(sim)
        await _tally_calls(sim)
        await sim.start(long_flow, "lf", run_id="cancelled")
        # A clock jump can let the cancellation below land before the run's
        # first turn: then its step and undo never run (seed 5066).
        sim.may_skip("lf", "lf:undo")
        await cleanup_runs(sim)
        await sim.sleep(rng.uniform(10, 300))
        await sim.signal("signal-late", "go", "late")
        await sim.signal("remote-parent", "go", 100)
        await sim.cancel("cancelled", compensate=True)
        await cancel_cleanup_runs(sim)
        await _pause_schedule(sim, created)


CODEC_KEY = hashlib.sha256(b"trio-durable simulation codec").digest()
SIGNING_KEY = hashlib.sha256(b"trio-durable simulation signing").digest()
BLOB_THRESHOLD = 256
"""The built-in workload's fleet: a codec, a signing ring and a blob store
taking payloads over this many characters (`simulate_builtin`)."""


def simulate_builtin(
    seed: int,
    *,
    engines: int = 2,
    workers: int = 2,
    faults: Faults | None = None,
    duration: float = 3600.0,
    reference: SimulationReport | None = None,
    keep_trace: bool = False,
) -> SimulationReport:
    """`simulate` of the built-in workload on its fleet: payloads encrypted
    at rest (`AesGcmCodec`), messages signed, large payloads in a blob
    store, so that nothing readable reaches the store and nothing forged
    gets through are checked too. The arguments are `simulate`'s."""
    return simulate(
        app,
        default_workload,
        seed=seed,
        engines=engines,
        workers=workers,
        faults=faults,
        duration=duration,
        reference=reference,
        keep_trace=keep_trace,
        codec=AesGcmCodec(Keyring.single(CODEC_KEY, "sim")),
        signing=Keyring.single(SIGNING_KEY, "sim"),
        blob_threshold=BLOB_THRESHOLD,
    )
