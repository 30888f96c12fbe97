"""The wire: decoders are total, and hostile messages are rejected, counted
and never crash a worker or an engine.

Property-based tests (Hypothesis) feed every decoder arbitrary bytes,
arbitrary JSON (deep nesting, huge and non-finite numbers, lone surrogates)
and valid messages with fields replaced by such values: each body either
decodes into a valid, in-range message, or raises `WireError`, and nothing
else. Then the same bodies go to a live engine and worker over the memory
broker: each is processed or rejected and counted, the queues end empty, and
both go on working.

Importing Hypothesis (pytest-trio does so at start-up, whenever it is
installed) switches Trio's deterministic-scheduling flag on for the whole
test process, through Trio's Hypothesis plugin. Nothing else in the suite
depends on the flag being off: the simulation tests (tests/test_simulation.py)
set and seed it themselves inside `deterministic_scheduling`, which restores
it after, and `test_trio_scheduling_follows_the_seed` checks that unseeded
runs still vary. Both pass with this module collected in the same process
(the full suite runs them together).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trio_durable as td
from hostile import (
    HUGE,
    item_one_results,
    item_one_tasks,
    nested,
    valid_result,
    valid_task,
    with_raw,
)
from prometheus_samples import sample
from trio_durable._base import _serde
from trio_durable._base._nesting import MAX_NESTING
from trio_durable._brokers._base import RESULTS, Outgoing, is_broker_safe
from trio_durable._front._worker import Worker
from trio_durable._stores import open_store
from trio_durable._stores._ops import SettleCheckpoint
from trio_durable._wire._messages import (
    MAX_ATTEMPT,
    MAX_PRIORITY,
    MAX_SECONDS,
    MAX_SEQ,
    MAX_TRACESTATE,
    WIRE_VERSION,
    Result,
    Task,
    WireError,
)

ROUTE: Final = "g"

# -- strategies ---------------------------------------------------------------

_RAW_NUMBERS = st.sampled_from(
    [
        "1e400",
        "-1e400",
        "1e-400",
        HUGE,
        "-" + HUGE,
        "9" * 5000,
        "NaN",
        "Infinity",
        "-Infinity",
        "-0",
        "0",
        "-1",
        "1.5",
        str(2**31 - 1),
        str(2**31),
        str(2**63 - 1),
        str(2**63),
        str(2**80),
        "9007199254740993",
    ]
)
_SCALARS = st.one_of(
    _RAW_NUMBERS,
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.just("null"),
    # json.dumps writes a lone surrogate as an escape, which parses back
    # into one: strings no UTF-8 encoder can write.
    st.text(max_size=12).map(json.dumps),
    st.sampled_from(["a\\u0000b", "\\ud800", "trio_durable.results.x", "amq.x", ""]).map(
        lambda s: f'"{s}"'
    ),
    st.integers(1, 1500).map(nested),
)
RAW_JSON = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.dictionaries(st.text(max_size=6), children, max_size=4).map(
            lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=12,
)
"""Any JSON text, and JSON-like text Python's `json` reads (NaN, Infinity)."""

_EXTRA_KEYS: Final = [
    "reply_to",
    "error_type",
    "traceback",
    "traceparent",
    "tracestate",
    "unknown",
]


