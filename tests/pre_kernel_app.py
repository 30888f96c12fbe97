"""The scenario app of the pre-kernel fixtures (`tests/data/pre_kernel/`),
public API only, so that it imports under the release that recorded them
and under every later one.

`tests/record_pre_kernel_stores.py` starts its runs and drives each to a
state that the release before the kernel kept in a reserved seq or in an
error code; `finish` drives every run of a store to its end, in the
recorder (with the recording release's code) and in the tests (with
today's), which compare the outcomes with ``expected.json``. The runs (id:
state when recorded, the seq or code that kept it then):

- ``adm-hold``: holds the slot of concurrency key ``k`` (admission,
  999,999,990, and a ``queue_slots`` row), waits for signal ``go``;
  ``adm-wait``: same key, in line (code ``queued``, a ``queue_waiters``
  row); ``rate-wait``: its workflow's rate limit of 1 per `RATE_PERIOD`
  taken by ``rate-first`` (code ``rate_limited``);
- ``deadline``: timeout `LONG_TIMEOUT`, sleeping `SLEEP` (999,999,991;
  completes); ``deadline-fire``: timeout `SHORT_TIMEOUT`, sleeping `FOREVER`
  (cancelled, code ``timeout``);
- ``chain``: continued as new twice (999,999,992 and 999,999,993);
  ``chain.gen.3`` sleeps;
- ``checked``: ``check_arguments=True``, two steps in (999,999,980);
- ``cleanup``: cancelled, its cleanup sleeping inside ``ctx.shield()``
  (999,999,981);
- ``remote-out``: a remote workflow whose decision task is out, its group
  unserved (999,999,999 pending, code ``out``); ``remote-waits``: decision
  applied, waits on a timer (999,999,999 completed); ``remote-cancel``:
  cancelled after its worker stopped, the cancel out (999,999,982, and
  999,999,999 out);
- ``updated``: one update applied and logged (999,999,970);
  ``update-asked``: one accepted by a client into its inbox while no
  engine ran;
- ``streamed``: three values emitted (999,999,960), waits for ``go``, then
  emits two more;
- ``forked``: forked from seq 2 of the completed ``fork-source``, waiting
  (999,999,950);
- ``handed-off``: failed, its handler ``handed-off.onError.0`` running
  (1,000,000,000); ``retired``: its handler gave up, retried, failed
  again: the first handoff retired (named ``onError:retried:...``), the
  second (1,000,000,001) running;
- remote steps of ``stepper``: ``out-step`` and ``q-hold`` (attempt out on
  the memory broker, code ``out``; ``q-hold`` holds queue ``line``),
  ``q-step`` (in the line of ``line``, ``queued``), ``rl-step`` (waiting for
  the rate limit of queue ``metered`` that ``rl-first`` took,
  ``rate_limited``), ``blocked-step`` (no live worker offers ``gpu``,
  ``blocked``), ``wait-step`` (its send refused by the broker,
  ``broker_unavailable``); ``resend-step.child.1`` (cancelled with its
  attempt out, its parent ``resend-step`` then retried by a client,
  ``resend``);
- ``paused-step`` (paused at a breakpoint, ``paused``) and
  ``continued-step`` (continued by a client while no engine ran,
  ``continued``);
- ``patched`` (``ctx.patched("v2")`` recorded), ``published`` (``set_event``
  done), ``cancel-asked`` (cancelled by a client while no engine ran), all
  waiting;
- ended runs, for the history views: ``done`` and ``failed`` (local),
  ``remote-done`` and ``remote-failed`` (remote workflows: 999,999,999
  settled), ``deadline-done`` (ended before its deadline: 999,999,991
  settled).

Every duration is chosen so that an engine whose wall clock is `OFFSET`
seconds ahead of the recording finds every timer of the scenario due and
each run still ends as its scenario means: a run timed out after
``LONG_TIMEOUT`` outlives its sleep of ``SLEEP``, a run timed out after
``SHORT_TIMEOUT`` is cancelled before its sleep of ``FOREVER`` ends, and a
rate limit of one per ``RATE_PERIOD`` lets the next start through.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final

import psycopg
import trio
from psycopg import sql

import trio_durable as td
from trio_durable.brokers import Consumer, Outgoing, WorkerDescriptor

WALL_START: Final = 1_700_000_000.0
"""The wall clock at the recording's start (SQLite, under a mock clock)."""

OFFSET: Final = 10_000.0
"""Seconds the finishing engine's wall clock is ahead of the recording's."""

SLEEP: Final = 5_000.0
LONG_TIMEOUT: Final = 100_000.0
SHORT_TIMEOUT: Final = 5_000.0
FOREVER: Final = 1_000_000.0
RATE_PERIOD: Final = 3_600.0

