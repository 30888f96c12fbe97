"""Reading runs: `Engine.list_runs`, `history`, `run_detail`, `fan_page`."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("queries")


@app.step()
async def check(n: int) -> int:
    if n % 7 == 3:
        raise td.FatalError(f"member {n} refused", code="refused", details={"n": n})
    return n


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def flaky(n: int) -> int:
    raise ValueError(f"flaky {n}")


@app.workflow()
async def member(ctx: td.Context, n: int) -> int:
    return await ctx.step(check, n)


@app.workflow()
async def simple(ctx: td.Context, n: int) -> int:
    await ctx.sleep(1.0)
    return n


@app.workflow()
async def fanout(ctx: td.Context, width: int) -> int:
    await ctx.step(check, 0)
    settled = await ctx.all_settled(member, list(range(width)))
    await ctx.sleep(5.0)
    small = await ctx.all_settled(member, [1, 2])
    return sum(1 for item in [*settled, *small] if item["status"] == "fulfilled")


@app.workflow()
async def failing(ctx: td.Context, n: int) -> int:
    await ctx.step(check, 1)
    return await ctx.step(flaky, n)


async def _start_many(engine: td.Engine) -> list[td.RunHandle[int]]:
    handles = []
    for i in range(7):
        handles.append(
            await engine.start(
                simple,
                i,
                run_id=f"s{i}",
                namespace="blue" if i % 2 else "default",
                tags=("even",) if i % 2 == 0 else ("odd", f"n{i}"),
            )
        )
        await trio.sleep(1.0)
    return handles


async def test_list_runs_pages_newest_first_by_keyset_cursor(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        await _start_many(engine)
        await engine.drain()
        page = await engine.list_runs(limit=3)
        assert [r.id for r in page.runs] == ["s6", "s5", "s4"]
        assert page.facets is None
        assert page.next_cursor is not None
        # A run started between pages shifts nothing: it is newer.
        await engine.start(simple, 9, run_id="late")
        second = await engine.list_runs(limit=3, cursor=page.next_cursor)
        assert [r.id for r in second.runs] == ["s3", "s2", "s1"]
        last = await engine.list_runs(limit=3, cursor=second.next_cursor)
        assert [r.id for r in last.runs] == ["s0"]
        assert last.next_cursor is None
        exact = await engine.list_runs(limit=8)
        assert len(exact.runs) == 8
        assert exact.next_cursor is None


async def test_list_runs_filters_and_facets(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        await _start_many(engine)
        await engine.drain()
        await engine.start(simple, 9, run_id="waiting")
        await trio.testing.wait_all_tasks_blocked()  # it sleeps, suspended

        async def ids(**filters: object) -> list[str]:
            return [r.id for r in (await engine.list_runs(**filters)).runs]  # type: ignore[arg-type]

        assert await ids(namespace="blue") == ["s5", "s3", "s1"]
        assert await ids(tags=["odd"]) == ["s5", "s3", "s1"]
        assert await ids(tags=["odd", "n3"]) == ["s3"]
        assert await ids(tags=["odd", "even"]) == []
        assert await ids(status="suspended") == ["waiting"]
        assert await ids(status=["suspended", "completed"], limit=2) == ["waiting", "s6"]
        assert await ids(workflow="simple", namespace="default", tags=["even"]) == [
            "s6",
            "s4",
            "s2",
            "s0",
        ]
        # Runs were started at Trio times 0, 1, ... 6: half-open ranges.
        assert await ids(created_after=WALL_START + 2, created_before=WALL_START + 4) == [
            "s3",
            "s2",
        ]
        moment = datetime.datetime.fromtimestamp(WALL_START + 5, tz=datetime.UTC)
        assert await ids(created_after=moment, status="completed") == ["s6", "s5"]
        page = await engine.list_runs(namespace="default", status="completed", facets=True)
        assert [r.id for r in page.runs] == ["s6", "s4", "s2", "s0"]
        # Facets count every filter but the status.
        assert page.facets == {"completed": 4, "suspended": 1}


async def test_list_runs_children_by_parent(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(fanout, 3, run_id="p")
        await engine.result(run.id)
        page = await engine.list_runs(parent_id="p", limit=10)
        assert sorted(r.id for r in page.runs) == [
            "p.all.2.0",
            "p.all.2.1",
            "p.all.2.2",
            "p.all.6.0",
            "p.all.6.1",
        ]


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"status": "sleeping"}, "status must name"),
        ({"status": []}, "status must name"),
        ({"tags": "odd"}, "tags must be a collection"),
        ({"tags": [""]}, "tags must be non-empty"),
        ({"namespace": "no spaces"}, "namespace must be"),
        ({"created_after": "yesterday"}, "created_after must be"),
        ({"created_before": datetime.datetime(2026, 1, 1)}, "aware datetime"),
        ({"limit": 0}, "limit must be"),
        ({"limit": 501}, "limit must be"),
        ({"cursor": "not a cursor"}, "malformed cursor"),
        ({"cursor": "WzFd"}, "malformed cursor"),
        ({"workflow": ""}, "workflow must be"),
    ],
)
async def test_list_runs_refuses_bad_filters(
    open_test_engine: EngineFactory, filters: dict[str, object], message: str
) -> None:
    async with open_test_engine(app) as engine:
        with pytest.raises(td.UsageError, match=message):
            await engine.list_runs(**filters)  # type: ignore[arg-type]


async def test_history_lists_every_checkpoint_with_attempts_and_errors(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(failing, 5, run_id="f")
        with pytest.raises(td.RunFailed):
            await engine.result(run.id)
        history = await engine.history("f")
        assert history.run.status == "failed"
        first, second = history.entries
        assert (first.seq, first.kind, first.name, first.status) == (
            1,
            "local",
            "check",
            "completed",
        )
        assert first.errors == ()
        assert first.error is None
        assert (second.seq, second.name, second.status, second.attempts) == (
            2,
            "flaky",
            "failed",
            2,
        )
        assert [e.message for e in second.errors] == ["flaky 5", "flaky 5"]
        assert second.error is not None
        assert second.error.type == "ValueError"
        assert second.error.traceback is not None
        assert "flaky" in second.error.traceback
        assert second.enqueued_at is not None
        assert second.finished_at is not None
        assert history.children == ()
        assert history.handlers == ()

        parent = await engine.start(fanout, 2, run_id="p")
        await engine.result(parent.id)
        history = await engine.history("p")
        assert history.children == ("p.all.2.0", "p.all.2.1", "p.all.5.0", "p.all.5.1")
        assert [e.kind for e in history.entries] == ["local", "child", "child", "timer"] + [
            "child"
        ] * 2


async def test_unknown_runs_and_namespaces(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(simple, 1, run_id="r", namespace="blue")
        for query in (engine.history, engine.run_detail):
            with pytest.raises(td.RunNotFoundError):
                await query("nope")
            with pytest.raises(td.RunNotFoundError, match="in namespace"):
                await query("r", namespace="default")
        with pytest.raises(td.RunNotFoundError):
            await engine.fan_page("nope", 2)
        assert (await engine.history("r", namespace="blue")).run.id == "r"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_run_detail_folds_wide_fans_and_reads_o_page_rows(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    kind: str,
    tmp_path: Path,
) -> None:
    width = 300
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'store.db'}"
    async with td.open_store(url) as store, open_test_engine(app, store=store) as engine:
        stats = store.statistics()
        run = await engine.start(fanout, width, run_id="p")
        assert await engine.result(run.id) == width - len(range(3, width, 7)) + 2
        before = stats.checkpoint_rows_read
        detail = await engine.run_detail("p")
        # The step at 1, the fan's stats, the timer, the small fan's two
        # members: the wide fan's members are not read.
        assert [type(e).__name__ for e in detail.timeline] == [
            "HistoryEntry",
            "FanStats",
            "HistoryEntry",
            "HistoryEntry",
            "HistoryEntry",
        ]
        wide, small = detail.fans
        assert detail.timeline[1] == wide
        failed = len(range(3, width, 7))
        assert (wide.first_seq, wide.last_seq, wide.size) == (2, width + 1, width)
        assert (wide.kind, wide.name) == ("child", "member")
        assert wide.counts == {"completed": width - failed, "failed": failed}
        assert wide.attempts == 0  # child runs count no attempts of their own
        assert [f.seq for f in wide.first_failures] == [2 + n for n in (3, 10, 17, 24, 31)]
        assert wide.first_failures[0].error is not None
        assert wide.first_failures[0].error.code == "refused"
        assert (small.first_seq, small.size, small.counts) == (width + 3, 2, {"completed": 2})
        assert detail.children == (f"p.all.{width + 3}.0", f"p.all.{width + 3}.1")
        assert detail.parent_id is None
        # O(page): a handful of rows, not 300.
        assert stats.checkpoint_rows_read - before == 1 + 1 + 2 + 5

        before = stats.checkpoint_rows_read
        page = await engine.fan_page("p", 2, offset=10, limit=25)
        assert (page.total, page.offset, page.limit) == (width, 10, 25)
        assert [m.seq for m in page.members] == list(range(12, 37))
        assert stats.checkpoint_rows_read - before == 1 + 25
        failures = await engine.fan_page("p", 2, failed=True, offset=2, limit=3)
        assert failures.total == failed
        assert [m.seq for m in failures.members] == [2 + n for n in (17, 24, 31)]
        assert all(m.status == "failed" for m in failures.members)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"fan": 1}, "no fan starting at seq 1"),
        ({"fan": 99}, "no fan starting at seq 99"),
        ({"fan": 2, "limit": 501}, "limit must be"),
        ({"fan": 2, "limit": 0}, "limit must be"),
        ({"fan": 2, "offset": -1}, "offset must be"),
        ({"fan": "2"}, "fan must be"),
    ],
)
async def test_fan_page_refuses_bad_input(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    args: dict[str, object],
    message: str,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.result((await engine.start(fanout, 3, run_id="p")).id)
        with pytest.raises(td.UsageError, match=message):
            await engine.fan_page("p", **args)  # type: ignore[arg-type]


async def test_queries_after_close_raise(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        pass
    with pytest.raises(td.EngineClosedError):
        await engine.list_runs()


DEMO = Path(__file__).resolve().parents[1] / "examples" / "queries_demo.py"


async def test_the_queries_demo_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(DEMO), str(tmp_path / "queries.db")],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "orders: ['order-blue', 'order-3'] facets: {'completed': 5}" in out
    assert "next page: ['order-2', 'order-1']" in out
    assert "tagged web and pot: ['order-2']" in out
    assert "children of order-0: ['order-0.all.2.0', 'order-0.all.2.1']" in out
    assert "order-2 fan at seq 2: 60 members, {'completed': 51, 'failed': 9}" in out
    assert "timeline: ['HistoryEntry', 'FanStats']" in out
    assert "failed members (9 in all), first page: [(5, 'refused'), (12, 'refused')" in out
    assert "pruned 72 runs; 0 left" in out
