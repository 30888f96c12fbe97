"""The console's events: ``GET /api/events`` (a page of events by id with
the runs they reached and the open debounce windows), ``GET
/api/events/{id}``, and the ``/events`` page, over an engine and over a
client with no app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from test_console_api import api, error_of

app = td.App("console-events")


@app.workflow(events=["order.placed"])
async def receipt(ctx: td.Context, order: dict[str, int]) -> int:
    return order["total"]


@app.workflow(events=["doc.edited"], debounce=30.0)
async def reindex(ctx: td.Context, doc: str) -> str:
    return f"indexed {doc}"


async def _send(engine: td.Engine) -> None:
    await engine.send_event("order.placed", {"total": 12}, event_id="ev-1")
    assert await engine.result("ev-1.receipt") == 12
    await engine.send_event("doc.edited", "a.md", key="a.md", event_id="ev-2")
    await trio.sleep(10.0)
    await engine.send_event("doc.edited", "a.md v2", key="a.md", event_id="ev-3")
    await engine.send_event("nobody.listens", None, event_id="ev-4")


async def test_the_events_api(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine, api(engine) as client:
        with pytest.warns(td.UnsubscribedEventWarning):
            await _send(engine)
        body = (await client.get("/api/events")).json()
        assert [e["event_id"] for e in body["events"]] == ["ev-1", "ev-2", "ev-3", "ev-4"]
        assert body["next_after"] is None
        first = body["events"][0]
        assert first == {
            "event_id": "ev-1",
            "name": "order.placed",
            "key": None,
            "payload": {"total": 12},
            "run_ids": ["ev-1.receipt"],
            "sent_at": WALL_START,
            "runs": [{"id": "ev-1.receipt", "workflow": "receipt", "status": "completed"}],
        }
        # The second edit joined the window the first opened: one run, waiting.
        joined = {"id": "ev-2.reindex", "workflow": "reindex", "status": "suspended"}
        assert body["events"][1]["runs"] == [joined]
        assert body["events"][2]["runs"] == [joined]
        assert body["events"][3]["runs"] == []
        assert body["windows"] == [
            {
                "workflow": "reindex",
                "key": "a.md",
                "run_id": "ev-2.reindex",
                "until": WALL_START + 40.0,
                "events": 2,
                "opened_at": WALL_START,
            }
        ]
        # Pages by id.
        page = (await client.get("/api/events?limit=2")).json()
        assert ([e["event_id"] for e in page["events"]], page["next_after"]) == (
            ["ev-1", "ev-2"],
            "ev-2",
        )
        page = (await client.get("/api/events?limit=2&after=ev-2")).json()
        assert ([e["event_id"] for e in page["events"]], page["next_after"]) == (
            ["ev-3", "ev-4"],
            None,
        )
        one = (await client.get("/api/events/ev-3")).json()
        assert one["runs"] == [joined]
        assert one["payload"] == "a.md v2"
        missing = await client.get("/api/events/nope")
        assert (missing.status_code, error_of(missing)) == (404, "event_not_found")
        for bad in ("limit=0", "limit=x", "other=1"):
            response = await client.get(f"/api/events?{bad}")
            assert response.status_code == 400, bad
        # Once the window ended its run starts: the window is no longer open.
        assert await engine.result("ev-2.reindex") == "indexed a.md v2"
        assert (await client.get("/api/events")).json()["windows"] == []


async def test_the_events_page(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine, api(engine) as client:
        with pytest.warns(td.UnsubscribedEventWarning):
            await _send(engine)
        text = (await client.get("/events")).text
        assert '<a href="/events" aria-current="page">Events</a>' in text
        row = text[text.index('data-event="ev-1"') : text.index('data-event="ev-2"')]
        assert '<a class="event-run" href="/runs/ev-1.receipt">ev-1.receipt</a>' in row
        assert '<span class="status status-completed">completed</span>' in row
        assert "none (no workflow subscribes)" in text
        windows = text[text.index('<table class="windows">') : text.index("<h2>Events")]
        assert re.search(
            r'<tr class="window" data-run="ev-2.reindex">\s*<td>reindex</td>\s*'
            r"<td><code>a.md</code></td>",
            windows,
        )
        assert '<td class="num">2</td>' in windows


async def test_a_client_without_an_app_lists_events_and_their_windows(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """With no app, the windows are found through the events' runs that
    still wait."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    async with open_test_engine(app, store=url) as engine:
        with pytest.warns(td.UnsubscribedEventWarning):
            await _send(engine)
    async with td.open_client(url, wall_clock=fixed_wall) as source, api(source) as client:
        body = (await client.get("/api/events")).json()
        assert len(body["events"]) == 4
        assert [w["run_id"] for w in body["windows"]] == ["ev-2.reindex"]
