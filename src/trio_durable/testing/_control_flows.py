"""The built-in workload's runs controlled from outside once they started:
forked and retried from a seq, paused at a breakpoint, cancelled while they
wait (catching `td.Cancelled` to clean up in ``ctx.shield()``); each with
the invariants it keeps (added with `Simulation.check`).

Steps note when they ran (`stamp`), so the invariants can tell what ran
before and after the workload acted:

- **Fork and retry from a seq.** ``report`` gathers rows (a local step),
  emits them, sleeps, renders them (a remote step), emits and publishes the
  text. Once it ended, the workload forks it from seq 3; a second report,
  once ended, is retried in place from seq 2. The fork never gathers (seq 1
  is copied), records where it came from, renders anew, and streams its own
  two values, each offset written once; the original's stream is left as
  it was. The retried run never gathers again after the retry and renders
  again; its stream is written again from offset 0 (the replay re-emits
  the rows), each offset once.
- **Breakpoints.** The workload sets a breakpoint before the step of
  ``paused_flow`` and, a minute later, starts three runs of it. Each pauses
  before the step; the workload continues one, skips the step of another,
  and continues and skips the third at once. The continued run runs its
  step after it was continued, never before; the skipped one never runs it
  and returns the output given; of the two actions on the third, at most
  one is told it worked, and the run's outcome is that one's.
- **Cancellation in the body.** Two runs (one decided on the workers) hold
  a reservation and wait; the workload cancels them with compensation. A
  run whose body had recorded its reservation gets `td.Cancelled`, and its
  cleanup runs whole after the cancel (a local step, a timer, a remote step
  whose first attempt fails) before the undo; a run cancelled before its
  body recorded anything runs none of it.
"""

from __future__ import annotations

import json
from contextlib import suppress
from functools import partial
from typing import Any

import trio

from .._base._current import current_step
from .._base._exceptions import BreakpointNotFoundError, Cancelled, InvalidRunStateError
from .._features.fork._fork import FORKED_FROM
from .._features.messages._streams import stream_scope
from .._front._app import Retry
from .._kernel._cancellation import CANCELLED_AT
from .._stores._base import Store
from ._simulation import Simulation
from ._workload_app import app, note, record, stamp, stamped

# -- fork and retry from a seq ------------------------------------------------------------


@app.step()
async def gather(key: str) -> list[int]:
    note("gathered", stamp(current_step().run_id))
    await trio.sleep(2)  # a turn open for a while: a crash may land in it
    return [3, 1, 2]


@app.step(group="work")
async def render(key: str, rows: list[int]) -> str:
    note("rendered", stamp(current_step().run_id))
    return f"{key}: " + ",".join(str(row) for row in sorted(rows))


@app.workflow()
async def report_flow(ctx: Any, key: str) -> str:
    rows = await ctx.step(gather, key)  # seq 1
    ctx.emit({"rows": rows})
    await ctx.sleep(20)  # seq 2
    text = await ctx.step(render, key, rows)  # seq 3
    ctx.emit({"text": text})
    ctx.set_event("text", text)
    return str(text)


async def fork_and_rewind(sim: Simulation) -> None:
    """Fork one report from seq 3 once it ended, and retry another in place
    from seq 2 once it ended."""
    await sim.start(report_flow, "ra", run_id="report")
    await sim.start(report_flow, "rb", run_id="rewound")
    await sim.wait("report")
    await sim.fork("report", from_seq=3, new_run_id="report-fork")
    await sim.wait("rewound")
    retried_at = trio.current_time()
    await sim.retry("rewound", from_seq=2)
    notes = sim.notes
    sim.check(
        partial(fork_violations, original="report", fork="report-fork", from_seq=3, notes=notes)
    )
    sim.check(partial(rewind_violations, run_id="rewound", retried_at=retried_at, notes=notes))
    sim.check(partial(_report_stream_violations, run_id="report"))


Notes = dict[str, list[str]]


def _ran(notes: Notes, log: str, who: str) -> list[float]:
    """When the entries of ``who`` in ``log`` were noted."""
    return [at for name, at in map(stamped, notes.get(log, [])) if name == who]


async def _report_stream_violations(store: Store, *, run_id: str) -> list[str]:
    """A report's stream is its rows, then its text, each written once."""
    run = await store.get_run(run_id)
    if run is None or run.status != "completed":
        return []  # the harness reports a run that did not end well
    text = json.loads(run.output or "null")
    expected = [{"rows": [3, 1, 2]}, {"text": text}]
    rows = await store.list_values(stream_scope(run_id), limit=10)
    found = [(int(row.key), json.loads(row.value), row.version) for row in rows if row.value]
    if found != [(i, value, 1) for i, value in enumerate(expected)]:
        return [f"stream of {run_id}: stored {found}, expected {expected} written once each"]
    return []


