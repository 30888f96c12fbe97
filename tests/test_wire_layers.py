"""The layers an engine's tasks and results pass through (`_wire_layers`):
tasks go through them outermost first, results innermost first; a task a
layer leaves out is reported with the layer's reason; the seal of a signed
engine's messages is checked before a result is read."""

from __future__ import annotations

import attrs
import pytest

import trio_durable as td
from trio_durable._wire._layers import UNREADABLE, WireLayers, engine_layers
from trio_durable._wire._messages import Result, Task, WireError
from trio_durable._wire._signing import SignatureRejected
from trio_durable._wire._tracing import DISABLED


def _task(seq: int) -> Task:
    return Task(run_id="r", seq=seq, attempt=1, step="s", workflow="w", route="g", input="[1]")


def _result(seq: int) -> Result:
    return Result(
        run_id="r", seq=seq, attempt=1, step="s", workflow="w", status="completed", output="1"
    )


@attrs.define
class Marking:
    """Appends its name to each task's input and result's output; leaves out
    the tasks whose seq it is told to."""

    name: str
    seen: list[str]
    leave_out: frozenset[int] = frozenset()

    async def outgoing(self, tasks: list[Task]) -> tuple[list[Task], str]:
        self.seen.append(f"{self.name} out")
        kept = [
            attrs.evolve(t, input=f"{t.input}+{self.name}")
            for t in tasks
            if t.seq not in self.leave_out
        ]
        return kept, f"{self.name} refused" if len(kept) < len(tasks) else ""

    async def incoming(self, results: list[Result]) -> list[Result]:
        self.seen.append(f"{self.name} in")
        return [attrs.evolve(r, output=f"{r.output}+{self.name}") for r in results]

    def settled(self, result: Result) -> None:
        self.seen.append(f"{self.name} settled {result.seq}")


async def test_tasks_go_out_through_the_layers_in_order_and_results_come_back_reversed() -> None:
    seen: list[str] = []
    layers = WireLayers(
        [Marking("outer", seen), Marking("inner", seen, leave_out=frozenset({2}))], None
    )
    sent, left_out, reason = await layers.outgoing([_task(1), _task(2), _task(3)])
    assert [t.input for t in sent] == ["[1]+outer+inner", "[1]+outer+inner"]
    assert [t.seq for t in sent] == [1, 3]
    # What is left out is the task as the dispatcher gave it.
    assert left_out == [_task(2)]
    assert reason == "inner refused"
    results = await layers.incoming([_result(1)])
    assert [r.output for r in results] == ["1+inner+outer"]
    layers.settled(_result(1))
    assert seen == [
        "outer out",
        "inner out",
        "inner in",
        "outer in",
        "outer settled 1",
        "inner settled 1",
    ]


async def test_no_layer_sends_everything_as_it_is() -> None:
    layers = engine_layers(DISABLED, None, None)
    tasks = [_task(1), _task(2)]
    assert await layers.outgoing(tasks) == (tasks, [], "")
    assert await layers.incoming([_result(1)]) == [_result(1)]


def test_a_result_is_read_only_once_its_seal_checks() -> None:
    keyring = td.Keyring.single(b"0" * 32)
    signed = WireLayers([], keyring)
    unsigned = WireLayers([], None)
    message = signed.seal("result", _result(1).encode())
    assert signed.open_result(message) == _result(1)
    with pytest.raises(SignatureRejected):
        signed.open_result(_result(1).encode())
    with pytest.raises(SignatureRejected):
        WireLayers([], td.Keyring.single(b"1" * 32, "k2")).open_result(message)
    with pytest.raises(WireError):
        unsigned.open_result(b"not a result")
    assert issubclass(SignatureRejected, UNREADABLE)
    assert issubclass(WireError, UNREADABLE)
