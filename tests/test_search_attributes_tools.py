"""Search attributes in the tools: ``trio-durable runs list --where`` and
``runs show``, the console's runs page (its filter) and run page (the
attributes, each a link to the runs sharing it), and the API's
``/api/runs?where=``."""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from test_cli import invoke, one_error_line
from trio_durable.console import console_app

DUE = datetime.datetime(2026, 12, 4, 9, 30, tzinfo=datetime.UTC)

app = td.App("search-tools")
app.search_attribute("customer", str)
app.search_attribute("amount", int)
app.search_attribute("vip", bool)
app.search_attribute("due", datetime.datetime)
app.search_attribute("labels", list[str])


@app.workflow()
async def order(ctx: td.Context, n: int) -> int:
    return n


async def _fill(store: str) -> None:
    async with td.open_engine(app, store=store, seed=0) as engine:
        for i in range(4):
            await engine.start(
                order,
                i,
                run_id=f"o{i}",
                search_attributes={
                    "customer": "acme" if i % 2 else "beta, inc",
                    "amount": i * 10,
                    "vip": i == 3,
                    "due": DUE + datetime.timedelta(days=i),
                    "labels": ["all", f"n{i}"],
                },
            )
            await trio.sleep(0.01)
        await engine.drain()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    path = tmp_path_factory.mktemp("search") / "search.db"
    trio.run(_fill, f"sqlite:///{path}")
    return {"TRIO_DURABLE_STORE": f"sqlite:///{path}"}


def _listed(store: dict[str, str], *where: str) -> list[str]:
    args = ["runs", "list", "--json"]
    for condition in where:
        args += ["--where", condition]
    result = invoke(args, env=store)
    assert result.exit_code == 0, result.output
    return [run["id"] for run in json.loads(result.stdout)["runs"]]


def test_runs_list_where(store: dict[str, str]) -> None:
    assert _listed(store, "customer=acme") == ["o3", "o1"]
    assert _listed(store, "customer=beta, inc") == ["o2", "o0"]
    assert _listed(store, "amount>=10", "amount<30") == ["o2", "o1"]
    assert _listed(store, "amount>20") == ["o3"]
    assert _listed(store, "amount<=10") == ["o1", "o0"]
    assert _listed(store, "vip=true") == ["o3"]
    assert _listed(store, "vip=False") == ["o2", "o1", "o0"]
    assert _listed(store, "labels=n2") == ["o2"]
    assert _listed(store, "labels=all", "customer=acme") == ["o3", "o1"]
    assert _listed(store, "due>=2026-12-06T00:00:00Z") == ["o3", "o2"]
    assert _listed(store, "due=2026-12-05T10:30:00+01:00") == ["o1"]


def test_runs_list_shows_attributes_in_json_and_tables(store: dict[str, str]) -> None:
    result = invoke(["runs", "list", "--json", "--where", "amount=30"], env=store)
    [run] = json.loads(result.stdout)["runs"]
    assert run["search_attributes"] == {
        "amount": 30,
        "customer": "acme",
        "due": "2026-12-07T09:30:00+00:00",
        "labels": ["all", "n3"],
        "vip": True,
    }
    shown = invoke(["runs", "show", "o3"], env=store)
    assert shown.exit_code == 0, shown.output
    assert re.search(r"search: customer\s+│\s+acme", shown.stdout), shown.stdout
    assert "2026-12-07T09:30:00+00:00" in shown.stdout


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("nope=1", "no search attribute 'nope' is declared in the store"),
        ("amount=ten", "search attribute 'amount' is int: 'ten' is not such a value"),
        ("vip=yes", "is bool: 'yes' is not such a value"),
        ("due=2026-12-05", "takes an aware datetime"),
        ("customer>=a", "is str: only = applies to it, not >="),
        ("labels<b", "is keywords: only = applies to it"),
        ("amount", "a search condition is NAME=VALUE"),
        ("amount>=1 ", None),
    ],
)
def test_runs_list_refuses_bad_conditions(
    store: dict[str, str], where: str, message: str | None
) -> None:
    result = invoke(["runs", "list", "--where", where], env=store)
    if message is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    assert message in one_error_line(result)


def test_runs_list_refuses_a_condition_given_twice(store: dict[str, str]) -> None:
    result = invoke(["runs", "list", "--where", "amount=1", "--where", "amount=2"], env=store)
    assert result.exit_code == 2
    assert "search attribute 'amount' is given twice" in one_error_line(result)


# -- the console ------------------------------------------------------------------------


@asynccontextmanager
async def console(
    open_test_engine: EngineFactory,
) -> AsyncIterator[tuple[td.Engine, httpx.AsyncClient]]:
    async with (
        open_test_engine(app) as engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=console_app(engine)), base_url="http://console"
        ) as http,
    ):
        for i in range(3):
            await engine.start(
                order,
                i,
                run_id=f"c{i}",
                search_attributes={
                    "customer": "acme & co" if i else "beta",
                    "amount": i,
                    "labels": ["x", f"k{i}"],
                    "due": DUE,
                    "vip": i == 2,
                },
            )
            await trio.sleep(1)
        await engine.drain()
        yield engine, http


async def test_the_console_filters_runs_and_shows_their_attributes(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with console(open_test_engine) as (_, http):
        page = (await http.get("/", params={"where": "customer=acme & co"})).text
        assert 'href="/runs/c1"' in page
        assert 'href="/runs/c2"' in page
        assert 'href="/runs/c0"' not in page
        assert 'name="where"' in page
        assert 'value="customer=acme &amp; co"' in page
        ranged = (await http.get("/", params={"where": "amount>=2"})).text
        assert 'href="/runs/c2"' in ranged
        assert 'href="/runs/c1"' not in ranged
        bad = await http.get("/", params={"where": "amount=x"})
        assert bad.status_code == 400
        assert "is int: &#39;x&#39; is not such a value" in bad.text

        run_page = (await http.get("/runs/c2")).text
        assert "Search attributes" in run_page
        # Each value links to the runs that share it.
        for term in ("customer=acme &amp; co", "amount=2", "labels=x", "labels=k2", "vip=true"):
            assert f">{term}</a>" in run_page, term
        assert "/?where=customer%3Dacme+%26+co" in run_page
        assert "due=2026-12-04T09:30:00+00:00" in run_page
        linked = (await http.get("/?where=labels%3Dx")).text
        assert all(f'href="/runs/c{i}"' in linked for i in range(3))


async def test_the_api_filters_runs_by_where(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (_, http):
        answer = await http.get("/api/runs", params=[("where", "labels=x"), ("where", "amount<2")])
        assert answer.status_code == 200, answer.text
        runs = answer.json()["runs"]
        assert [run["id"] for run in runs] == ["c1", "c0"]
        assert runs[0]["search_attributes"] == {
            "amount": 1,
            "customer": "acme & co",
            "due": "2026-12-04T09:30:00+00:00",
            "labels": ["x", "k1"],
            "vip": False,
        }
        detail = (await http.get("/api/runs/c2")).json()
        assert detail["run"]["search_attributes"]["vip"] is True
        bad = await http.get("/api/runs", params={"where": "nope=1"})
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "bad_parameter"
        assert "no search attribute 'nope'" in bad.json()["error"]["message"]
