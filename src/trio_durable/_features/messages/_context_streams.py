"""`Context.emit`: appending to the run's durable stream (see `_streams`).

`Context` inherits it from `StreamOperations`. Offsets are counted in the
order the body emits, which replays identically, so the n-th emit of every
replay is offset n; what the stream's head says is already stored is not
written again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

from ..._base import _serde
from ..._base._current import current_step
from ..._base._exceptions import UsageError
from ..._base._run_records import value_record
from ..._kernel._hooks import Feature
from ..._kernel._replay import Replay
from ..._stores._ops import Op
from ..._stores._record_ops import PutRecord
from ._streams import STREAM_HEAD, stream_announce, value_write

if TYPE_CHECKING:
    from ..._wire._decision_wire import Decision


class StreamOperations:
    """The stream operation of `Context` (see `Context`)."""

    _replay: Replay
    # Per body (one `Context` per turn): the offset the next emit takes,
    # how many values the run had stored when this turn read it (None
    # until the first emit reads the head), and the head's write in the
    # turn's operations (with the announcement), after its every value.
    _stream_next: int = 0
    _stream_stored: int | None = None
    _stream_tail: list[tuple[int, Op]] = []  # noqa: RUF012 (replaced, never changed)

    def emit(self, value: Any) -> None:
        """Append ``value`` to the run's durable stream, at the next offset.

        Readers get it with `Engine.stream` or `Client.stream`. It is
        written with the turn's checkpoints, so it becomes readable when the
        turn commits: at the body's next durable wait (a remote step, a
        sleep, a signal, a child) or its end; local steps alone do not end a
        turn. A replay does not emit again what was stored: each offset is
        written once (docs/streaming.md).

        Args:
          value: A JSON-able value or an attrs instance.

        Raises:
          SerializationError: ``value`` cannot be serialized; nothing is
            emitted and the offset is not taken.
          UsageError: It was called inside a step.
        """
        try:
            step = current_step()
        except UsageError:
            pass
        else:
            raise UsageError(
                f"emit was called inside step {step.step!r}; call it from the workflow body"
            )
        replay = self._replay
        turn = replay.turn
        if turn.nondeterminism is not None:
            # Replay diverged: the run fails and records nothing more.
            raise turn.nondeterminism
        value_json = _serde.dumps(value)
        offset = self._stream_next
        self._stream_next += 1
        if self._stream_stored is None:
            head = turn.records.get(STREAM_HEAD)
            self._stream_stored = 0 if head is None else int(json.loads(head.output or "0"))
        if offset < self._stream_stored:
            return  # replayed: stored by an earlier turn
        if replay.decider.carry_value(offset, value_json):
            return  # a worker's decision carries it to the engine
        rt = replay.runtime
        run, now = turn.run, rt.clock.now()
        put = value_write(run.id, offset, value_json, now)
        head_op = PutRecord(value_record(run.id, STREAM_HEAD, str(offset + 1), now))
        # The head and the announcement stay after every value of the turn,
        # written once: a write in chunks must not store a head before its
        # values, nor announce before the last of them. So this value takes
        # the first of their places, they move one on, and one op is added.
        tail = [head_op, *stream_announce(rt.store, rt.engine_id, run)]
        ops = turn.ops
        places = self._stream_tail
        if len(places) == len(tail) and all(i < len(ops) and ops[i] is op for i, op in places):
            for (i, _), op in zip(places, [put, *tail], strict=False):
                ops[i] = op
            ops.append(tail[-1])
            moved = [i for i, _ in places[1:]] + [len(ops) - 1]
        else:
            ops.append(put)
            ops.extend(tail)
            moved = list(range(len(ops) - len(tail), len(ops)))
        self._stream_tail = list(zip(moved, tail, strict=True))


def write_emitted(replay: Replay, values: Sequence[tuple[int, str]]) -> None:
    """Write the values a remote workflow's body emitted on a worker
    (``(offset, value as JSON text)``, from its decision) as `emit` writes a
    local body's: those past the stream's stored head, then the head and the
    announcement, with the turn's other writes."""
    turn = replay.turn
    head = turn.records.get(STREAM_HEAD)
    stored = 0 if head is None else int(json.loads(head.output or "0"))
    fresh = [(offset, value) for offset, value in values if offset >= stored]
    if not fresh:
        return
    rt = replay.engine
    run, now = turn.run, rt.clock.now()
    turn.ops.extend(value_write(run.id, offset, value, now) for offset, value in fresh)
    turn.put_record(
        value_record(run.id, STREAM_HEAD, str(max(offset for offset, _ in fresh) + 1), now)
    )
    turn.ops.extend(stream_announce(rt.store, rt.engine_id, run))


@final
class EmittedValues(Feature):
    """The values a remote workflow's body emitted on a worker, written
    with the turn that applies its decision."""

    def decided(self, replay: Replay, decision: Decision, *, cancelled: bool) -> None:
        write_emitted(replay, decision.stream)
