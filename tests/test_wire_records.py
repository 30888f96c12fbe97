"""The run records a worker reads or writes travel in a decision task's
history (and in a decision's local checkpoints) as completed ``local``
entries at the seqs the releases before kept them at, so that engines and
workers of either release read each other (docs/remote-workflows.md,
rolling upgrades)."""

from __future__ import annotations

from trio_durable._base._records import Checkpoint, Run
from trio_durable._base._run_records import RunRecord, value_record
from trio_durable._wire._decision_wire import history, read_request, request_input
from trio_durable._wire._wire_records import is_record_on_wire, record_off_wire, records_on_wire

RUN = Run(id="r", workflow="w", input="[]")


def test_a_history_carries_the_records_a_worker_reads_at_their_earlier_seqs() -> None:
    step = Checkpoint(run_id="r", seq=1, name="s", kind="local", status="completed", output="1")
    delivered = value_record("r", "cancelled_at", "2", 5.0)
    checked = value_record("r", "checked_from", "1", 4.0)
    head = value_record("r", "stream", "3", 6.0)
    log = RunRecord(run_id="r", kind="updates", output="[]")
    # A record no worker reads stays out of the history.
    deadline = RunRecord(run_id="r", kind="deadline", status="pending", wake_at=9.0)
    carried = history([step], [delivered, deadline, checked, head, log])
    # Each as the release before wrote it: its seq, name and kind.
    assert [(cp.seq, cp.name, cp.kind, cp.status, cp.output) for cp in carried] == [
        (1, "s", "local", "completed", "1"),
        (999_999_960, "stream", "local", "completed", "3"),
        (999_999_970, "updates", "signal", "completed", "[]"),
        (999_999_980, "check_arguments", "local", "completed", "1"),
        (999_999_981, "cancelled_at", "local", "completed", "2"),
    ]
    # A worker reads them back as records, apart from the body's checkpoints.
    request = read_request("r", request_input(RUN, carried, {}))
    assert list(request.checkpoints) == [1]
    assert request.records == {
        "stream": head,
        "updates": log,
        "checked_from": checked,
        "cancelled_at": delivered,
    }


def test_an_entry_of_the_releases_before_reads_as_a_record() -> None:
    # What an engine or a worker of the release before writes: a completed
    # local checkpoint at the seq, named as that release named it.
    earlier = Checkpoint(
        run_id="r",
        seq=999_999_980,
        name="check_arguments",
        kind="local",
        status="completed",
        output="3",
        finished_at=1.0,
    )
    assert is_record_on_wire(earlier)
    assert record_off_wire(earlier) == RunRecord(
        run_id="r", kind="checked_from", output="3", finished_at=1.0
    )
    assert not is_record_on_wire(
        Checkpoint(run_id="r", seq=5, name="s", kind="local", status="completed")
    )
    [back] = records_on_wire([record_off_wire(earlier)])
    assert (back.seq, back.output, back.finished_at) == (999_999_980, "3", 1.0)
