"""Encrypted payloads in the console and the ``trio-durable`` command: shown
as such ("encrypted with k1") without the keys, decrypted with them
(``open_client(codec=)``, ``--codec-keys``, ``TRIO_DURABLE_CODEC_KEYS``)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

import trio_durable as td
from conftest import fixed_wall
from test_cli import invoke, one_error_line
from test_codecs import CARD, K1, RING1, app, checkout, declined
from trio_durable.console import console_app

KEYS = f"k1:{base64.b64encode(K1).decode()}"


async def _fill(url: str) -> None:
    async with td.open_engine(
        app, store=url, serve=["remote"], codec=td.AesGcmCodec(RING1), wall_clock=fixed_wall
    ) as engine:
        with pytest.raises(td.RunFailed):
            await engine.result((await engine.start(declined, CARD, run_id="bad-1")).id)
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.drain()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'coded.db'}"
    trio.run(_fill, url)
    return url


@asynccontextmanager
async def console(url: str, codec: td.PayloadCodec | None) -> AsyncIterator[httpx.AsyncClient]:
    async with td.open_client(url, codec=codec) as client:
        transport = httpx.ASGITransport(app=console_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
            yield http


def test_without_the_keys_the_console_shows_encrypted_payloads_as_such(store_url: str) -> None:
    async def main() -> None:
        async with console(store_url, None) as http:
            run = (await http.get("/api/runs/bad-1")).json()["run"]
            assert run["input"] == {"encrypted_with": "k1"}
            assert run["output"] is None
            assert run["error"]["message"] == "encrypted with k1"
            assert run["error"]["code"] == "declined"
            assert run["error"]["details"] == {"encrypted_with": "k1"}
            history = (await http.get("/api/runs/bad-1/history")).json()
            [entry] = history["entries"]
            assert entry["error"]["details"] == {"encrypted_with": "k1"}
            listed = (await http.get("/api/runs")).json()["runs"]
            assert {r["id"] for r in listed} == {"bad-1", "order-1"}
            page = (await http.get("/runs/bad-1")).text
            assert "encrypted with k1" in page
            # The run's input, in the viewer's place.
            assert '<span class="sealed">encrypted with k1</span>' in page
            assert "SECRET" not in page
            assert "$enc" not in page

    trio.run(main)


def test_with_the_keys_the_console_shows_payloads_decrypted(store_url: str) -> None:
    async def main() -> None:
        async with console(store_url, td.AesGcmCodec(RING1)) as http:
            run = (await http.get("/api/runs/bad-1")).json()["run"]
            assert run["input"] == [CARD]
            assert run["error"]["message"] == f"card {CARD} declined"
            assert run["error"]["details"] == {"card": CARD}
            order = (await http.get("/api/runs/order-1")).json()["run"]
            assert order["input"] == [{"card": CARD}]
            assert CARD in (await http.get("/runs/bad-1")).text

    trio.run(main)


def test_the_runs_commands_read_the_keys_from_the_environment(store_url: str) -> None:
    shown = invoke(["runs", "show", "bad-1", "--store", store_url, "--json"])
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert document["run"]["error"]["message"] == "encrypted with k1"
    assert CARD not in shown.stdout
    table = invoke(["runs", "show", "bad-1", "--store", store_url])
    assert "encrypted with k1" in table.stdout

    decrypted = invoke(
        ["runs", "show", "bad-1", "--store", store_url, "--json"],
        env={"TRIO_DURABLE_CODEC_KEYS": KEYS},
    )
    assert decrypted.exit_code == 0, decrypted.output
    run = json.loads(decrypted.stdout)["run"]
    assert run["input"] == [CARD]
    assert run["error"]["details"] == {"card": CARD}


@pytest.mark.parametrize(
    ("text", "said"),
    [("k1", "id:base64 pairs"), ("k1:AAAA", "at least 16 bytes"), ("k1:" + "A" * 28, "has 21")],
)
def test_bad_codec_keys_are_refused_with_a_usage_error(
    store_url: str, text: str, said: str
) -> None:
    refused = invoke(
        ["runs", "show", "bad-1", "--store", store_url], env={"TRIO_DURABLE_CODEC_KEYS": text}
    )
    assert refused.exit_code == 2
    line = one_error_line(refused)
    assert "TRIO_DURABLE_CODEC_KEYS" in line
    assert said in line
    console_refused = invoke(["console", "--store", store_url, "--codec-keys", text])
    assert console_refused.exit_code == 2
    assert "--codec-keys" in one_error_line(console_refused)
