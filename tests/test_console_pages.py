"""The console's pages (`trio_durable._console._pages`): each page shows the
real data, escapes what runs carry, answers bad input and unknown runs with
their error pages, and a matching ``If-None-Match`` with 304."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

import trio_durable as td
from conftest import EngineFactory
from trio_durable.console import console_app

app = td.App("console-pages")
app.queue("mail", concurrency=3, priority=2)

HOSTILE = "<script>alert('x')</script>"
FAILING = frozenset({3, 17, 24})
"""The members of the fan in `fan_out` that fail."""


@app.step(group="g", retry=td.Retry(attempts=1))
async def member(index: int) -> int:
    if index in FAILING:
        raise td.FatalError(f"member {index} says {HOSTILE}", code="bad<code>")
    return index * 10


@app.workflow()
async def fan_out(ctx: td.Context, width: int) -> list[int]:
    return await ctx.all(member, list(range(width)), mode="wait_all")


@app.workflow()
async def leaf(ctx: td.Context, value: int) -> int:
    return value + 1


@app.workflow()
async def tree(ctx: td.Context, value: int) -> int:
    return await ctx.child(leaf, value)


@app.step()
async def explode() -> None:
    raise td.FatalError("it blew up", code="boom")


@app.workflow()
async def handle(ctx: td.Context, failure: dict[str, Any]) -> str:
    return f"handled {failure['run_id']}"


@app.workflow(on_error=[td.OnError(workflow="handle")])
async def fragile(ctx: td.Context) -> None:
    await ctx.step(explode)


@app.step()
async def wrap(item: str) -> str:
    return f"wrapped {item}"


@app.workflow()
async def gift(ctx: td.Context, item: str) -> str:
    return await ctx.step(wrap, item)


@app.step(group="nobody")
async def unserved(item: str) -> str:
    return item


@app.workflow()
async def waits(ctx: td.Context, item: str) -> str:
    wrapped = await ctx.step(wrap, item)
    return await ctx.step(unserved, wrapped)


shaky_calls: list[int] = []


@app.step(retry=td.Retry(attempts=3, backoff=1.0, jitter=0))
async def shaky() -> str:
    """Takes 2 s, failing the first two times."""
    shaky_calls.append(1)
    await trio.sleep(2)
    if len(shaky_calls) < 3:
        raise ValueError(f"shaky call {len(shaky_calls)}")
    return "steady"


@app.workflow()
async def steadied(ctx: td.Context) -> str:
    return await ctx.step(shaky)


@app.step(group="postroom", queue="mail")
async def post(letter: int) -> int:
    return letter


@app.workflow()
async def mailing(ctx: td.Context, letter: int) -> int:
    return await ctx.step(post, letter)


@asynccontextmanager
async def console(
    open_test_engine: EngineFactory, **kwargs: Any
) -> AsyncIterator[tuple[td.Engine, httpx.AsyncClient]]:
    async with (
        open_test_engine(app, serve=["g"]) as engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=console_app(engine, **kwargs)),
            base_url="http://console",
        ) as http,
    ):
        yield engine, http


async def finish(engine: td.Engine, run_id: str) -> None:
    with pytest.raises(td.RunFailed):
        await engine.result(run_id)


async def test_the_runs_page_lists_runs_with_counts_per_status_and_filters(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(tree, 1, run_id="t-1", tags=["blue"])
        assert await engine.result("t-1") == 2
        await engine.start(fan_out, 25, run_id="f-1")
        await finish(engine, "f-1")
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        text = page.text
        # Top-level runs by default: the tree's child folded under it, counted.
        for run_id in ("t-1", "f-1"):
            assert f'href="/runs/{run_id}"' in text
        assert 'href="/runs/t-1.child.1"' not in text
        assert '<a class="folded-count" href="/?parent=t-1"' in text
        assert re.search(r"completed <b>1</b>", text)
        assert re.search(r"failed <b>1</b>", text)
        assert re.search(r"all <b>2</b>", text)
        assert 'href="/?status=failed"' in text
        # Every run: 2 completed (the tree and its leaf), 1 failed.
        assert '<a class="toggle" id="show-all" href="/?all=1">' in text
        every = (await http.get("/", params={"all": "1"})).text
        for run_id in ("t-1", "t-1.child.1", "f-1"):
            assert f'href="/runs/{run_id}"' in every
        assert re.search(r"completed <b>2</b>", every)
        assert re.search(r"all <b>3</b>", every)
        # End and duration columns.
        assert "<th>Ended</th><th>Duration</th>" in text
        assert re.search(r'<td class="duration">\d+ms</td>', text)
        # Search by id or prefix (every run, children too).
        found = (await http.get("/", params={"id": "t-1"})).text
        assert 'href="/runs/t-1"' in found
        assert 'href="/runs/t-1.child.1"' in found
        assert 'href="/runs/f-1"' not in found
        assert 'href="/runs/t-1"' not in (await http.get("/", params={"id": "T-1"})).text

        failed = (await http.get("/", params={"status": "failed"})).text
        assert 'href="/runs/f-1"' in failed
        assert 'href="/runs/t-1"' not in failed
        tagged = (await http.get("/", params={"tag": "blue", "workflow": ""})).text
        assert 'href="/runs/t-1"' in tagged
        assert 'href="/runs/f-1"' not in tagged
        children = (await http.get("/", params={"parent": "t-1"})).text
        assert 'href="/runs/t-1.child.1"' in children
        assert 'href="/runs/t-1"' not in children


async def test_the_runs_page_pages_by_cursor(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        for i in range(55):
            await engine.start(leaf, i, run_id=f"r-{i:02d}")
            await trio.sleep(1)
        first = (await http.get("/", params={"workflow": "leaf"})).text
        assert 'href="/runs/r-54"' in first
        assert 'href="/runs/r-04"' not in first
        older = re.search(r'class="older" href="([^"]+)"', first)
        assert older is not None
        second = (await http.get(older.group(1).replace("&amp;", "&"))).text
        assert [f"r-{i:02d}" for i in range(4, -1, -1)] == re.findall(
            r'href="/runs/(r-\d\d)"', second
        )
        assert 'class="older"' not in second


async def test_the_run_page_shows_the_timeline_fans_and_failed_members_first(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine, token="s3cret") as (engine, http):
        await engine.start(fan_out, 25, run_id="f-1")
        await finish(engine, "f-1")
        page = await http.get("/runs/f-1")
        assert page.status_code == 200
        text = page.text
        assert 'id="run-status" class="status status-failed">failed<' in text
        assert "gather_failed" in text
        # The fan of 25 is folded in the timeline, and shown as a fan block
        # with its progress bar: 22 completed, 3 failed.
        assert "fan of 25: member" in text
        assert 'class="count-completed">22<' in text
        assert 'class="count-failed">3<' in text
        # Failed members first, each with its error.
        members = re.findall(r'<tr class="entry status-(\w+)">\s*<td>(\d+)</td>', text)
        assert members == [("failed", "4"), ("failed", "18"), ("failed", "25")]
        assert "bad&lt;code&gt;" in text
        # The "all" tab pages every member in seq order.
        everything = (await http.get("/runs/f-1", params={"fan": 1, "failed": 0})).text
        seqs = re.findall(r'<tr class="entry status-\w+">\s*<td>(\d+)</td>', everything)
        assert seqs == [str(seq) for seq in range(1, 26)]
        # The action buttons that apply to a failed run, for the script to
        # send; cancelling or signalling it would be refused.
        for action in ("retry", "retry-from", "fork"):
            assert f'data-action="{action}" data-run="f-1"' in text
        for action in ("signal", "cancel"):
            assert f'data-action="{action}"' not in text


async def test_a_fan_page_is_50_members_with_prev_and_next(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(fan_out, 120, run_id="w")
        await finish(engine, "w")
        page = (await http.get("/runs/w", params={"fan": 1, "failed": 0, "offset": 50})).text
        seqs = re.findall(r'<tr class="entry status-\w+">\s*<td>(\d+)</td>', page)
        assert seqs == [str(seq) for seq in range(51, 101)]
        assert "Members 51 to 100 of 120" in page
        assert 'class="prev" href="/runs/w?fan=1&amp;failed=0&amp;offset=0#fan-1"' in page
        assert 'class="next" href="/runs/w?fan=1&amp;failed=0&amp;offset=100#fan-1"' in page
        last = (await http.get("/runs/w", params={"fan": 1, "failed": 0, "offset": 100})).text
        assert "Members 101 to 120 of 120" in last
        assert 'class="next"' not in last
        # A smaller page keeps its size in its links.
        small = (
            await http.get("/runs/w", params={"fan": 1, "failed": 0, "offset": 20, "limit": 20})
        ).text
        seqs = re.findall(r'<tr class="entry status-\w+">\s*<td>(\d+)</td>', small)
        assert seqs == [str(seq) for seq in range(21, 41)]
        assert 'href="/runs/w?fan=1&amp;limit=20&amp;failed=0&amp;offset=40#fan-1"' in small


async def test_hostile_names_and_errors_come_out_escaped(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(fan_out, 25, run_id="f-1", tags=[HOSTILE])
        await finish(engine, "f-1")
        for path in ("/", "/runs/f-1", "/runs/f-1?fan=1&failed=1"):
            text = (await http.get(path)).text
            assert HOSTILE not in text
            assert "<script>alert" not in text
        run_page = (await http.get("/runs/f-1")).text
        assert "member 3 says &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in run_page
        # The only scripts are the console's own.
        assert re.findall(r"<script[^>]*>", run_page) == ['<script src="/static/console.js" defer>']


async def test_the_run_page_links_parents_children_and_on_error_handlers(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(tree, 1, run_id="t-1")
        await engine.result("t-1")
        await engine.start(fragile, run_id="x-1")
        await engine.result("x-1")
        parent = (await http.get("/runs/t-1")).text
        assert '<a class="child" href="/runs/t-1.child.1">' in parent
        child = (await http.get("/runs/t-1.child.1")).text
        assert '<a class="parent" href="/runs/t-1">' in child
        failing = (await http.get("/runs/x-1")).text
        assert '<a class="handler" href="/runs/x-1.onError.0">' in failing
        assert "it blew up" in failing
        handler = (await http.get("/runs/x-1.onError.0")).text
        assert '<a class="handles" href="/runs/x-1">' in handler


async def test_the_run_page_shows_payloads_durations_a_chart_and_fitting_actions(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine, token="s3cret") as (engine, http):
        await engine.start(gift, "socks <b>", run_id="g-1")
        assert await engine.result("g-1") == "wrapped socks <b>"
        text = (await http.get("/runs/g-1")).text
        # The run's input and output, and the step's, for the JSON viewer
        # (escaped in its attribute) and as text before it runs.
        assert 'data-key="run-input" data-json="[&#34;socks &lt;b&gt;&#34;]"' in text
        assert 'data-key="run-output" data-json="&#34;wrapped socks &lt;b&gt;&#34;"' in text
        assert 'data-key="tl-in-1" data-json="[&#34;socks &lt;b&gt;&#34;]"' in text
        assert 'data-key="tl-out-1"' in text
        # Durations: the run's and each operation's, in the table and the chart.
        assert re.search(r'<dd class="run-duration">\d+ms</dd>', text)
        assert re.search(r'<td class="took">\d+ms</td>', text)
        assert '<svg class="chart"' in text
        assert len(re.findall(r'<g class="row', text)) == 2
        assert 'class="bar-completed"' in text
        # Times are exact on hover, for the script to show as relative.
        assert re.search(r'<time class="ago" datetime="[^"]+Z" title="[^"]+Z">', text)
        # A completed run offers neither cancel, nor retry, nor a signal.
        for action in ("cancel", "retry", "signal"):
            assert f'data-action="{action}"' not in text
        assert 'data-action="fork"' in text


async def test_the_run_page_shows_each_attempts_duration_in_the_table_and_the_chart(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    shaky_calls.clear()
    async with console(open_test_engine) as (engine, http):
        await engine.start(steadied, run_id="s-1")
        assert await engine.result("s-1") == "steady"
        text = (await http.get("/runs/s-1")).text
    # Three attempts of 2 s, with 1 s then 2 s of backoff between them: the
    # step took 9 s, each attempt 2 s.
    assert '<td class="took">9.00s</td>' in text
    attempts = re.findall(
        r'<div class="attempt">attempt (\d) <small class="took"[^>]*>([^<]+)<', text
    )
    assert attempts == [("1", "2.00s"), ("2", "2.00s"), ("3", "2.00s")]
    assert '<span class="status status-completed">completed</span>' in text
    # On the chart: the step's bar, and its attempts on it.
    drawn = re.findall(r'<rect class="attempt bar-(\w+)"[^>]*><title>([^<]*)</title>', text)
    assert [status for status, _ in drawn] == ["failed", "failed", "completed"]
    assert "attempt 1 (failed)" in drawn[0][1]
    assert "took 2.00s: shaky call 1" in drawn[0][1]


async def test_a_step_in_a_queues_line_says_its_place(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    # No worker serves the postroom: the first three hold the queue's three
    # slots, the last two wait in its line, in the order they came.
    async with console(open_test_engine) as (engine, http):
        for letter in range(5):
            await engine.start(mailing, letter, run_id=f"m-{letter}")
            await engine.drain()
        [entry] = (await engine.history("m-4")).entries
        assert entry.queue == "mail"
        assert await engine.queue_position("mail", "m-3", 1) == 1
        assert await engine.queue_position("mail", "m-4", 1) == 2
        assert await engine.queue_position("mail", "m-0", 1) is None
        fourth = (await http.get("/runs/m-3")).text
        last = (await http.get("/runs/m-4")).text
        first = (await http.get("/runs/m-0")).text
    said = "waiting for a slot of queue &#39;mail&#39;: queued at position {} of 2 (2 waiting, 3 admitted)"
    assert f'<span class="why">{said.format(1)}</span>' in fourth
    assert f'<span class="why">{said.format(2)}</span>' in last
    assert "queued at position" not in first


async def test_a_pending_step_says_why_it_waits_and_since_when(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(waits, "tea", run_id="w-1")
        with trio.move_on_after(5):
            await engine.result("w-1")
        text = (await http.get("/runs/w-1")).text
        assert 'id="run-status" class="status status-suspended">suspended<' in text
        assert (
            '<span class="why">no live worker of group nobody: the task waits on memory://</span>'
            in text
        )
        assert re.search(r'waiting <time class="ago since" datetime="[^"]+"', text)
        # Cancel and signal apply; retry does not.
        assert 'data-action="cancel"' in text
        assert 'data-action="signal"' in text
        assert 'id="retry"' not in text


async def test_a_run_handed_to_its_handler_shows_failed_handled_by_it(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(fragile, run_id="x-2")
        assert await engine.result("x-2") == "handled x-2"
        text = (await http.get("/runs/x-2")).text
        assert (
            '<span id="run-status" class="status status-handled">failed, handled by'
            ' <a class="handled-by" href="/runs/x-2.onError.0">x-2.onError.0</a></span>' in text
        )
        assert "the handler's outcome: completed" in text
        assert 'class="status status-completed">completed</span></h1>' not in text
        handler = (await http.get("/runs/x-2.onError.0")).text
        assert '<a class="handles" href="/runs/x-2">' in handler
        # The step's traceback: the test's frame said first, the engine's folded.
        assert re.search(r"raised in <code>[^<]*test_console_pages\.py:\d+ in explode</code>", text)
        assert '<details class="own-frames"><summary>' in text
        # The runs list says so too, not plain completed.
        listed = (await http.get("/?id=x-2")).text
        assert (
            '<span class="status status-handled" title="the handler\'s outcome: completed">'
            'failed, handled by <a class="handled-by" href="/runs/x-2.onError.0">x-2.onError.0</a>'
            in listed
        )
        # The handler's own row: its outcome.
        handler_row = listed.split('<a href="/runs/x-2.onError.0">x-2.onError.0</a></td>')[1]
        assert handler_row.split("</tr>")[0].count("status-completed") == 1


async def test_the_fleet_page_shows_groups_workers_and_unserved_routes(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        [worker] = (await engine.fleet()).workers
        text = (await http.get("/fleet")).text
        assert '<tr class="group" data-group="g">' in text
        assert f"1 <small>{worker.instance_id}</small>" in text
        assert "<tr><td>member</td><td>g</td>" in text
        assert "Live workers agree." in text
        assert "Every on-error handler is served." in text
        # The embedded worker announced itself once on the memory broker,
        # with no heartbeat: the page says so, so its age alarms nobody.
        assert worker.held
        assert "held until withdrawn (no heartbeat)" in text
        assert "no load reported (no heartbeat)" in text


async def test_the_fleet_page_of_a_client_without_a_broker_says_so() -> None:
    async with td.open_client("memory://") as client:
        transport = httpx.ASGITransport(app=console_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
            page = await http.get("/fleet")
            assert page.status_code == 200
            assert "No broker configured" in page.text
            queues = await http.get("/queues")
            assert "No flow-control queue is registered or in use." in queues.text


async def test_the_queues_page_shows_limits_and_depths(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (_, http):
        text = (await http.get("/queues")).text
        assert "<td>mail</td>\n      <td>3</td>\n      <td>2</td>\n      <td>0</td>" in text


async def test_the_breakpoints_page_and_a_paused_run_offer_continue_and_skip(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine, token="t") as (engine, http):
        empty = (await http.get("/breakpoints")).text
        assert "No breakpoint is set." in empty
        assert "No run is paused." in empty
        bp = await engine.set_breakpoint(workflow="gift", step="wrap")
        await engine.start(gift, HOSTILE, run_id="g1")
        await engine.drain()
        text = (await http.get("/breakpoints")).text
        assert f'data-breakpoint="{bp.id}"' in text
        assert '<a href="/runs/g1">g1</a>' in text
        assert 'form data-action="continue" data-run="g1"' in text
        run = (await http.get("/runs/g1")).text
        assert "before step <b>wrap</b> (seq 1)" in run
        assert 'form data-action="skip" data-run="g1"' in run
        assert '<span class="status status-paused">paused</span>' in run
        # What the skip button sends, and the run goes on.
        headers = {"Authorization": "Bearer t"}
        answer = await http.post("/api/runs/g1/skip", json={"output": "by hand"}, headers=headers)
        assert answer.status_code == 200, answer.text
        assert await engine.result("g1") == "by hand"
        assert "No run is paused." in (await http.get("/breakpoints")).text
        assert "status-paused" not in (await http.get("/runs/g1")).text


async def test_unknown_runs_and_bad_input_get_their_error_pages(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(fan_out, 25, run_id="f-1")
        await finish(engine, "f-1")
        missing = await http.get("/runs/nope<b>")
        assert missing.status_code == 404
        assert missing.headers["content-type"].startswith("text/html")
        assert "no run &#39;nope&lt;b&gt;&#39;" in missing.text
        for path, message in [
            ("/?status=weird", "status must be one of"),
            ("/?cursor=garbage", "malformed cursor"),
            ("/runs/f-1?offset=-1", "offset must be an integer &gt;= 0"),
            ("/runs/f-1?fan=2", "has no fan starting at seq 2"),
            ("/runs/f-1?fan=1&failed=maybe", "failed must be 0 or 1"),
            ("/runs/f-1?fan=1&limit=0", "limit must be an integer from 1 to 100"),
            ("/runs/f-1?fan=1&limit=101", "limit must be an integer from 1 to 100"),
        ]:
            bad = await http.get(path)
            assert (bad.status_code, path) == (400, path)
            assert message in bad.text
            assert bad.headers["content-type"].startswith("text/html")


async def test_a_page_answers_a_matching_if_none_match_with_304(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(leaf, 1, run_id="l-1")
        await engine.result("l-1")
        for path in ("/", "/runs/l-1", "/fleet", "/queues"):
            first = await http.get(path)
            etag = first.headers["etag"]
            again = await http.get(path, headers={"If-None-Match": etag})
            assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", etag)
            weak = await http.get(path, headers={"If-None-Match": f'"other", W/{etag}'})
            assert weak.status_code == 304
        before = (await http.get("/")).headers["etag"]
        await engine.start(leaf, 2, run_id="l-2")
        await engine.result("l-2")
        changed = await http.get("/", headers={"If-None-Match": before})
        assert changed.status_code == 200
        assert 'href="/runs/l-2"' in changed.text
        assert changed.headers["etag"] != before


async def test_the_static_files_are_served(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (_, http):
        script = await http.get("/static/console.js")
        assert script.status_code == 200
        assert "If-None-Match" in script.text
        style = await http.get("/static/console.css")
        assert style.status_code == 200
        assert style.headers["content-type"].startswith("text/css")


async def test_mounted_under_a_prefix_the_pages_link_under_it(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    async with open_test_engine(app, serve=["g"]) as engine:
        await engine.start(leaf, 1, run_id="l-1")
        await engine.result("l-1")
        outer = Starlette(routes=[Mount("/ops", app=console_app(engine))])
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(transport=transport, base_url="http://site") as http:
            text = (await http.get("/ops/")).text
            assert 'href="/ops/runs/l-1"' in text
            assert '<script src="/ops/static/console.js" defer>' in text
            assert 'data-base="/ops"' in text
            assert (await http.get("/ops/static/console.css")).status_code == 200
            assert 'href="/ops/fleet"' in (await http.get("/ops/runs/l-1")).text