# Groups of remote steps and remote workflows.
HELD: Final = "held"
"""Steps no worker serves while recording: their attempts stay out."""
GPU: Final = "gpu-steps"
"""Steps needing the capability ``gpu``, which no worker offers while recording."""
REFUSED: Final = "refused"
"""Steps whose sends the recording's broker refuses."""
DECIDE: Final = "decide"
"""Remote workflows served while recording."""
DECIDE_CANCEL: Final = "decide-cancel"
"""A remote workflow whose worker stops before its run is cancelled."""
DECIDE_LATER: Final = "decide-later"
"""A remote workflow no worker serves while recording."""

GROUPS: Final = (HELD, GPU, REFUSED, DECIDE, DECIDE_CANCEL, DECIDE_LATER)

app = td.App("pre-kernel")
app.queue("line", concurrency=1)
app.queue("metered", concurrency=10, rate_limit=td.RateLimit(1, RATE_PERIOD))


# Steps ------------------------------------------------------------------------


@app.step()
async def add(n: int) -> int:
    return n + 1


@app.step(group=HELD)
async def held(n: int) -> int:
    return n * 10


@app.step(group=HELD, queue="line")
async def in_line(n: int) -> int:
    return n * 100


@app.step(group=HELD, queue="metered")
async def metered(n: int) -> int:
    return n * 1000


@app.step(group=GPU, requires=["gpu"])
async def render(n: int) -> int:
    return -n


@app.step(group=REFUSED)
async def refused(n: int) -> int:
    return n + 7


@app.step()
async def tool(n: int) -> str:
    return f"tool {n}"


# Workflows --------------------------------------------------------------------


@app.workflow(concurrency_key=lambda key: key, max_concurrent=1)
async def gate(ctx: td.Context, key: str) -> str:
    await ctx.set_event("admitted", True)
    got: str = await ctx.wait_signal("go")
    return f"{key} {got}"


@app.workflow(rate_limit=td.RateLimit(1, RATE_PERIOD))
async def limited(ctx: td.Context, n: int) -> int:
    return n


@app.workflow()
async def sleeper(ctx: td.Context, seconds: float) -> str:
    await ctx.set_event("sleeping", True)
    await ctx.sleep(seconds)
    return f"slept {seconds:g}"


@app.workflow()
async def chain(ctx: td.Context, generation: int) -> str:
    if generation < 2:
        ctx.continue_as_new(generation + 1)
    await ctx.set_event("last", generation)
    await ctx.sleep(SLEEP)
    return f"chain {generation}"


@app.workflow(check_arguments=True)
async def checked(ctx: td.Context, n: int) -> int:
    first = await ctx.step(add, n)
    second = await ctx.step(add, first)
    await ctx.set_event("stepped", second)
    got: int = await ctx.wait_signal("go")
    return second + got


@app.workflow()
async def cleanup(ctx: td.Context) -> str:
    try:
        await ctx.wait_signal("never")
    except td.Cancelled:
        with ctx.shield():
            await ctx.set_event("cleaning", True)
            await ctx.sleep(SLEEP)
        raise
    return "not cancelled"


@app.workflow(group=DECIDE_LATER)
async def remote_later(ctx: td.Context, n: int) -> int:
    return await ctx.step(add, n)


@app.workflow(group=DECIDE)
async def remote_sleeper(ctx: td.Context, n: int) -> int:
    await ctx.sleep(SLEEP)
    return n * 2


@app.workflow(group=DECIDE)
async def remote_quick(ctx: td.Context, n: int) -> int:
    got: int = await ctx.step(add, n)
    if n < 0:
        raise td.FatalError("negative", code="negative")
    return got


@app.workflow(group=DECIDE_CANCEL)
async def remote_cleanup(ctx: td.Context) -> str:
    try:
        await ctx.wait_signal("never")
    except td.Cancelled:
        with ctx.shield():
            await ctx.sleep(1.0)
        raise
    return "not cancelled"


@app.workflow()
async def updated(ctx: td.Context) -> int:
    total = [0]

    @ctx.update("bump")
    def bump(by: int) -> int:
        total[0] += by
        return total[0]

    await ctx.set_event("ready", True)
    got: int = await ctx.wait_signal("go")
    return total[0] + got


@app.workflow()
async def streamed(ctx: td.Context) -> str:
    for n in range(3):
        ctx.emit(n)
    await ctx.set_event("emitted", 3)
    await ctx.wait_signal("go")
    for n in range(3, 5):
        ctx.emit(n)
    return "streamed 5"


@app.workflow()
async def forkable(ctx: td.Context, n: int) -> int:
    first = await ctx.step(add, n)
    second = await ctx.step(add, first)
    got: int = await ctx.wait_signal("go")
    return second + got