async def fork_violations(
    store: Store, *, original: str, fork: str, from_seq: int, notes: Notes
) -> list[str]:
    """The fork copied what came before ``from_seq`` and ran the rest."""
    where = f"fork {fork} of {original}"
    violations = await _report_stream_violations(store, run_id=fork)
    before = {cp.seq: cp for cp in await store.get_checkpoints(original) if cp.seq < from_seq}
    copied = {cp.seq: cp for cp in await store.get_checkpoints(fork) if cp.seq < from_seq}
    for seq, cp in sorted(before.items()):
        mine = copied.get(seq)
        if mine is None or (mine.name, mine.status, mine.output) != (cp.name, cp.status, cp.output):
            violations.append(f"{where}: seq {seq} is not the original's")
    marks = [r for r in await store.get_records(fork) if r.kind == FORKED_FROM]
    if not marks or json.loads(marks[0].input or "null") != {
        "run_id": original,
        "from_seq": from_seq,
    }:
        violations.append(f"{where}: it does not record where it came from")
    if _ran(notes, "gathered", fork):
        violations.append(f"{where}: it ran seq 1 again")
    if not _ran(notes, "rendered", fork):
        violations.append(f"{where}: it never ran seq 3")
    return violations


async def rewind_violations(
    store: Store, *, run_id: str, retried_at: float, notes: Notes
) -> list[str]:
    """The run retried in place from seq 2 ran nothing before it again."""
    where = f"retry of {run_id} from seq 2"
    violations = await _report_stream_violations(store, run_id=run_id)
    if any(at >= retried_at for at in _ran(notes, "gathered", run_id)):
        violations.append(f"{where}: it ran seq 1 again")
    if not any(at >= retried_at for at in _ran(notes, "rendered", run_id)):
        violations.append(f"{where}: it never ran seq 3 again")
    return violations


# -- breakpoints --------------------------------------------------------------------------


@app.step()
async def guarded(key: str) -> str:
    note("guarded", stamp(key))
    record(f"{key}:guarded")
    return f"ran {key}"


@app.workflow()
async def paused_flow(ctx: Any, key: str) -> str:
    await ctx.sleep(5)
    return str(await ctx.step(guarded, key))


async def set_breakpoint(sim: Simulation) -> str:
    """Pause `paused_flow` before `guarded` (setting it again returns it)."""
    found = await sim.call(lambda e: e.set_breakpoint(workflow="paused_flow", step="guarded"))
    return str(found.id)


async def breakpoint_runs(sim: Simulation, breakpoint_id: str) -> None:
    """Three runs paused at the breakpoint, continued, skipped, and both."""
    # Every engine hears of the breakpoint first (a run that reaches the step
    # before its engine heard of it goes through).
    await sim.sleep(60)
    keys = ("go", "skip", "race")
    for key in keys:
        await sim.start(paused_flow, key, run_id=f"paused-{key}")
    # Which action on the third run wins depends on the race.
    sim.may_differ.add("paused-race")
    sim.may_skip("race:guarded")
    paused = {key: await _until_paused(sim, f"paused-{key}") for key in keys}
    resumed_at = trio.current_time()
    told: dict[str, str] = {}
    await _resume(sim, "paused-go", "continue", told)
    await _resume(sim, "paused-skip", "skip", told)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_resume, sim, "paused-race", "continue", told)
        nursery.start_soon(_resume, sim, "paused-race", "skip", told)

    async def clear(engine: Any) -> None:
        with suppress(BreakpointNotFoundError):  # an earlier try cleared it
            await engine.clear_breakpoint(breakpoint_id)

    await sim.call(clear)
    sim.check(
        partial(
            breakpoint_violations,
            paused=paused,
            told=told,
            resumed_at=resumed_at,
            notes=sim.notes,
        )
    )


async def _until_paused(sim: Simulation, run_id: str) -> bool:
    """Wait until the run pauses (True) or ends without pausing (False)."""
    while True:
        if await sim.call(lambda e: e.paused_steps(run_id)):
            return True
        run = await sim.call(lambda e: e.get(run_id))
        if run.done:
            return False
        await sim.sleep(5)


async def _resume(sim: Simulation, run_id: str, action: str, told: dict[str, str]) -> None:
    async def resume(engine: Any) -> None:
        if action == "continue":
            await engine.continue_run(run_id)
        else:
            await engine.skip_step(run_id, "skipped")

    try:
        await sim.call(resume)
        told[f"{run_id}:{action}"] = "done"
    except InvalidRunStateError:
        told[f"{run_id}:{action}"] = "not paused"


