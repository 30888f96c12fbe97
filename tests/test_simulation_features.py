"""The simulation's invariants of every feature, and the parts that check
them: nothing readable reaches the store under a codec, nothing forged gets
through, blobs are whole, queries and updates, streams, fork and retry from
a seq, webhooks, breakpoints, cancellation in the body, and builds changing
under runs in flight.

Each invariant of the built-in workload is shown to fail: a test breaks the
feature on purpose and reads the violation the simulation reports (the
planted bugs of each kind of fault are in ``test_simulation_planted.py``).
The simulations here run without faults: these bugs need none to show.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
import trio_durable._features.determinism._context_determinism as context_determinism
import trio_durable._features.messages._streams as streams_module
from trio_durable._base._records import Checkpoint, ErrorInfo, Run
from trio_durable._features.fork._fork import fork_run as fork_run_of_the_engine
from trio_durable._features.fork._fork import retry_from as retry_from_of_the_engine
from trio_durable._kernel._dispatch import served_broker_queues
from trio_durable._stores._blob_store import SCOPE as BLOB_SCOPE
from trio_durable._stores._blob_store import blob_listing
from trio_durable._stores._codec import PayloadCoder
from trio_durable._stores._hook_ops import UseWebhook
from trio_durable._stores._memory import MemoryStore
from trio_durable._stores._memory_hooks import MemoryHooks, put_undoable
from trio_durable._stores._ops import CreateRun, DeliverSignal, Op, PutCheckpoint, PutValue
from trio_durable.testing import Faults, SimulationReport, simulate
from trio_durable.testing._build_checks import queue_build
from trio_durable.testing._forgery import FORGED, forgery_violations
from trio_durable.testing._memory_blobs import MemoryBlobStore, blob_violations
from trio_durable.testing._sealed import SealedWrites
from trio_durable.testing._workloads import app, default_workload, simulate_builtin
from trio_durable.testing.conformance import check_blob_store

CODEC = td.AesGcmCodec(td.Keyring.single(b"a codec key for the tests, 32 B."))


@pytest.fixture(autouse=True)
def _quiet_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging.getLogger("trio_durable"), "disabled", True)


def _quiet(seed: int = 1) -> SimulationReport:
    """The built-in workload without faults (every invariant of its own
    still checked)."""
    return simulate_builtin(seed, faults=Faults.none())


def _matching(report: SimulationReport, pattern: str) -> list[str]:
    return [v for v in report.violations if re.search(pattern, v)]


# -- the built-in workload's fleet ----------------------------------------------------


def test_the_builtin_workload_runs_every_feature() -> None:
    report = _quiet(3)
    assert report.ok, report.violations
    outputs = report.outputs
    # Queries and updates: the amounts the workload drew, in order.
    status, applied = outputs["cart"]
    assert status == "completed"
    assert len(applied) == 4
    assert outputs["stream"] == ("completed", 12)
    assert outputs["webhook"] in {("completed", "first"), ("completed", "second")}
    assert outputs["big"] == ("completed", 5000)
    # Forked from seq 3 and retried in place from seq 2: the same text.
    assert outputs["report"] == outputs["report-fork"] == ("completed", "ra: 1,2,3")
    assert outputs["rewound"] == ("completed", "rb: 1,2,3")
    assert outputs["paused-go"] == ("completed", "ran go")
    assert outputs["paused-skip"] == ("completed", "skipped")
    assert outputs["paused-race"] in {("completed", "ran race"), ("completed", "skipped")}
    assert outputs["cleaned-up"] == outputs["remote-cleaned-up"] == ("cancelled", "cancelled")


def test_a_simulation_with_every_feature_is_reproducible() -> None:
    first = simulate_builtin(4, keep_trace=True)
    again = simulate_builtin(4, keep_trace=True)
    assert first.ok, first.violations
    assert (again.trace_hash, again.trace) == (first.trace_hash, first.trace)
    assert (again.outputs, again.faults, again.ledger) == (
        first.outputs,
        first.faults,
        first.ledger,
    )
    assert again.simulated_time == first.simulated_time
    assert first.faults["broker.forge"] > 0


def test_the_fleet_options_are_checked() -> None:
    with pytest.raises(td.UsageError, match="codec="):
        simulate(app, default_workload, seed=1, codec="aes")  # type: ignore[arg-type]
    with pytest.raises(td.UsageError, match="signing="):
        simulate(app, default_workload, seed=1, signing=b"key")  # type: ignore[arg-type]
    with pytest.raises(td.UsageError, match="blob_threshold"):
        simulate(app, default_workload, seed=1, blob_threshold=0)


# -- nothing readable -----------------------------------------------------------------


def _run(**fields: Any) -> Run:
    return Run(id="r", workflow="w", **fields)


def test_sealed_writes_find_every_payload_in_the_clear() -> None:
    sealed = SealedWrites(CODEC, None)
    coder = PayloadCoder(CODEC)
    secret = json.dumps({"card": "4111"})
    error = ErrorInfo(message="card 4111 refused", code="refused", details={"card": "4111"})
    checkpoint = Checkpoint(
        run_id="r", seq=1, name="s", kind="local", status="failed", input=secret, error=error
    )
    # What a codec's store writes passes.
    sealed.inspect(
        [
            coder.op_in(CreateRun(_run(input=secret))),
            coder.op_in(PutCheckpoint(checkpoint)),
            coder.op_in(DeliverSignal("t", secret)),
            coder.op_in(PutValue("scope", "k", secret, 0.0)),
            # Which run refers to which blob: no payload.
            PutValue("blob", "r/sha256-0/r", "1", 0.0),
        ]
    )
    assert sealed.violations == []
    # The same in the clear does not.
    sealed.inspect(
        [
            CreateRun(_run(input=secret)),
            PutCheckpoint(checkpoint),
            DeliverSignal("t", secret),
            PutValue("scope", "k", secret, 0.0),
        ]
    )
    found = sealed.violations
    assert found[0].startswith("CreateRun.run.input reached the store in the clear")
    assert found[1].startswith("PutCheckpoint.checkpoint.input reached the store in the clear")
    assert found[2].startswith(
        "PutCheckpoint.checkpoint.error: an error reached the store in the clear"
    )
    assert found[3].startswith("DeliverSignal.payload reached the store in the clear")
    assert found[4].startswith("PutValue.value reached the store in the clear")
    assert len(found) == 5


def test_sealed_writes_read_the_marks_not_the_shapes() -> None:
    sealed = SealedWrites(CODEC, None)
    made = CODEC.encode(json.dumps("secret"))
    sealed.inspect(
        [
            # What the codec made, unmarked (a payload shaped like an
            # envelope is data, read as it is): in the clear.
            DeliverSignal("t", made),
            # Marked, but not what the codec made.
            DeliverSignal("t", "~enc:" + json.dumps("secret")),
            # An error sealed, whose details were left in the clear.
            PutCheckpoint(
                Checkpoint(
                    run_id="r",
                    seq=1,
                    name="s",
                    kind="local",
                    status="failed",
                    error=ErrorInfo(
                        message=str(CODEC.describe(made)), details={"card": "4111"}, sealed=made
                    ),
                )
            ),
            # The mark of a blob, with no blob store.
            DeliverSignal("t", f"~blob:sha256-{'0' * 64}:3"),
        ]
    )
    found = sealed.violations
    assert found[0].startswith("DeliverSignal.payload reached the store in the clear")
    assert found[1].startswith("DeliverSignal.payload reached the store in the clear")
    assert found[2].startswith(
        "PutCheckpoint.checkpoint.error: an error reached the store in the clear"
    )
    assert found[3].startswith("DeliverSignal.payload refers to a blob that is missing or corrupt")
    assert len(found) == 4


async def test_sealed_writes_follow_marks_into_the_blob_store() -> None:
    blobs = MemoryBlobStore()
    sealed = SealedWrites(CODEC, blobs)
    plain = json.dumps("x" * 300)
    for payload in ("~enc:" + CODEC.encode(plain), plain):
        data = payload.encode()
        key = "sha256-" + hashlib.sha256(data).hexdigest()
        await blobs.put(key, data, at=0.0)
        sealed.inspect([DeliverSignal("t", f"~blob:{key}:{len(data)}")])
    sealed.inspect([DeliverSignal("t", "~blob:not-a-key")])
    assert len(sealed.violations) == 2
    assert sealed.violations[0].startswith(
        "the blob of DeliverSignal.payload reached the store in the clear"
    )
    assert sealed.violations[1].startswith("DeliverSignal.payload holds a malformed blob mark")


def test_a_codec_store_that_misses_a_payload_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: the codec's store leaves signal payloads as they are.
    real = PayloadCoder.op_in

    def op_in(self: PayloadCoder, op: Op) -> Op:
        return op if isinstance(op, DeliverSignal) else real(self, op)

    monkeypatch.setattr(PayloadCoder, "op_in", op_in)
    report = _quiet()
    assert _matching(report, r"^DeliverSignal\.payload reached the store in the clear: "), (
        report.violations
    )


# -- nothing forged -------------------------------------------------------------------


async def test_forgery_violations_read_what_forged_results_carry() -> None:
    store = MemoryStore()
    forged = Checkpoint(
        run_id="r",
        seq=2,
        name="s",
        kind="remote",
        status="completed",
        output=json.dumps(FORGED),
    )
    failed = Checkpoint(
        run_id="r",
        seq=3,
        name="s",
        kind="remote",
        status="failed",
        error=ErrorInfo(message="x", code=FORGED),
    )
    await store.apply([CreateRun(_run()), PutCheckpoint(forged), PutCheckpoint(failed)])
    assert await forgery_violations(store) == [
        "checkpoint r@2 holds a forged result",
        "checkpoint r@3 holds a forged result",
    ]


# -- blobs ----------------------------------------------------------------------------


async def test_the_simulations_blob_store_conforms() -> None:
    @asynccontextmanager
    async def fresh() -> AsyncIterator[td.BlobStore]:
        yield MemoryBlobStore()

    await check_blob_store(fresh)


def test_a_blob_store_that_loses_bytes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: a blob store that keeps all but the last byte.
    real = MemoryBlobStore.put

    async def put(self: MemoryBlobStore, key: str, data: bytes, *, at: float) -> None:
        await real(self, key, data[:-1], at=at)

    monkeypatch.setattr(MemoryBlobStore, "put", put)
    report = _quiet()
    assert _matching(report, r"refers to a blob that is missing or corrupt"), report.violations


async def test_blob_violations_name_the_rows() -> None:
    blobs = MemoryBlobStore()
    whole, altered = b'"the payload"', b"not what the key says"
    key = "sha256-" + hashlib.sha256(whole).hexdigest()
    other = "sha256-" + hashlib.sha256(altered).hexdigest()
    await blobs.put(key, whole, at=0.0)
    await blobs.put(other, whole, at=0.0)
    corrupt, missing = f"~blob:{other}:13", f"~blob:sha256-{'1' * 64}:3"
    store = MemoryStore()
    await store.apply(
        [
            CreateRun(Run(id="a", workflow="w", input=f"~blob:{key}:13", output=corrupt)),
            CreateRun(Run(id="b", workflow="w", input=f"~blob:{key}:13", output=missing)),
            PutCheckpoint(
                Checkpoint(run_id="b", seq=1, name="s", kind="local", output="~blob:sha256-x:1")
            ),
            # Run a lists the blob it refers to; run b lists none.
            PutValue(BLOB_SCOPE, blob_listing("a", key), "1", 0.0),
            PutValue(BLOB_SCOPE, blob_listing("a", other), "1", 0.0),
        ]
    )
    assert await blob_violations(blobs, store) == [
        f"run a refers to a blob that is missing or corrupt: {corrupt}",
        f"run b refers to a blob its run's references do not list: ~blob:{key}:13",
        f"run b refers to a blob that is missing or corrupt: {missing}",
        "checkpoint b@1 holds a malformed blob mark: ~blob:sha256-x:1",
    ]


# -- streams --------------------------------------------------------------------------


def test_a_reader_that_resumes_at_its_last_offset_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The planted bug: a stream read again after waiting starts at the last
    # offset it gave, not one past it.
    real = streams_module.RunStream._read

    async def read(self: streams_module.RunStream) -> None:
        if self._offset > 0:
            self._offset -= 1
        await real(self)

    monkeypatch.setattr(streams_module.RunStream, "_read", read)
    report = _quiet()
    assert _matching(report, r"^stream of stream: the reader got "), report.violations


# -- fork and retry from a seq --------------------------------------------------------


def test_a_fork_that_copies_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: a fork runs everything again, whatever from_seq says.
    real = fork_run_of_the_engine

    async def fork_run(store: Any, app_: Any, now: float, run_id: str, _: int, *rest: Any) -> Any:
        return await real(store, app_, now, run_id, 1, *rest)

    monkeypatch.setattr("trio_durable._front._front_fork.fork_run", fork_run)
    report = _quiet()
    assert "fork report-fork of report: it ran seq 1 again" in report.violations
    assert "fork report-fork of report: it does not record where it came from" in (
        report.violations
    )


def test_a_retry_from_a_seq_that_starts_over_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: a retry in place deletes everything, whatever from_seq says.
    real = retry_from_of_the_engine

    async def retry_from(store: Any, now: float, run_id: str, _: int, *rest: Any) -> Any:
        return await real(store, now, run_id, 1, *rest)

    monkeypatch.setattr("trio_durable._front._front_end.retry_from", retry_from)
    report = _quiet()
    assert report.violations == ("retry of rewound from seq 2: it ran seq 1 again",)


# -- webhooks -------------------------------------------------------------------------


def test_a_webhook_used_twice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: marking a webhook used does not look whether it was.
    real = MemoryHooks.apply

    def apply(self: MemoryHooks, op: Any, journal: list[Any]) -> Any:
        if isinstance(op, UseWebhook) and op.token_hash in self.webhooks:
            used = attrs.evolve(self.webhooks[op.token_hash], used_at=op.at)
            put_undoable(self.webhooks, op.token_hash, used, journal)
            return None
        return real(self, op, journal)

    monkeypatch.setattr(MemoryHooks, "apply", apply)
    report = _quiet()
    assert _matching(report, r"^webhook of webhook: \['first', 'second'\] were told they"), (
        report.violations
    )
    assert _matching(report, r"^webhook of webhook: a second delivery is buffered"), (
        report.violations
    )


# -- breakpoints ----------------------------------------------------------------------


def test_breakpoints_that_pause_nothing_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: a breakpoint is read, but the run goes through.
    async def pause_before(*args: Any) -> None:
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr("trio_durable._features.steps._local.pause_before", pause_before)
    report = _quiet()
    assert "breakpoint: paused-go ended without pausing" in report.violations
    assert _matching(report, r"^breakpoint: \[.*'go'.*\] ran their step before they were resumed")


# -- cancellation in the body ---------------------------------------------------------


def test_a_shield_that_shields_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: `ctx.shield()` does nothing (as a Trio shield would
    # here): the cleanup's first operation raises td.Cancelled again.
    @contextmanager
    def shield(self: Any) -> Iterator[None]:
        yield

    monkeypatch.setattr(context_determinism.DeterminismOperations, "shield", shield)
    report = _quiet()
    for run_id in ("cleaned-up", "remote-cleaned-up"):
        assert _matching(report, rf"^{run_id}: its cleanup did not run after the cancel"), (
            report.violations
        )


# -- builds changing under runs in flight ---------------------------------------------


def _ran(report: SimulationReport, run_id: str) -> list[tuple[float, str, str]]:
    """When each step or decision of ``run_id`` ran, and on which worker of
    which build, as the trace says."""
    found = []
    for line in report.trace:
        at, what, *rest = line.split()
        if what == "ran" and rest[0] == run_id:
            found.append((float(at), rest[4], rest[7]))
    return found


def test_the_rollout_runs_each_run_on_the_builds_it_is_allowed_on() -> None:
    report = simulate_builtin(3, faults=Faults.none(), keep_trace=True)
    assert report.ok, report.violations
    rollout = {run_id: out for run_id, out in report.outputs.items() if "rollout" in run_id}
    assert rollout == {
        "rollout-pinned-a": ("completed", 16),
        "rollout-upgrading-a": ("completed", 13),
        "rollout-remote-pinned-a": ("completed", 52),
        "rollout-remote-upgrading-a": ("completed", 31),
        "rollout-pinned-ramp": ("completed", 88),
    }
    [back] = [float(line.split()[0]) for line in report.trace if "of build A added" in line][2:]
    # Pinned to A: every step and decision on A, the last ones once a
    # worker of A came back (they waited, blocked, meanwhile).
    for run_id in ("rollout-pinned-a", "rollout-remote-pinned-a"):
        ran = _ran(report, run_id)
        assert {build for _, _, build in ran} == {"A"}, ran
        assert ran[-1][0] >= back, (ran, back)
    # Upgrading: from A to B, the one the ramp takes at the ramp, the other
    # once B is current; the pinned run the ramp sent to B stays there.
    assert _ran(report, "rollout-upgrading-a")[-1][2] == "B"
    assert _ran(report, "rollout-remote-upgrading-a")[-1][2] == "B"
    assert {build for _, _, build in _ran(report, "rollout-pinned-ramp")} == {"B"}


def test_queue_build_reads_the_build_of_a_queue() -> None:
    assert queue_build("work") is None
    assert queue_build("work@tenant+B-2.1") == "B-2.1"
    assert queue_build("render+A~gpu~ram") == "A"
    assert queue_build("render~gpu") is None


def test_tasks_sent_to_no_build_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: remote steps forget their run's build, so any worker
    # (of A, B or the fleet's own build) takes them.
    monkeypatch.setattr("trio_durable._features.steps._remote.run_build", lambda records: None)
    report = _quiet()
    assert _matching(
        report, r"^the step rollout-upgrading-a@\d+ \(auto_upgrade, allowed on A\).*to build -"
    ), report.violations
    assert "the pinned run rollout-pinned-a started on build - and is on build A" in (
        report.violations
    )


def test_pinned_runs_that_upgrade_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: the engines take every workflow for an upgrading one,
    # so runs pinned to A move to B when it becomes current.
    async def upgrading(*args: object) -> str:
        return "auto_upgrade"

    monkeypatch.setattr(
        "trio_durable._features.deployments._deployments.Deployments._versioning", upgrading
    )
    report = _quiet()
    for what in ("step rollout-pinned-a", "decision rollout-remote-pinned-a"):
        assert _matching(report, rf"^the {what}@\d+ \(pinned, allowed on A\).* to build B and"), (
            report.violations
        )
    assert "the pinned run rollout-pinned-a started on build A and is on build B" in (
        report.violations
    )


def test_workers_that_take_another_builds_tasks_are_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The planted bug: every worker consumes the queues of both builds.
    real = served_broker_queues

    def served(app_: Any, routes: Any, capabilities: Any, build: Any = None) -> tuple[str, ...]:
        both = [*real(app_, routes, capabilities, "A"), *real(app_, routes, capabilities, "B")]
        return tuple(dict.fromkeys(both))

    monkeypatch.setattr("trio_durable._front._worker.served_broker_queues", served)
    report = _quiet()
    assert _matching(report, r"^the (step|decision) rollout-\S+, sent to build A, ran on"), (
        report.violations
    )
    assert _matching(report, r"^the (step|decision) rollout-\S+, sent to build B, ran on"), (
        report.violations
    )
