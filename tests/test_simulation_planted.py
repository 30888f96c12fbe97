"""A planted bug for each kind of fault the simulation injects.

Each test breaks one part of the engine or the store on purpose, runs the
built-in workload (`simulate_builtin`) with that one kind of fault, and
asserts that the simulation reports the invariant the bug breaks. Where the
kind of fault is what exposes the bug, the same seed with the bug and no
fault passes (compared with the same fault-free reference): the fault is
what the invariant needed to see it.

The seed that catches a bug depends on the engine and the harness (the
faults a seed draws, where they land): each test takes the first seed of a
short range that does, so a change elsewhere moves the seed, not the test.

Plain functions, not ``async def``: `simulate` starts its own ``trio.run``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

import trio_durable._features.entities._entity_defs as entity_defs
import trio_durable._features.schedules._schedule_ticker as schedule_ticker
import trio_durable._front._front_messages as run_messages
import trio_durable._stores._memory as memory_module
import trio_durable._wire._layers as wire_layers
from trio_durable._base import _serde
from trio_durable._base._current import call_step
from trio_durable._base._exceptions import InvalidRunStateError, UpdateRejected
from trio_durable._base._records import TERMINAL_STATUSES, Run
from trio_durable._features.messages._published import Front, current_run
from trio_durable._features.messages._read_replay import replay_now
from trio_durable._features.messages._updates import INBOX, RECORD, _outcome, update_scope
from trio_durable._front._result_publisher import Outcome
from trio_durable._front._worker import Worker
from trio_durable._kernel._handlers import check_arguments, plain_args
from trio_durable._stores._base import run_due_at
from trio_durable._stores._memory import MemoryStore
from trio_durable._stores._ops import Op, PutValue, SettleCheckpoint
from trio_durable._stores._rules import is_of
from trio_durable._wire._blob_wire import resolve_task_input
from trio_durable._wire._messages import Result, Task, WireError
from trio_durable._wire._signing import TAG, open_signed
from trio_durable.testing import Faults, SimulationReport
from trio_durable.testing._workloads import simulate_builtin


@pytest.fixture(autouse=True)
def _quiet_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging.getLogger("trio_durable"), "disabled", True)


def _first_caught(faults: Faults, seeds: range, duration: float = 3600.0) -> SimulationReport:
    """The report of the first seed whose simulation with ``faults`` (its
    crashes and jumps drawn over ``duration``) fails."""
    for seed in seeds:
        report = simulate_builtin(seed, faults=faults, duration=duration)
        if not report.ok:
            return report
    raise AssertionError(f"no seed in {seeds} caught the planted bug with {faults}")


def _fault_is_needed(caught: SimulationReport) -> None:
    """The bug is still planted: the same seed without faults, compared with
    the same reference, passes."""
    reference = simulate_builtin(caught.seed, engines=1, workers=1, faults=Faults.none())
    assert reference.ok, reference.violations
    quiet = simulate_builtin(caught.seed, faults=Faults.none(), reference=reference)
    assert quiet.ok, quiet.violations


def _matching(report: SimulationReport, pattern: str) -> list[str]:
    return [v for v in report.violations if re.search(pattern, v)]


# -- broker.duplicate ---------------------------------------------------------------------


def _settle_without_the_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """SettleCheckpoint settles a checkpoint that is no longer pending: a
    second result of one attempt replaces the first after the run read it."""
    original = MemoryStore._apply_one

    def apply_one(self: MemoryStore, op: Op, journal: list[Any]) -> Any:
        if not isinstance(op, SettleCheckpoint):
            return original(self, op, journal)
        cp = self._checkpoints.get(op.run_id, {}).get(op.seq)
        if cp is None or cp.status == "pending":
            return original(self, op, journal)
        # The original's checks, all but `cp.status != "pending"`.
        if not is_of(cp, op.kind, op.name):
            return None
        if op.attempt is not None and cp.attempts != op.attempt:
            return None
        if op.unless_run_status and self._run_status(op.run_id) in op.unless_run_status:
            return None
        settled = attrs.evolve(
            cp, status=op.status, output=op.output, error=op.error, finished_at=op.finished_at
        )
        self._set_checkpoint(settled, (op.run_id, op.seq), journal)
        return settled

    monkeypatch.setattr(MemoryStore, "_apply_one", apply_one)


def test_duplicates_catch_a_settle_without_the_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    _settle_without_the_claim(monkeypatch)
    caught = _first_caught(Faults(duplicate=0.2), range(1, 11))
    assert _matching(caught, r"^checkpoint \S+@\d+ settled [2-9] times$"), caught.violations
    _fault_is_needed(caught)


# -- broker.delay -------------------------------------------------------------------------


def _timeout_from_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker counts a step's timeout from when the engine sent the task,
    not from when the attempt started: a task the broker held back times out
    early (the `limited` step takes two of its three seconds)."""

    async def call(self: Worker, step: Any, task: Task) -> Any:
        args = _serde.load_args(await resolve_task_input(self.blobs, task.input), step.fn)
        timeout = task.timeout if task.timeout is not None else step.timeout
        with trio.CancelScope() as scope:
            if timeout is not None:
                scope.deadline = self._clock.to_trio(task.dispatched_at) + timeout
            return await call_step(self._step_info(task), step.fn, args)
        raise TimeoutError(f"step {step.name!r} timed out after {timeout} s")

    monkeypatch.setattr(Worker, "_call", call)