async def breakpoint_violations(
    store: Store,
    *,
    paused: dict[str, bool],
    told: dict[str, str],
    resumed_at: float,
    notes: Notes,
) -> list[str]:
    """What the module's docstring says of the paused runs."""
    violations: list[str] = []
    for key, was_paused in sorted(paused.items()):
        if not was_paused:
            violations.append(f"breakpoint: paused-{key} ended without pausing")
    outputs = {}
    for key in paused:
        run = await store.get_run(f"paused-{key}")
        if run is None or run.status != "completed":
            return violations  # the harness reports a run that did not end well
        outputs[key] = json.loads(run.output or "null")
    ran = {key: _ran(notes, "guarded", key) for key in paused}
    early = sorted(key for key, times in ran.items() if any(at < resumed_at for at in times))
    if early:
        violations.append(f"breakpoint: {early} ran their step before they were resumed")
    if outputs["go"] != "ran go" or not ran["go"]:
        violations.append(f"breakpoint: the continued run returned {outputs['go']!r}")
    if outputs["skip"] != "skipped" or ran["skip"]:
        violations.append(
            f"breakpoint: the skipped run returned {outputs['skip']!r}"
            f" and ran its step {len(ran['skip'])} times"
        )
    done = sorted(a for a in ("continue", "skip") if told.get(f"paused-race:{a}") == "done")
    outcome = "skip" if outputs["race"] == "skipped" and not ran["race"] else "continue"
    if outcome == "continue" and (outputs["race"] != "ran race" or not ran["race"]):
        violations.append(
            f"breakpoint: the raced run returned {outputs['race']!r}"
            f" and ran its step {len(ran['race'])} times"
        )
    elif len(done) > 1 or (done and done != [outcome]):
        violations.append(f"breakpoint: {done} were both told they worked; {outcome} won")
    return violations


# -- cancellation in the body -------------------------------------------------------------


@app.step()
async def reserve(key: str) -> str:
    record(key)
    note(f"effects:{key}", stamp("reserve"))
    return f"held:{key}"


@app.step()
async def release(key: str) -> None:
    record(f"{key}:undo")
    note(f"effects:{key}", stamp("undo"))


@app.step()
async def clean(key: str) -> None:
    record(f"{key}:clean")
    note(f"effects:{key}", stamp("clean"))
    await trio.sleep(1)


@app.step(group="work", retry=Retry(attempts=6, backoff=2.0, jitter=0.5))
async def refund(key: str) -> None:
    note(f"effects:{key}", stamp("refund"))
    if record(f"{key}:refund") == 1:
        raise ValueError(f"{key}: the first refund fails")


async def _cleanup_body(ctx: Any, key: str) -> str:
    await ctx.step(reserve, key, compensate=release)
    try:
        await ctx.wait_signal("never", timeout=5000)
    except Cancelled:
        # Cancelled: a cleanup that runs a step, waits for a timer and
        # then for a remote step with retries.
        with ctx.shield():
            await ctx.step(clean, key)
            await ctx.sleep(7)
            await ctx.step(refund, key)
        raise
    return "not cancelled"


@app.workflow()
async def cleanup_flow(ctx: Any, key: str) -> str:
    return await _cleanup_body(ctx, key)


@app.workflow(group="deciders")
async def remote_cleanup_flow(ctx: Any, key: str) -> str:
    return await _cleanup_body(ctx, key)


_CLEANED = {"cleaned-up": "cl", "remote-cleaned-up": "rcl"}
"""The runs that clean up when cancelled, and their keys."""


async def cleanup_runs(sim: Simulation) -> None:
    """Start the runs that clean up when cancelled."""
    await sim.start(cleanup_flow, "cl", run_id="cleaned-up")
    await sim.start(remote_cleanup_flow, "rcl", run_id="remote-cleaned-up")
    # A cancellation that lands before a run's first turn runs none of it.
    sim.may_skip(
        *(f"{key}{end}" for key in _CLEANED.values() for end in ("", ":undo", ":clean", ":refund"))
    )


async def cancel_cleanup_runs(sim: Simulation) -> None:
    """Cancel them, with compensation."""
    for run_id, key in _CLEANED.items():
        sim.note(f"effects:{key}", stamp("cancel"))
        await sim.cancel(run_id, compensate=True)
    sim.check(partial(cleanup_violations, notes=sim.notes))


async def cleanup_violations(store: Store, *, notes: Notes) -> list[str]:
    """What the module's docstring says of the runs that clean up."""
    violations: list[str] = []
    for run_id, key in _CLEANED.items():
        run = await store.get_run(run_id)
        if run is None or run.status != "cancelled":
            continue  # the harness compares its outcome
        log = [stamped(entry)[0] for entry in notes.get(f"effects:{key}", [])]
        checkpoints = await store.get_checkpoints(run_id)
        by_name = {cp.name: cp for cp in checkpoints}
        began = "reserve" in by_name and by_name["reserve"].status == "completed"
        if not began:
            if {"clean", "refund", "undo"} & set(log):
                violations.append(f"{run_id}: cleaned up a body that recorded nothing: {log}")
            continue
        where = f"{run_id}: its cleanup"
        if not any(r.kind == CANCELLED_AT for r in await store.get_records(run_id)):
            violations.append(f"{where}: td.Cancelled was never delivered to its body")
        after = log[log.index("cancel") :] if "cancel" in log else []
        if "clean" not in after or "refund" not in after:
            violations.append(f"{where} did not run after the cancel: {log}")
        elif "undo" not in after or after.index("undo") < max(
            after.index("clean"), after.index("refund")
        ):
            violations.append(f"{where} did not run before its undo: {log}")
        unsettled = [
            name
            for name in ("clean", "refund")
            if name not in by_name or by_name[name].status != "completed"
        ]
        if unsettled:
            violations.append(f"{where} left {unsettled} unsettled")
    return violations
