"""A workload that leaves every kind of record a run or a feature writes,
and a census of a store's rows: what tests/test_growth.py and
tests/integration/test_growth_postgres.py run cycle after cycle, with
retention on, to show that the store stops growing.

Each unit of a cycle starts one top-level run (by `Engine.start`, an event,
an entity call or a fork) and drives it to its end: steps (local, remote,
through a flow-control queue with a dedup key, with a payload large enough
for the blob store), timers, signals (from the engine, from another run
with an idempotency key, sent twice), webhooks, updates and queries,
published values, stream values, children (awaited, started, a sliding
fan of children cancelled midway), sliding fans of remote steps, search
attributes and tags, whole-run deadlines, on-error handlers and a retry,
run controls (singleton, dedup key, concurrency key, rate limit), events
(subscribed, debounced, and one no workflow takes), entities, a breakpoint,
continue-as-new and fork. A schedule starts a run every minute besides.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

import trio_durable as td

app = td.App("growth")
app.search_attribute("cycle", int)
app.queue("growth-q", concurrency=3)

REMOTE: Final = "growth-remote"
BLOB_THRESHOLD: Final = 1024


CYCLE: Final = 600.0
"""Seconds of durable time a cycle lasts: its runs start at its beginning
and all end well before its end (no later than `BUSY`)."""

KEPT: Final = 900.0
"""Retention's age for every status and for events: at the end of a cycle
the store holds that cycle's records and none of the one before."""

INTERVAL: Final = 60.0
"""Seconds between the engine's pruning passes."""

BUSY: Final = 2 * CYCLE - KEPT - INTERVAL
"""The latest a cycle's runs may end: early enough for the first pruning
pass after their age passed to come before the end of the next cycle."""


def retention() -> td.Retention:
    """The retention the growth tests run with."""
    return td.Retention(
        completed=KEPT, failed=KEPT, cancelled=KEPT, dead=KEPT, events=KEPT, interval=INTERVAL
    )


WAITS: Final = 86_400.0
"""The timeout of the workload's signal waits: they always get their
signal, and end within the cycle."""


async def nap(ctx: td.Context, seconds: int) -> None:
    """A durable timer of ``seconds`` to twice that, that ends on a multiple
    of ``seconds`` of durable time: the timers of a cycle's runs end together, so the mock
    clock jumps once for many of them (on PostgreSQL each jump waits for
    every task to be idle a moment of real time)."""
    now = ctx.now().timestamp()
    await ctx.sleep_until((math.floor(now / seconds) + 2) * seconds)


@app.step()
async def local_step(n: int) -> int:
    return n + 1


@app.step(group=REMOTE)
async def remote_step(n: int) -> int:
    return n * 2


@app.step(group=REMOTE)
async def queued_step(n: int) -> int:
    return n + 3


@app.step()
async def big_step(n: int) -> str:
    # Longer than the blob threshold, and distinct per run: a blob each.
    return f"{n}:" + "x" * (2 * BLOB_THRESHOLD)


@app.step()
async def refuse(n: int) -> int:
    raise td.FatalError(f"refused {n}", code="refused")


@app.step()
async def paused_step(n: int) -> int:
    return n - 1


@app.workflow()
async def kid(ctx: td.Context, n: int) -> int:
    await nap(ctx, 5)
    return await ctx.step(local_step, n)


@app.workflow()
async def waiting_kid(ctx: td.Context, n: int) -> None:
    await ctx.wait_signal("never")