def test_delays_catch_a_timeout_counted_from_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    _timeout_from_dispatch(monkeypatch)
    caught = _first_caught(Faults(delay=2.0), range(1, 11))
    assert _matching(
        caught, r"^run queued-\d ended \('failed', 'timeout'\), the fault-free execution"
    ), caught.violations
    _fault_is_needed(caught)


# -- broker.reorder -----------------------------------------------------------------------


def _worker_that_trusts_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that takes its queue for first in, first out: a step task of
    a run with a lower seq than one it already received for that run is
    refused as stale (a failure that is not retried)."""

    async def consume(
        self: Worker, queue: str, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        newest: dict[str, int] = {}
        async with (
            self.broker.open_consumer(queue, prefetch=self._concurrency) as consumer,
            trio.open_nursery() as nursery,
        ):
            task_status.started()
            while True:
                deliveries = await consumer.receive(self._concurrency)
                self._stats.received += len(deliveries)
                self._track(len(deliveries))
                for delivery in deliveries:
                    try:
                        task = Task.decode(open_signed(None, "task", delivery.body))
                    except WireError:
                        task = None
                    if task is not None and task.kind == "step":
                        if task.seq < newest.get(task.run_id, 0):
                            now = self._clock.now()
                            stale = Result(
                                run_id=task.run_id,
                                seq=task.seq,
                                attempt=task.attempt,
                                step=task.step,
                                workflow=task.workflow,
                                status="failed",
                                error="a task older than one already received",
                                code="stale",
                                retryable=False,
                                started_at=now,
                                finished_at=now,
                                worker=self.instance_id,
                                queue=task.queue,
                            )
                            outcome = Outcome(consumer, delivery, stale, task.reply_to, True)
                            self._results.send_nowait(outcome)
                            continue
                        newest[task.run_id] = max(newest.get(task.run_id, 0), task.seq)
                    nursery.start_soon(self._run_task, consumer, delivery)

    monkeypatch.setattr(Worker, "_consume", consume)


def test_reordering_catches_a_worker_that_trusts_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_that_trusts_fifo(monkeypatch)
    caught = _first_caught(Faults(reorder=True), range(1, 11))
    # A fan whose tasks went to a worker out of order failed.
    assert _matching(caught, r"ended \('failed', 'gather_failed'\)"), caught.violations
    _fault_is_needed(caught)


# -- store.fail_before --------------------------------------------------------------------


def _entity_state_written_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exclusive entity call writes the entity's new state on its own,
    before the write that ends the call: if that end write fails, the call
    runs again on the state it already changed."""
    original = entity_defs.run_handler

    async def early(store: Any, now: float, *args: Any) -> tuple[Any, None]:
        result, put = await original(store, now, *args)
        if put is not None:
            await store.apply([put])
        return result, None

    monkeypatch.setattr(entity_defs, "run_handler", early)


def test_failed_writes_catch_entity_state_written_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _entity_state_written_apart(monkeypatch)
    caught = _first_caught(Faults(store_fail_before=0.05), range(1, 11))
    # More state than the calls added, at a version past their number.
    assert _matching(
        caught, r"^entity tally\[t\]: state \d+ at version 1[3-9], expected 645 at version 12$"
    ), caught.violations
    _fault_is_needed(caught)


# -- store.fail_after ---------------------------------------------------------------------


async def _update_accepted_again(
    front: Front,
    run_id: str,
    name: str,
    args: tuple[Any, ...],
    namespace: str | None,
    update_id: str | None,
    type_: Any,
) -> Any:
    """`update_run` whose accept neither looks for an earlier try of the
    update nor expects to find none: a try again after a write that was
    applied, then reported failed, adds the update a second time."""
    args_json, values = plain_args(args)
    run: Run = await current_run(front, run_id, namespace)
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run.id!r} is {run.status}")
    replay = await replay_now(front, run)
    handler = replay.handlers.updates[name]
    check_arguments(handler.fn, values, f"update {name!r}")
    if handler.validator is not None:
        try:
            replay.handlers.call(handler.validator, values)
        except Exception as exc:
            raise UpdateRejected(run.id, name, str(exc), "rejected", None) from exc
    assert update_id is not None
    now, scope = front.clock.now(), update_scope(run.id)
    accepted = {"name": name, "args": args_json, "at": now}
    record = json.dumps({**accepted, "status": "accepted"})
    await front.store.apply(
        [
            PutValue(scope, f"{RECORD}{update_id}", record, now),
            PutValue(scope, f"{INBOX}{update_id}", json.dumps(accepted), now),
            *front.wake_ops([run]),
        ]
    )
    front.woke(run)
    return await _outcome(front, run.id, update_id, type_)