@st.composite
def _altered(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """``base`` with a few fields deleted or replaced by arbitrary JSON."""
    fields = dict(base)
    raw: dict[str, str] = {}
    keys = draw(st.lists(st.sampled_from(sorted(base) + _EXTRA_KEYS), unique=True, max_size=4))
    for key in keys:
        fields.pop(key, None)
        if draw(st.booleans()):
            raw[key] = draw(RAW_JSON)
    return with_raw(fields, **raw)


def bodies(base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """Message bodies: bytes, JSON, and altered valid messages."""
    return st.one_of(
        st.binary(max_size=64),
        RAW_JSON.map(str.encode),
        _altered(base),
        st.just(with_raw(base)),
    )


TASK_BODIES = bodies(valid_task(route=ROUTE))
RESULT_BODIES = bodies(valid_result())

# -- what a decoded message must be -------------------------------------------


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in {text[:80]!r}")

    return json.loads(text, parse_constant=refuse)


def _check_name(value: str, *, empty: bool = False) -> None:
    assert isinstance(value, str)
    assert empty or value
    assert "\x00" not in value
    value.encode()  # no lone surrogate


def _check_common(message: Task | Result) -> None:
    _check_name(message.run_id)
    _check_name(message.step)
    _check_name(message.workflow, empty=True)
    assert type(message.seq) is int
    assert 1 <= message.seq <= MAX_SEQ
    assert type(message.attempt) is int
    assert 1 <= message.attempt <= MAX_ATTEMPT
    if message.queue is not None:
        _check_name(message.queue)


def _check_time(value: float, *, positive: bool = False) -> None:
    assert type(value) in (int, float)
    assert math.isfinite(value)
    assert value > 0 if positive else value >= 0
    assert value <= MAX_SECONDS


def check_task(task: Task) -> None:
    _check_common(task)
    _check_name(task.route)
    assert isinstance(_strict_json(task.input), list)
    if task.timeout is not None:
        _check_time(task.timeout, positive=True)
    _check_time(task.dispatched_at)
    assert type(task.priority) is int
    assert 0 <= task.priority <= MAX_PRIORITY
    prefix, _, scope = task.reply_to.partition(RESULTS + ".")
    assert task.reply_to == RESULTS or (prefix == "" and is_broker_safe(scope))
    if task.traceparent is None:
        assert task.tracestate is None
    else:
        assert re.fullmatch(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", task.traceparent)
    if task.tracestate is not None:
        assert 1 <= len(task.tracestate) <= MAX_TRACESTATE
        assert task.tracestate.isascii()
        assert task.tracestate.isprintable()
    assert Task.decode(task.encode()) == task


def check_result(result: Result) -> None:
    _check_common(result)
    assert result.status in ("completed", "failed")
    if result.status == "completed":
        assert result.output is not None
        _strict_json(result.output)
    else:
        assert result.output is None
    _strict_json(json.dumps(result.details))
    assert isinstance(result.retryable, bool)
    _check_time(result.started_at)
    _check_time(result.finished_at)
    _check_name(result.worker, empty=True)
    for text in (result.error, result.code, result.error_type, result.traceback):
        assert text is None or isinstance(text, str)
        if text is not None:
            text.encode()
    assert Result.decode(result.encode()) == result


# -- the decoders are total ---------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(body=TASK_BODIES)
def test_a_task_body_decodes_into_a_valid_task_or_raises_wire_error(body: bytes) -> None:
    try:
        task = Task.decode(body)
    except WireError:
        return
    check_task(task)


@settings(max_examples=400, deadline=None)
@given(body=RESULT_BODIES)
def test_a_result_body_decodes_into_a_valid_result_or_raises_wire_error(body: bytes) -> None:
    try:
        result = Result.decode(body)
    except WireError:
        return
    check_result(result)


@pytest.mark.parametrize("body", item_one_tasks(ROUTE), ids=repr)
def test_the_hostile_tasks_of_item_one_are_rejected(body: bytes) -> None:
    with pytest.raises(WireError, match="not a task"):
        Task.decode(body)


@pytest.mark.parametrize("body", item_one_results(), ids=repr)
def test_the_hostile_results_of_item_one_are_rejected(body: bytes) -> None:
    with pytest.raises(WireError, match="not a result"):
        Result.decode(body)


def test_a_message_nested_a_thousand_levels_in_two_kilobytes_is_rejected() -> None:
    body = with_raw(valid_result(), output=nested(1000))
    assert len(body) < 2300
    with pytest.raises(WireError, match=r"nested too deeply|nests more than") as caught:
        Result.decode(body)
    # Raised by the decoder's own check, not a RecursionError wrapped.
    assert caught.value.__cause__ is None


def test_payloads_nest_up_to_the_limit() -> None:
    limit = MAX_NESTING
    at_limit = with_raw(valid_result(), output=nested(limit), details=nested(limit))
    assert Result.decode(at_limit).output == nested(limit)
    over = with_raw(valid_result(), output=nested(limit + 1))
    with pytest.raises(WireError, match=f"nests more than {limit} levels"):
        Result.decode(over)
    deep_input = with_raw(valid_task(route=ROUTE), input=nested(limit + 1))
    with pytest.raises(WireError, match="input nests"):
        Task.decode(deep_input)
    # What the engine and workers send is held to the same limit.
    value: Any = []
    for _ in range(limit):
        value = [value]
    with pytest.raises(td.SerializationError, match=f"more than {limit} levels"):
        _serde.dumps(value)
    assert _serde.dumps(value[0]) == nested(limit)


def test_valid_messages_decode_as_sent() -> None:
    task = Task.decode(with_raw(valid_task(route=ROUTE), timeout="30", priority="9"))
    assert (task.timeout, task.priority, task.reply_to) == (30, 9, RESULTS)
    assert type(task.timeout) is int
    scoped = Task.decode(with_raw({**valid_task(route=ROUTE), "reply_to": RESULTS + ".sqlite-ab"}))
    assert scoped.reply_to == RESULTS + ".sqlite-ab"
    failed = Result(
        run_id="r",
        seq=3,
        attempt=2,
        step="act",
        workflow="w",
        status="failed",
        error="boom",
        code="E",
        details={"n": [1, 2.5]},
        retryable=False,
        error_type="KeyError",
        traceback="Traceback (most recent call last):\n...\nKeyError: 'missing'\n",
    )
    assert Result.decode(failed.encode()) == failed
    assert Result.decode(failed.encode()).traceback == failed.traceback


TRACEPARENT: Final = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_task_carries_its_trace_context_and_older_tasks_decode_without() -> None:
    traced = Task.decode(
        with_raw({**valid_task(route=ROUTE), "traceparent": TRACEPARENT, "tracestate": "k=v"})
    )
    assert (traced.traceparent, traced.tracestate) == (TRACEPARENT, "k=v")
    assert Task.decode(traced.encode()) == traced
    # Sent by an engine without tracing (or before it existed): absent, and
    # an untraced task encodes without the keys, as it did before.
    plain = Task.decode(with_raw(valid_task(route=ROUTE)))
    assert (plain.traceparent, plain.tracestate) == (None, None)
    assert b"trace" not in plain.encode()


@pytest.mark.parametrize(
    ("traceparent", "tracestate", "kept"),
    [
        (TRACEPARENT.upper(), '"k=v"', (None, None)),
        ("ff" + TRACEPARENT[2:], None, (None, None)),
        ("00-" + "0" * 32 + TRACEPARENT[35:], None, (None, None)),
        (TRACEPARENT[:36] + "0" * 16 + "-01", None, (None, None)),
        (TRACEPARENT + "-extra", None, (None, None)),
        ("x" * 10_000_000, '"k=v"', (None, None)),
        (["00"], None, (None, None)),
        ({"a": 1}, None, (None, None)),
        (55, None, (None, None)),
        (None, '"k=v"', (None, None)),
        (TRACEPARENT, '"k=\\u0000v"', (TRACEPARENT, None)),
        (TRACEPARENT, '"k=\\u00e9"', (TRACEPARENT, None)),
        (TRACEPARENT, '"\\ud800"', (TRACEPARENT, None)),
        (TRACEPARENT, json.dumps("k=" + "v" * MAX_TRACESTATE), (TRACEPARENT, None)),
        (TRACEPARENT, "7", (TRACEPARENT, None)),
        (TRACEPARENT, '""', (TRACEPARENT, None)),
    ],
    ids=lambda value: repr(value)[:60],
)
def test_a_bad_trace_context_is_ignored_and_the_task_still_runs(
    traceparent: Any, tracestate: str | None, kept: tuple[str | None, str | None]
) -> None:
    # As the W3C recommendation says of an invalid traceparent: ignored,
    # never a reason to refuse the task (tracing must not fail a step).
    raw = {"traceparent": json.dumps(traceparent)}
    if tracestate is not None:
        raw["tracestate"] = tracestate
    task = Task.decode(with_raw(valid_task(route=ROUTE), **raw))
    assert (task.traceparent, task.tracestate) == kept
    check_task(task)


def test_results_of_older_workers_and_unknown_fields_still_decode() -> None:
    # A worker of the version before error_type and traceback existed; and
    # one of a later version that adds a field: the same wire version.
    old = valid_result()
    assert "error_type" not in old
    decoded = Result.decode(with_raw({**old, "later": {"x": 1}}))
    assert (decoded.error_type, decoded.traceback, decoded.output) == (None, None, "1")
    assert json.loads(decoded.encode())["v"] == WIRE_VERSION


def test_free_text_with_a_lone_surrogate_is_kept_writable() -> None:
    # An error message may hold one (a file name decoded with
    # surrogateescape): the result is kept, its text made writable.
    result = Result.decode(
        with_raw({**valid_result(), "status": "failed"}, error='"no file \\udcff"')
    )
    assert result.error == "no file \ufffd"


# -- live: a worker and an engine over the memory broker ----------------------

app = td.App("wire")


@app.step(group=ROUTE)
async def act(x: int) -> int:
    return x


@app.workflow()
async def use(ctx: td.Context, x: int) -> int:
    return await ctx.step(act, x)


# Messages whose fate is known from how they were made, not from the decoder
# under test: a valid message with valid values, or one broken in a way the
# wire's rules refuse (docs/brokers.md).

_NAMES = st.text("abcdefghijklmnopqrstuvwxyz0123456789-._:", min_size=1, max_size=24)
_NOT_OBJECTS = st.one_of(
    st.binary(max_size=32).map(lambda b: b"\xff" + b),  # never UTF-8
    _SCALARS.map(str.encode),
    st.lists(_SCALARS, max_size=3).map(lambda items: ("[" + ",".join(items) + "]").encode()),
)
_BAD_COMMON = {
    "run_id": ['""', "1", "null", "[]", '"a\\u0000b"', '"\\ud800"'],
    "seq": ["0", "-1", str(MAX_SEQ + 1), '"1"', "1.5", "null", "true", "NaN"],
    "attempt": ["0", str(MAX_ATTEMPT + 1), '"1"', "null"],
    "step": ['""', "7", "null", "{}"],
}


@st.composite
def _known_good_task(draw: st.DrawFn) -> bytes:
    task = valid_task(route=ROUTE, run_id=draw(_NAMES), seq=draw(st.integers(1, MAX_SEQ)))
    task["attempt"] = draw(st.integers(1, MAX_ATTEMPT))
    task["input"] = [draw(st.integers(-(2**31), 2**31))]
    task["priority"] = draw(st.integers(0, MAX_PRIORITY))
    return with_raw(task)


@st.composite
def _known_bad_task(draw: st.DrawFn) -> bytes:
    task = valid_task(route=ROUTE, run_id=draw(_NAMES))
    bad = {
        **_BAD_COMMON,
        "route": ['""', "1", "null"],
        "input": ['{"a":1}', '"x"', "1", "null", "[NaN]", nested(1000)],
        "priority": ["-1", str(MAX_PRIORITY + 1), '"5"', "1e400"],
        "dispatched_at": ["-1", "Infinity", HUGE, '"now"'],
    }
    how = draw(st.sampled_from(["not an object", "missing", *sorted(bad)]))
    if how == "not an object":
        return draw(_NOT_OBJECTS)
    if how == "missing":
        del task[draw(st.sampled_from(["run_id", "seq", "attempt", "step", "route", "input"]))]
        return with_raw(task)
    return with_raw(task, **{how: draw(st.sampled_from(bad[how]))})


@st.composite
def _known_good_result(draw: st.DrawFn) -> bytes:
    result = valid_result(run_id=draw(_NAMES), seq=draw(st.integers(1, MAX_SEQ)))
    result["attempt"] = draw(st.integers(1, MAX_ATTEMPT))
    result["output"] = draw(st.integers(-(2**31), 2**31))
    result["retryable"] = draw(st.booleans())
    return with_raw(result)


@st.composite
def _known_bad_result(draw: st.DrawFn) -> bytes:
    result = valid_result(run_id=draw(_NAMES))
    bad = {
        **_BAD_COMMON,
        "status": ['"done"', "1", "null", '"COMPLETED"'],
        "output": ["NaN", "[1,-Infinity]", "1e400", nested(1000)],
        "retryable": ['"yes"', "null", "[]"],
        "started_at": ["-1", "Infinity", HUGE],
    }
    how = draw(st.sampled_from(["not an object", "missing", *sorted(bad)]))
    if how == "not an object":
        return draw(_NOT_OBJECTS)
    if how == "missing":
        del result[draw(st.sampled_from(["run_id", "seq", "attempt", "step", "status"]))]
        return with_raw(result)
    return with_raw(result, **{how: draw(st.sampled_from(bad[how]))})


LABELLED_TASKS = st.one_of(
    _known_good_task().map(lambda body: (body, True)),
    _known_bad_task().map(lambda body: (body, False)),
)
"""Task bodies, each with whether it is a valid task."""
LABELLED_RESULTS = st.one_of(
    _known_good_result().map(lambda body: (body, True)),
    _known_bad_result().map(lambda body: (body, False)),
)
"""Result bodies, each with whether it is a valid result."""


@settings(max_examples=400, deadline=None)
@given(task=LABELLED_TASKS, result=LABELLED_RESULTS)
def test_known_good_messages_decode_and_known_bad_ones_are_rejected(
    task: tuple[bytes, bool], result: tuple[bytes, bool]
) -> None:
    for cls, (body, good) in ((Task, task), (Result, result)):
        if good:
            cls.decode(body)
        else:
            with pytest.raises(WireError):
                cls.decode(body)


def _rejected_metric(metrics: str, kind: str) -> float:
    return sample(metrics, "trio_durable_messages_rejected_total", kind=kind) or 0.0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labelled_tasks=st.lists(LABELLED_TASKS, max_size=6),
    labelled_results=st.lists(LABELLED_RESULTS, max_size=6),
)
async def test_a_live_worker_and_engine_reject_and_count_what_does_not_decode(
    labelled_tasks: list[tuple[bytes, bool]], labelled_results: list[tuple[bytes, bool]]
) -> None:
    # What must be rejected is known from how each body was made, not from
    # the decoders under test.
    tasks = [body for body, _ in labelled_tasks]
    results = [body for body, _ in labelled_results]
    bad_tasks = sum(not good for _, good in labelled_tasks)
    bad_results = sum(not good for _, good in labelled_results)
    broker = td.MemoryBroker()
    async with td.open_engine(app, broker=broker, serve=[ROUTE], seed=0) as engine:
        worker = engine._rt.worker
        assert isinstance(worker, Worker)
        await broker.dispatch(
            [Outgoing(queue=ROUTE, body=body) for body in tasks]
            + [Outgoing(queue=engine.results_queue, body=body) for body in results]
        )
        await engine.drain()
        # Every message was taken off its queue and none came back: the
        # readable ones were processed, the others rejected and counted.
        assert (broker.depth(ROUTE), broker.depth(engine.results_queue)) == (0, 0)
        assert worker.statistics().rejected == bad_tasks
        assert worker.statistics().received == len(tasks)
        assert engine.statistics().rejected == bad_results
        metrics = engine.metrics()
        assert _rejected_metric(metrics, "task") == bad_tasks
        assert _rejected_metric(metrics, "result") == bad_results
        assert _rejected_metric(worker.metrics(), "task") == bad_tasks
        # Both still work.
        run = await engine.start(use, 7, run_id="after")
        assert await engine.result(run.id) == 7


async def test_the_messages_of_item_one_leave_a_worker_and_an_engine_on_sqlite_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = item_one_tasks(ROUTE)
    results = item_one_results()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(
            app, store=f"sqlite:///{tmp_path / 's.db'}", broker=broker, seed=1
        ) as engine,
        td.open_worker(app, broker=broker, groups=[ROUTE]) as worker,
    ):
        # A result in range but for a seq no run has, next to the hostile
        # ones: settled (as nothing), not rejected.
        stray = with_raw(valid_result(seq=MAX_SEQ))
        await broker.dispatch(
            [Outgoing(queue=ROUTE, body=body) for body in tasks]
            + [Outgoing(queue=engine.results_queue, body=body) for body in [*results, stray]]
        )
        await engine.drain()
        # The worker's consumer runs on the Trio thread alone: once every
        # task is blocked, it has taken and rejected them all.
        await trio.testing.wait_all_tasks_blocked()
        assert not worker.busy
        assert (broker.depth(ROUTE), broker.depth(engine.results_queue)) == (0, 0)
        assert worker.statistics().rejected == len(tasks)
        assert engine.statistics().rejected == len(results)
        assert _rejected_metric(worker.metrics(), "task") == len(tasks)
        assert _rejected_metric(engine.metrics(), "result") == len(results)
        run = await engine.start(use, 3, run_id="after")
        assert await engine.result(run.id) == 3
    # Logged once each, with the reason.
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert sum("no valid task" in m for m in logged) == len(tasks)
    assert sum("no valid result" in m for m in logged) == len(results)
    assert any("priority must be from 0 to 9" in m for m in logged)
    assert any("seq must be from 1 to" in m for m in logged)


async def test_a_seq_past_64_bits_is_a_store_error_on_sqlite(tmp_path: Path) -> None:
    # Defence in depth: the decoders keep such a seq from the store, and
    # the store refuses it with its own error if one gets there anyway.
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        with pytest.raises(td.StoreError) as caught:
            await store.apply([SettleCheckpoint("r", 2**80, "completed", "1", None, 0.0)])
        assert isinstance(caught.value.__cause__, OverflowError)
        assert await store.get_run("r") is None


async def test_the_reply_to_check_accepts_the_scoped_results_queue_engines_use(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Engines of a store with a scope send results to their own queue.
    broker = td.MemoryBroker()
    async with td.open_engine(
        app, store=td.MemoryStore(), broker=broker, serve=[ROUTE], seed=2
    ) as engine:
        assert engine.results_queue.startswith(RESULTS + ".")
        run = await engine.start(use, 11, run_id="scoped")
        assert await engine.result(run.id) == 11
        assert engine.statistics().rejected == 0