@app.workflow()
async def everything(ctx: td.Context, n: int, cycle: int) -> int:
    bumps = [0]

    @ctx.update("bump")
    def bump(by: int) -> int:
        bumps[0] += by
        return bumps[0]

    @ctx.query("bumps")
    def read_bumps() -> int:
        return bumps[0]

    ctx.upsert_search_attributes({"cycle": cycle})
    a = await ctx.step(local_step, n)
    b = await ctx.step(remote_step, a)
    # Distinct per cycle: blobs are content-addressed.
    large = await ctx.step(big_step, cycle * 1_000_000 + n)
    ctx.emit(a)
    ctx.emit(len(large))
    await nap(ctx, 10)
    token = await ctx.webhook("hook")
    ctx.set_event("token", token)
    hooked = await ctx.wait_signal("hook", timeout=WAITS)
    # Sent by a `sender` run, with an idempotency key.
    went = await ctx.wait_signal("go", timeout=WAITS)
    doubled = await ctx.all(remote_step, list(range(5)), concurrency=2)
    kids = await ctx.all(kid, [n, n + 1, n + 2], concurrency=1)
    await ctx.start_child(kid, n)
    try:
        # Seven keys a cycle: a step whose key another one holds while it
        # waits in line is refused.
        queued = await ctx.step(queued_step, n, queue="growth-q", dedup_key=f"{cycle}:{n % 7}")
    except td.RemoteStepError as exc:
        if exc.code != "deduplicated":
            raise
        queued = 0
    ctx.set_event("done", True)
    total: int = b + hooked + went + sum(doubled) + sum(kids) + queued + bumps[0]
    return total


@app.workflow()
async def sender(ctx: td.Context, target: str, key: str) -> None:
    await ctx.signal(target, "go", 1, idempotency_key=key)
    # The same key again: recorded as a duplicate, delivered once.
    await ctx.signal(target, "go", 1, idempotency_key=key)


@app.workflow()
async def stuck_fan(ctx: td.Context, n: int) -> None:
    ctx.set_event("fanning", n)
    await ctx.all(waiting_kid, [n, n + 1, n + 2], concurrency=1)


@app.workflow()
async def handler(ctx: td.Context, failure: dict[str, Any]) -> str:
    # Fails in turn, so that the run it handles ends failed: retried.
    raise td.FatalError("handled", code="handled")


@app.workflow(on_error=[td.OnError("refused", workflow="handler")])
async def failing(ctx: td.Context, n: int) -> int:
    await nap(ctx, 5)
    return await ctx.step(refuse, n)


@app.workflow(events=["order"])
async def on_order(ctx: td.Context, n: int) -> int:
    return await ctx.step(local_step, n)


# A window longer than the gaps between a cycle's events of one key: a
# cycle opens one window per key, so each cycle leaves as many runs.
@app.workflow(events=["burst"], debounce=120.0, debounce_collect="all")
async def on_burst(ctx: td.Context, ns: list[int]) -> int:
    return sum(ns)


@app.workflow(concurrency_key=lambda n: f"s{n}", singleton=True)
async def single(ctx: td.Context, n: int) -> int:
    # Open until the unit that started it says so.
    await ctx.wait_signal("done", timeout=WAITS)
    return n


@app.workflow(
    concurrency_key=lambda n: f"c{n % 3}",
    max_concurrent=2,
    dedup_key=lambda n: f"d{n}",
    rate_limit=td.RateLimit(starts=50, per=1.0),
)
async def controlled(ctx: td.Context, n: int) -> int:
    await nap(ctx, 5)
    return n


@app.workflow()
async def continuing(ctx: td.Context, n: int) -> int:
    if n % 2:
        ctx.continue_as_new(n + 1)
    return await ctx.step(local_step, n)


@app.workflow()
async def simple(ctx: td.Context, n: int) -> int:
    a = await ctx.step(local_step, n)
    return await ctx.step(local_step, a)


@app.workflow()
async def paused(ctx: td.Context, n: int) -> int:
    ctx.set_event("before", n)
    return await ctx.step(paused_step, n)


@app.workflow()
async def ticked(ctx: td.Context) -> int:
    return await ctx.step(local_step, 0)


app.schedule("tick", ticked, cron="*/10 * * * *")


@app.entity("counter", key=str)
class Tally:
    def __init__(self) -> None:
        self.total = 0

    @td.exclusive
    async def add(self, n: int) -> int:
        self.total += n
        return self.total