def test_writes_reported_failed_catch_an_update_accepted_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run_messages, "update_run", _update_accepted_again)
    caught = _first_caught(Faults(store_fail_after=0.1), range(1, 16))
    assert _matching(caught, r"^updates of cart: the run applied \[.*\], the workload sent"), (
        caught.violations
    )
    _fault_is_needed(caught)


# -- engine.crash -------------------------------------------------------------------------


def _leased_runs_never_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory store lists no run that holds a lease as due: a turn cut
    off by its engine's death leaves its run to nobody."""
    real: Callable[[Run], float | None] = run_due_at

    def due(run: Run) -> float | None:
        if run.status in ("pending", "running", "cancelling") and run.lease_owner is not None:
            return None
        return real(run)

    monkeypatch.setattr(memory_module, "run_due_at", due)


def test_engine_crashes_catch_lapsed_leases_never_taken_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _leased_runs_never_due(monkeypatch)
    # More crashes than Faults.everything(): one must land inside a turn.
    caught = _first_caught(Faults(engine_crashes=20), range(1, 21))
    assert _matching(caught, r"^run \S+ did not end: (running|pending|cancelling)$"), (
        caught.violations
    )
    _fault_is_needed(caught)


# -- worker.crash -------------------------------------------------------------------------


def _poison_at_the_first_redelivery(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that counts the delivery it handles among the failed ones:
    the first time a task comes back from a worker that died holding it, it
    is failed as poison instead of run."""
    original = Worker.__init__

    def init(self: Worker, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self._max_deliveries = 1

    monkeypatch.setattr(Worker, "__init__", init)


def test_worker_crashes_catch_poison_at_the_first_redelivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _poison_at_the_first_redelivery(monkeypatch)
    # Most of the workload's remote steps go out in its first two minutes, and
    # a worker crash waits at most a minute for a task to go out: over the
    # default hour nearly every crash lands with no task held, and whether
    # one of ten seeds has a crash amid the work hangs on the timing of the
    # runs. Drawn over those two minutes, the crashes land amid the work.
    caught = _first_caught(Faults(worker_crashes=3), range(1, 11), duration=120.0)
    assert _matching(caught, r"ended \('failed', '(poison|gather_failed)'\)"), caught.violations
    _fault_is_needed(caught)


# -- clock.jump ---------------------------------------------------------------------------


def _missed_ticks_uncounted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ticks older than the catch-up window are passed over without being
    counted as missed."""
    real = schedule_ticker._next_step

    async def uncounted(rt: Any, spec: Any, state: Any, now: float) -> Any:
        step = await real(rt, spec, state, now)
        if step.state is not None:
            step = attrs.evolve(step, state=attrs.evolve(step.state, missed=state.missed))
        return step

    monkeypatch.setattr(schedule_ticker, "_next_step", uncounted)


def test_clock_jumps_catch_missed_ticks_uncounted(monkeypatch: pytest.MonkeyPatch) -> None:
    _missed_ticks_uncounted(monkeypatch)
    caught = _first_caught(Faults(clock_jumps=6), range(1, 11))
    assert _matching(
        caught, r"^schedule tick: \d+ started, \d+ skipped and 0 missed, \d+ ticks due by [\d.]+$"
    ), caught.violations
    _fault_is_needed(caught)


# -- broker.forge -------------------------------------------------------------------------


def _unsigned_results_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine with a keyring that checks only the results that carry a
    signature: an unsigned one is read as if signing were off."""
    real = open_signed

    def lenient(signing: Any, role: Any, message: bytes) -> bytes:
        if not message.startswith(TAG):
            return message
        return real(signing, role, message)

    monkeypatch.setattr(wire_layers, "open_signed", lenient)


def test_forgeries_catch_unsigned_results_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    _unsigned_results_accepted(monkeypatch)
    caught = _first_caught(Faults(forge=0.3), range(1, 11))
    assert _matching(caught, r"holds a forged result$|ended with a forged result$"), (
        caught.violations
    )
    assert caught.faults["broker.forge"] > 0
    _fault_is_needed(caught)


def test_forgeries_with_signing_get_nowhere() -> None:
    # Without the bug, the same forgeries are all rejected.
    report = simulate_builtin(1, faults=Faults(forge=0.3))
    assert report.ok, report.violations
    assert report.faults["broker.forge"] > 5