@app.workflow(on_error=[td.OnError(workflow="mender")])
async def fragile(ctx: td.Context) -> str:
    fail: bool = await ctx.wait_signal("fail")
    if fail:
        raise td.FatalError("broken on purpose", code="broken")
    return "whole"


@app.workflow()
async def mender(ctx: td.Context, failure: dict[str, Any]) -> str:
    await ctx.set_event("mending", failure["error"]["code"])
    got: str = await ctx.wait_signal("go")
    if got == "give up":
        raise td.FatalError("gave up mending", code="gave_up")
    return f"mended {failure['run_id']} {got}"


@app.workflow()
async def stepper(ctx: td.Context, kind: str, n: int) -> int:
    steps = {"held": held, "line": in_line, "metered": metered, "render": render}
    got: int = await ctx.step(steps.get(kind, refused), n)
    return got


@app.workflow()
async def resender(ctx: td.Context, n: int) -> int:
    got: int = await ctx.child(stepper, "held", n)
    return got


@app.workflow()
async def pausing(ctx: td.Context, n: int) -> str:
    return await ctx.step(tool, n)


@app.workflow()
async def patched(ctx: td.Context) -> str:
    new = ctx.patched("v2")
    await ctx.set_event("patched", new)
    await ctx.wait_signal("go")
    return "v2" if new else "v1"


@app.workflow()
async def published(ctx: td.Context, value: str) -> str:
    await ctx.set_event("value", value)
    got: str = await ctx.wait_signal("go")
    return f"{value} {got}"


@app.workflow()
async def simple(ctx: td.Context, n: int) -> int:
    if n < 0:
        raise td.FatalError("negative", code="negative")
    return await ctx.step(add, n)


# The broker that refuses the sends of one group ---------------------------------


class RefusingBroker:
    """A view of a `MemoryBroker` that refuses every send to a queue of
    `REFUSED` (the whole batch fails, as a broker that is down fails it)."""

    def __init__(self, inner: td.MemoryBroker | None = None) -> None:
        self.inner = inner or td.MemoryBroker()

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        if any(REFUSED in message.queue for message in messages):
            await trio.lowlevel.checkpoint()
            raise td.BrokerUnavailable(f"the broker refuses the queue of {REFUSED!r}")
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


# Finishing every run ------------------------------------------------------------

SIGNALS: Final[tuple[tuple[str, str, Any], ...]] = (
    ("adm-hold", "go", "held"),
    ("adm-wait", "go", "waited"),
    ("checked", "go", 100),
    ("updated", "go", 1000),
    ("update-asked", "go", 0),
    ("streamed", "go", None),
    ("forked", "go", 20),
    ("handed-off.onError.0", "go", "now"),
    ("retired.onError.1", "go", "late"),
    ("patched", "go", None),
    ("published", "go", "seen"),
)
"""What `finish` sends, in order: (run, signal, payload)."""


@contextlib.asynccontextmanager
async def finishing_fleet(store: str, wall_clock: Any) -> AsyncIterator[td.Engine]:
    """An engine over ``store`` (the options every finish uses) and a worker
    of every group, offering ``gpu``, over a fresh memory broker."""
    broker = td.MemoryBroker()
    async with (
        td.open_engine(
            app,
            store=store,
            broker=broker,
            seed=0,
            engine_id="finisher",
            wall_clock=wall_clock,
        ) as engine,
        td.open_worker(
            app,
            broker=broker,
            groups=list(GROUPS),
            capabilities=["gpu"],
            seed=0,
            wall_clock=wall_clock,
        ),
    ):
        yield engine


async def finish(engine: td.Engine) -> dict[str, dict[str, Any]]:
    """Send every signal of `SIGNALS`, continue every paused step, wait for
    every run of the store to end, and return each run's status, output and
    error code by id (and the answer to the update ``update-asked`` took
    while no engine ran, and the values ``streamed`` emitted)."""
    for run_id, name, payload in SIGNALS:
        await engine.signal(run_id, name, payload)
    for breakpoint in await engine.breakpoints():
        await engine.clear_breakpoint(breakpoint.id)
    for paused in await engine.paused_steps():
        await engine.continue_run(paused.run_id)
    outcomes: dict[str, dict[str, Any]] = {}
    while True:
        page = await engine.list_runs(limit=500)
        open_ids = sorted(run.id for run in page.runs if run.id not in outcomes)
        if not open_ids:
            # The update accepted while no engine ran was answered: asked
            # again under its id, it gives that answer.
            outcomes["update-asked"]["update"] = await engine.update(
                "update-asked", "bump", 5, update_id="bump-2"
            )
            # The stream's offsets go on from where the recording left them.
            outcomes["streamed"]["stream"] = [
                [offset, value] async for offset, value in engine.stream("streamed")
            ]
            return dict(sorted(outcomes.items()))
        for run_id in open_ids:
            with contextlib.suppress(td.RunFailed, td.RunCancelled):
                await engine.result(run_id)
            run = await engine.get(run_id)
            outcomes[run_id] = {
                "status": run.status,
                "output": run.output,
                "code": None if run.error is None else run.error.code,
            }