@attrs.define
class Cycle:
    """One cycle's units, and how they meet: the run each `sender` signals
    is started by the unit before it."""

    engine: td.Engine
    number: int
    targets: dict[int, trio.Event] = attrs.Factory(dict)
    windows: set[str] = attrs.Factory(set)

    def run_id(self, kind: str, i: int) -> str:
        return f"c{self.number}-{kind}-{i}"

    async def everything(self, i: int) -> None:
        engine, rid = self.engine, self.run_id("all", i)
        await engine.start(
            everything,
            i,
            self.number,
            run_id=rid,
            tags=["growth", f"c{self.number % 4}"],
            timeout=BUSY,
        )
        self.targets[i].set()
        token = await engine.get_event(rid, "token")
        await engine.deliver_webhook(token, 1)
        assert await engine.update(rid, "bump", 2) == 2
        assert await engine.query(rid, "bumps") == 2
        # A signal the run never waits for: buffered until it is pruned.
        await engine.signal(rid, "unread", i)
        await engine.result(rid)
        assert [offset async for offset, _ in engine.stream(rid)] == [0, 1]

    async def sender(self, i: int) -> None:
        await self.targets[i - 1].wait()
        target, rid = self.run_id("all", i - 1), self.run_id("send", i)
        await self.engine.start(sender, target, f"key-{target}", run_id=rid)
        await self.engine.result(rid)

    async def cancelled_fan(self, i: int) -> None:
        rid = self.run_id("stuck", i)
        await self.engine.start(stuck_fan, i, run_id=rid)
        await self.engine.get_event(rid, "fanning")
        await self.engine.cancel(rid)
        with pytest.raises(td.RunCancelled):
            await self.engine.result(rid)

    async def failure(self, i: int) -> None:
        rid = self.run_id("fail", i)
        await self.engine.start(failing, i, run_id=rid)
        for attempt in (0, 1):
            with pytest.raises(td.RunFailed) as failed:
                await self.engine.result(rid)
            assert failed.value.code == "handled"
            if attempt == 0:
                # Run again, routed again (to the handler .onError.1).
                await self.engine.retry(rid)

    async def event(self, i: int) -> None:
        receipt = await self.engine.send_event("order", i, event_id=f"c{self.number}-e{i}")
        [rid] = receipt.run_ids
        assert await self.engine.result(rid) == i + 1

    async def burst(self, i: int) -> None:
        receipt = await self.engine.send_event("burst", i, key=f"c{self.number}-k{i % 5}")
        # Its window ends once the cycle's last event of the key is 120 s
        # old: the cycle waits for the windows' runs once every unit is done.
        self.windows.add(receipt.run_ids[0])
        # No workflow takes it (the tests ignore the warning that says so).
        await self.engine.send_event("nobody", i, event_id=f"c{self.number}-n{i}")

    async def controlled(self, i: int) -> None:
        # Keys of this cycle's own: each cycle claims new ones.
        n = self.number * 1_000_000 + i
        rid = self.run_id("single", i)
        await self.engine.start(single, n, run_id=rid)
        # A second start while the first is open returns it.
        again = await self.engine.start(single, n, run_id=rid + "-again")
        assert again.id == rid
        await self.engine.signal(rid, "done")
        assert await self.engine.result(rid) == n
        rid = self.run_id("ctl", i)
        await self.engine.start(controlled, n, run_id=rid)
        assert await self.engine.result(rid) == n

    async def entity(self, i: int) -> None:
        await self.engine.entity("counter", f"k{i % 4}").add(1)

    async def continued(self, i: int) -> None:
        rid = self.run_id("cont", i)
        await self.engine.start(continuing, 2 * i + 1, run_id=rid)
        assert await self.engine.result(rid) == 2 * i + 3

    async def forked(self, i: int) -> None:
        rid = self.run_id("fork", i)
        await self.engine.start(simple, i, run_id=rid)
        assert await self.engine.result(rid) == i + 2
        fork = await self.engine.fork(rid, from_seq=2, new_run_id=rid + "-f")
        assert await self.engine.result(fork.id) == i + 2

    async def paused(self, i: int) -> None:
        rid = self.run_id("pause", i)
        await self.engine.start(paused, i, run_id=rid)
        await self.engine.get_event(rid, "before")
        if i % 2:
            await self.engine.continue_run(rid)
            assert await self.engine.result(rid) == i - 1
        else:
            # Cancelled while paused: its pause is kept until it is pruned.
            await self.engine.cancel(rid)
            with pytest.raises(td.RunCancelled):
                await self.engine.result(rid)

    def units(self) -> list[Callable[[int], Awaitable[None]]]:
        return [getattr(self, kind) for kind in KINDS]


