"""Invariants of the built-in workload's keyed parts: concurrency keys and
entities, stated so that they hold exactly under the engine's guarantees.

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
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .._records import Run
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