def restore_sqlite(dump: str, path: Path) -> int:
    """Write the SQL text ``dump`` (a ``-- schema version N`` line, then the
    statements) as the SQLite file ``path``, at version N; return N."""
    header, _, statements = dump.partition("\n")
    version = int(header.removeprefix("-- schema version "))
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.executescript(statements)
        connection.execute(f"PRAGMA user_version = {version}")
    finally:
        connection.close()
    return version


def sqlite_wall() -> float:
    """The finishing wall clock of a SQLite store, under a mock clock."""
    return WALL_START + OFFSET + trio.current_time()


async def finish_store(store: str, wall_clock: Any) -> dict[str, dict[str, Any]]:
    """Finish every run of ``store`` (see `finish`) and close cleanly."""
    async with finishing_fleet(store, wall_clock) as engine:
        return await finish(engine)


class RecordedWall:
    """A wall clock `OFFSET` seconds after ``recorded_at`` when first read,
    going on with Trio time: a PostgreSQL store recorded under the real
    clock is finished as if that much time had passed since, whenever it
    is finished."""

    def __init__(self, recorded_at: float) -> None:
        self._start = recorded_at + OFFSET
        self._anchor: float | None = None

    def __call__(self) -> float:
        if self._anchor is None:
            self._anchor = trio.current_time()
        return self._start + trio.current_time() - self._anchor


def _connect(url: str) -> tuple[psycopg.Connection[Any], str]:
    """A connection to the server of a store URL with ``?schema=``, set to
    that schema, and the schema's name."""
    base, _, query = url.partition("?")
    schema = query.rpartition("schema=")[2]
    conn = psycopg.connect(base, autocommit=True)
    conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
    return conn, schema


def _tables(conn: psycopg.Connection[Any]) -> list[tuple[str, list[str]]]:
    """Every table of the current schema and its primary key's columns."""
    found = conn.execute(
        """
        SELECT c.relname, array_agg(a.attname ORDER BY k.ord)
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
        JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
        CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
        WHERE c.relkind = 'r'
        GROUP BY c.relname ORDER BY c.relname
        """
    ).fetchall()
    return [(name, list(key)) for name, key in found]


def dump_postgres(url: str) -> dict[str, list[Any]]:
    """Every row of every table of the store at ``url`` (a URL with
    ``?schema=``), as JSON objects ordered by primary key, by table."""
    conn, _ = _connect(url)
    with conn:
        rows: dict[str, list[Any]] = {}
        for table, key in _tables(conn):
            order = sql.SQL(", ").join(map(sql.Identifier, key))
            query = sql.SQL("SELECT row_to_json(t)::text FROM {} AS t ORDER BY {}").format(
                sql.Identifier(table), order
            )
            rows[table] = [json.loads(text) for (text,) in conn.execute(query).fetchall()]
    return rows


def restore_postgres(
    url: str, migrations: Sequence[Sequence[str]], rows: dict[str, list[Any]]
) -> None:
    """Create the schema of ``url`` (a URL with ``?schema=``) by applying
    ``migrations`` in order, as the store does, then insert ``rows`` (see
    `dump_postgres`), ``schema_version`` included. Rows a trigger derived
    from another table's rows are there already and kept."""
    conn, schema = _connect(url)
    with conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE schema_version ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in migrations:
            for statement in migration:
                conn.execute(statement.encode())
        for table, found in rows.items():
            # Generated columns are computed again.
            columns = sql.SQL(", ").join(
                sql.Identifier(name)
                for (name,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = current_schema() AND table_name = %s"
                    " AND is_generated = 'NEVER' ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            )
            insert = sql.SQL(
                "INSERT INTO {table} ({columns}) OVERRIDING SYSTEM VALUE"
                " SELECT {columns} FROM json_populate_record(NULL::{table}, %s::json)"
                " ON CONFLICT DO NOTHING"
            ).format(table=sql.Identifier(table), columns=columns)
            for row in found:
                conn.execute(insert, (json.dumps(row),))
        # Identity columns go on after the rows put back.
        identities = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND is_identity = 'YES'"
        ).fetchall()
        for table, column in identities:
            conn.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence({name}, {column}),"
                    " coalesce((SELECT max({ident}) FROM {table}), 0) + 1, false)"
                ).format(
                    name=sql.Literal(table),
                    column=sql.Literal(column),
                    ident=sql.Identifier(column),
                    table=sql.Identifier(table),
                )
            )