KINDS: Final = (
    "everything",
    "sender",
    "cancelled_fan",
    "failure",
    "event",
    "burst",
    "controlled",
    "entity",
    "continued",
    "forked",
    "paused",
)
"""The kinds of unit, in the order a cycle's units take them."""


RUNS_PER_KINDS: Final = 20
"""The runs one unit of each kind makes together (and the five of the
cycle's debounce windows): `everything` and its four children, the
sender, the cancelled fan and its child, the failing run and its two
handlers, an event's run, the singleton and the controlled run, an
entity call, a run and its continuation, a run and its fork, and the
paused run."""


def units(runs: int) -> int:
    """How many units make about ``runs`` runs."""
    return max(len(KINDS), runs * len(KINDS) // RUNS_PER_KINDS)


async def run_cycle(engine: td.Engine, number: int, size: int) -> int:
    """Run the cycle ``number`` of ``size`` units, all at once, then wait
    for the cycle's end (`CYCLE` seconds from its start); return how many
    runs the cycle created."""
    start = trio.current_time()
    cycle = Cycle(engine=engine, number=number)
    units = cycle.units()
    for i in range(size):
        if units[i % len(units)] == cycle.everything:
            cycle.targets[i] = trio.Event()

    async def unit(i: int) -> None:
        await units[i % len(units)](i)

    started: set[str] = set()

    async def count(events: trio.MemoryReceiveChannel[td.Event]) -> None:
        async for event in events:
            if event.kind == "run.started":
                started.add(event.run_id)

    with engine.subscribe(buffer=math.inf) as events:
        async with trio.open_nursery() as counting:
            counting.start_soon(count, events)
            async with trio.open_nursery() as nursery:
                for i in range(size):
                    if units[i % len(units)] == cycle.sender and i - 1 not in cycle.targets:
                        continue  # the first unit of a cycle has nothing to signal
                    nursery.start_soon(unit, i)
            for window in sorted(cycle.windows):
                await engine.result(window)
            counting.cancel_scope.cancel()
    # Its runs ended early enough that the first pruning pass after their
    # age passed comes before the end of the next cycle.
    took = trio.current_time() - start
    assert took < BUSY, f"cycle {number} ran for {took} s, past {BUSY} s"
    await trio.sleep_until(start + CYCLE)
    return len(started)


# -- the census ----------------------------------------------------------------


def family(scope: str) -> str:
    """The kind of record a keyed value's scope holds: its name up to the
    first ``:`` (``stream:<run>`` is ``stream``)."""
    return scope.partition(":")[0]


@attrs.frozen
class Census:
    """What a store holds: rows per table, keyed values per family, and
    bytes on disk (the SQLite file, PostgreSQL's tables, the blob files)."""

    rows: dict[str, int]
    sizes: dict[str, int]
    relations: dict[str, int] = attrs.field(factory=dict)
    """Per size, how many relations it adds up, each of which moves by
    whole pages (a PostgreSQL table's heap, indexes and TOAST; see
    `SLACK_BYTES`); one if not given."""
    free: dict[str, int] = attrs.field(factory=dict)
    """Per size, the bytes of it that hold nothing (a PostgreSQL table's
    free space once vacuumed, which it fills again before it takes new
    pages): shown, not compared."""

    def growth(
        self,
        later: Census,
        capped: dict[str, int],
        shown: tuple[str, ...] = (),
        tolerance: float = 0.1,
    ) -> list[str]:
        """What grew by more than ``tolerance`` (and `SLACK` rows) from this
        census to ``later``; a count ``capped`` stays under its cap by
        design, and is checked against that instead; one ``shown`` is not
        checked."""
        grown = []
        for kind, before, after in (
            ("rows", self.rows, later.rows),
            ("bytes", self.sizes, later.sizes),
        ):
            for name in sorted(set(before) | set(after)):
                old, new = before.get(name, 0), after.get(name, 0)
                if name in shown:
                    continue
                if name in capped:
                    if new > capped[name]:
                        grown.append(f"{kind} of {name}: {new}, over its cap {capped[name]}")
                elif new > old * (1 + tolerance) + self._slack(kind, name):
                    grown.append(f"{kind} of {name}: {old} -> {new}")
        return grown

    def _slack(self, kind: str, name: str) -> int:
        if kind == "rows":
            return SLACK
        return SLACK_BYTES * self.relations.get(name, 1)


SLACK: Final = 2
"""Rows a count may grow by, on top of the tolerance: a schedule's tick
falling on either side of a measurement."""

SLACK_BYTES: Final = 32 * 1024
"""Bytes a size may grow by, on top of the tolerance, per relation it is
made of (a SQLite file: one; a PostgreSQL table: its heap, each index and
its TOAST): four of PostgreSQL's pages, eight of SQLite's. Sizes move by
pages, an index page emptied by a prune is used again only once a vacuum
has seen it free and no transaction can see it, and a B-tree whose keys
land in the middle (run ids of cycle 10 sort between those of 1 and 2)
settles at its fill over several cycles: in a small run's tables of a few
dozen pages that alone is more than 10%. At the issue's size it is a
fraction of a percent."""


def sqlite_census(path: Path, blobs: Path) -> Census:
    """The census of a SQLite file: every table's rows (found in the file,
    not listed here), keyed values by family, the file's bytes."""
    import sqlite3

    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        rows = {
            table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in tables
        }
        scopes = connection.execute(
            "SELECT scope, count(*) FROM durable_values GROUP BY scope"
        ).fetchall()
        workflows = connection.execute(
            "SELECT workflow, count(*) FROM runs GROUP BY workflow"
        ).fetchall()
        # The pages of the announcements, which fill up to their cap over
        # the first cycles of a small run (see `test_growth.CAPPED`).
        (announcements,) = connection.execute(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'announcements'"
        ).fetchone()
    finally:
        connection.close()
    rows.update(_families(scopes))
    rows.update(_workflows(workflows))
    wal = path.with_name(path.name + "-wal")
    files, stored = blob_files(blobs)
    rows["blob files"] = files
    sizes = {
        "file": path.stat().st_size,
        "file but announcements": path.stat().st_size - int(announcements),
        "wal": wal.stat().st_size if wal.exists() else 0,
        "blob bytes": stored,
    }
    return Census(rows=rows, sizes=sizes)


def memory_census(store: td.MemoryStore, blobs: Path) -> Census:
    """The census of a memory store: the length of each of its dictionaries
    and lists (found on the object, not listed here), keyed values by
    family."""
    rows: dict[str, int] = {}
    for holder in (store, store._hooks):
        for name, value in sorted(vars(holder).items()):
            if isinstance(value, dict | list | tuple | set | frozenset):
                rows[f"{type(holder).__name__}.{name}"] = _size(value)
    scopes = [(scope, len(values)) for scope, values in store._values.items()]
    rows.update(_families(scopes))
    rows.update(_workflows(Counter(run.workflow for run in store._runs.values()).items()))
    files, stored = blob_files(blobs)
    rows["blob files"] = files
    return Census(rows=rows, sizes={"blob bytes": stored})


def _size(value: Any) -> int:
    if isinstance(value, dict):
        # Nested tables (checkpoints per run, values per scope) count their rows.
        inner = [v for v in value.values() if isinstance(v, dict | list)]
        if inner and len(inner) == len(value):
            return sum(len(v) for v in inner) + len(value)
    return len(value)


def _families(scopes: Any) -> dict[str, int]:
    counted: Counter[str] = Counter()
    for scope, count in scopes:
        counted[f"values:{family(scope)}"] += int(count)
    return dict(counted)


def _workflows(counts: Any) -> dict[str, int]:
    """Runs per workflow: a kind of run left behind shows even where the
    runs of other workflows outnumber it."""
    return {f"runs:{workflow}": int(count) for workflow, count in counts}


def blob_files(blobs: Path) -> tuple[int, int]:
    """How many files the blob directory holds, and their bytes."""
    files = [Path(root) / name for root, _, names in os.walk(blobs) for name in names]
    return len(files), sum(f.stat().st_size for f in files)


def describe(census: Census, indent: int | None = 1) -> str:
    """The census as JSON (one line per count by default, for a failure's
    message)."""
    shown: dict[str, dict[str, int]] = {"rows": census.rows, "sizes": census.sizes}
    if census.free:
        shown["free"] = census.free
    return json.dumps(shown, indent=indent, sort_keys=True)
