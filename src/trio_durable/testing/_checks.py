"""Invariants of the built-in workload's keyed parts: concurrency keys,
entities and schedules, stated so that they hold exactly under the engine's guarantees.

Steps run at least once, so a log may name a run more than once (a step
executed again after a crash or a failed write). What a concurrency key
promises is about runs, not step executions: a run's body runs only while
the run holds one of its key's slots, and it holds the slot from its
admission until the write that ends it. So, per key, the span of a run's log
entries (from its first to its last) overlaps the spans of at most
``limit - 1`` other runs of the key; with ``limit=1``, the runs' entries never
interleave. Each exclusive call of an entity changes its key's state once, in
the write that ends the call, so its calls form a total order: their results
are the state after each, all distinct, and the state's version counts them.
A schedule handles each tick once (a compare-and-swap of its state, in the
write that starts the tick's run), so its counters account for every tick.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .._base._records import Run
from .._stores._base import Store


def span_violations(log: str, entries: Sequence[str], limit: int) -> list[str]:
    """Where more than ``limit`` runs of one key were inside at once: each
    entry names a run, and a run is inside from its first entry to its last."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, run in enumerate(entries):
        first.setdefault(run, index)
        last[run] = index
    violations: list[str] = []
    for index, run in enumerate(entries):
        if first[run] != index:
            continue
        inside = sorted(other for other in first if first[other] <= index <= last[other])
        if len(inside) > limit:
            violations.append(
                f"key {log}: {len(inside)} runs inside at once (limit {limit}): {inside}"
            )
    return violations


def order_violations(log: str, entries: Sequence[str], started: Sequence[str]) -> list[str]:
    """Whether the runs of a key with one slot went in in start order."""
    entered = list(dict.fromkeys(entries))
    if entered != list(started):
        return [f"key {log}: runs went in as {entered}, started as {list(started)}"]
    return []


def _calls(runs: Sequence[Run], workflow: str, key: str) -> list[tuple[Run, str, list[Any]]]:
    calls = []
    for run in runs:
        if run.workflow != workflow:
            continue
        call_key, handler, args = json.loads(run.input)
        if call_key == key:
            calls.append((run, handler, args))
    return calls


async def entity_violations(
    store: Store,
    *,
    entity: str,
    key: str,
    amounts: Sequence[int],
    results: dict[str, int],
    reads: Sequence[tuple[int, int]],
    callers: Sequence[str],
) -> list[str]:
    """The invariants of an entity whose exclusive ``add(n)`` adds ``n`` to
    ``total`` and returns it, and whose shared ``read()`` returns ``total``.

    Args:
      store: The simulation's store, after the fleet drained.
      entity: The entity's name.
      key: The key the calls went to.
      amounts: Every ``n`` an ``add`` was called with, from workflows and
        the workload.
      results: What the workload's own calls returned, by call id.
      reads: The workload's shared reads: (the largest result it had seen
        before the read, what the read returned).
      callers: Runs whose output is a list of what their adds returned,
        then what their shared read returned.
    """
    where = f"entity {entity}[{key}]"
    runs = await store.list_runs(limit=1_000_000)
    calls = _calls(runs, f"entity:{entity}", key)
    violations: list[str] = []
    undone = sorted(run.id for run, _, _ in calls if run.status != "completed")
    if undone:
        return [f"{where}: calls did not complete: {undone}"]
    adds = {run.id: (args[0], json.loads(run.output or "null")) for run, h, args in calls}
    if sorted(n for n, _ in adds.values()) != sorted(amounts):
        violations.append(
            f"{where}: {len(adds)} calls added {sorted(n for n, _ in adds.values())},"
            f" expected {len(amounts)} adding {sorted(amounts)}"
        )
    seen = sorted(result for _, result in adds.values())
    if len(set(seen)) != len(seen):
        violations.append(f"{where}: two calls returned one state: {seen}")
    # In the order of their results, each call added its own n to the
    # state the one before it left: a total order.
    steps = Counter(b - a for a, b in zip([0, *seen], seen, strict=False))
    if steps != Counter(n for n, _ in adds.values()):
        violations.append(f"{where}: the results {seen} are not a sequence of the adds")
    stored = await store.get_value(f"entity:{entity}", key)
    total = json.loads(stored.value)["total"] if stored else 0
    version = stored.version if stored else 0
    if total != sum(amounts) or version != len(amounts):
        violations.append(
            f"{where}: state {total} at version {version},"
            f" expected {sum(amounts)} at version {len(amounts)}"
        )
    for call_id, result in sorted(results.items()):
        if call_id not in adds or adds[call_id][1] != result:
            violations.append(f"{where}: call {call_id} returned {result}, its run did not")
    states = {0, *seen}
    by_id = {run.id: run for run in runs}
    for caller in callers:
        run = by_id.get(caller)
        if run is None or run.status != "completed":
            continue  # the harness reports runs that did not end well
        *added, read = json.loads(run.output or "[]")
        if any(result not in states for result in added) or read not in states:
            violations.append(f"{where}: {caller} saw {added} then {read}, not states of it")
        elif added and read < max(added):
            violations.append(f"{where}: {caller} read {read} after its add returned {max(added)}")
    for floor, read in reads:
        if read not in states or read < floor:
            violations.append(f"{where}: a read returned {read} after a call returned {floor}")
    return violations


def _grid_count(period: int, after: float, until: float) -> int:
    """How many multiples of ``period`` lie in ``(after, until]``."""
    return max(0, int(until // period) - int(after // period))


async def schedule_violations(
    store: Store,
    *,
    name: str,
    period: int,
    created: tuple[float, float],
    ticked: Sequence[str],
) -> list[str]:
    """The invariants of a schedule ticking every ``period`` seconds (UTC),
    created at a durable time within ``created``, paused before the end.

    Each tick it handled (up to its cursor, the last one handled) started
    one run, was skipped for an open run, or was missed, and is counted so:
    started + skipped + missed is the number of ticks in the window. Every
    tick run is of a tick in the window, there are ``started`` of them (one
    per tick, their ids derived from it), and each noted its step in
    ``ticked``.
    """
    where = f"schedule {name}"
    stored = await store.get_value("schedule-state", name)
    if stored is None:
        return [f"{where}: no state at the end"]
    state = json.loads(stored.value)
    if not state["paused"]:
        return [f"{where}: not paused at the end"]
    cursor = state["cursor"]
    counted = state["started"] + state["skipped"] + state["missed"]
    due = (_grid_count(period, created[1], cursor), _grid_count(period, created[0], cursor))
    violations: list[str] = []
    if not due[0] <= counted <= due[1]:
        violations.append(
            f"{where}: {state['started']} started, {state['skipped']} skipped and"
            f" {state['missed']} missed, {due[1]} ticks due by {cursor}"
        )
    runs = [run for run in await store.list_runs(limit=1_000_000) if run.id.startswith(f"{name}@")]
    if len(runs) != state["started"]:
        violations.append(f"{where}: {len(runs)} tick runs, {state['started']} started")
    for run in runs:
        tick = datetime.strptime(run.id.split("@", 1)[1], "%Y-%m-%dT%H:%M:%SZ")
        at = tick.replace(tzinfo=UTC).timestamp()
        if at % period or not created[0] < at <= cursor:
            violations.append(f"{where}: the run {run.id} is of no tick in the window")
        if run.id not in ticked:
            violations.append(f"{where}: the run {run.id} never ran its step")
    strays = sorted(set(ticked) - {run.id for run in runs})
    if strays:
        violations.append(f"{where}: steps of runs it did not start: {strays}")
    return violations
