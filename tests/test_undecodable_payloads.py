"""A run whose payloads an engine cannot decode (a blob missing or altered
where it is kept, no codec or no blob store where they were used) is
reported on the run once, where `trio-durable runs show` and the console
show it, and waits, suspended, for an engine that can: tried again a minute
on, never in a loop. Once the payloads can be read (the blob written again,
which repairs an altered one), the run goes on and the report is cleared.
Also: `LocalBlobStore` checks what it reads against the key and repairs
what it is given again. (A missing key: tests/test_codecs.py.)"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from test_cli import invoke
from trio_durable._stores._base import TurnState
from trio_durable._stores._wrapping import StoreWrapper
from trio_durable.console import console_app

RING1: Final = td.Keyring.single(bytes(range(16)), "k1")
TEXT: Final = "payload " * 200

app = td.App("undecodable")


@app.workflow()
async def naps(ctx: td.Context, text: str) -> int:
    await ctx.sleep(10)
    return len(text)


class CountsTurns(StoreWrapper):
    """A store that counts the turns begun on it, by run."""

    def __init__(self, inner: td.Store) -> None:
        self.inner = inner
        self.begun: dict[str, int] = {}

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        self.begun[run_id] = self.begun.get(run_id, 0) + 1
        return await self.inner.begin_turn(run_id, owner, expiry, now)


@asynccontextmanager
async def engine_on(store: str | td.Store, **options: Any) -> AsyncIterator[td.Engine]:
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall, **options) as e:
        yield e


async def started(store: str | td.Store, **options: Any) -> None:
    """Run ``r`` of `naps` started with ``options`` and left asleep till t=10."""
    async with engine_on(store, **options) as engine:
        await engine.start(naps, TEXT, run_id="r")
        await engine.drain()


def reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "cannot be decoded" in record.getMessage()
    ]


async def reported(store: td.Store) -> td.Run:
    async with td.open_client(store) as client:
        run = await client.get("r")
    assert run.status == "suspended"
    assert run.error is not None
    assert run.error.code == "payload_undecodable"
    return run


async def test_a_missing_blob_is_reported_once_and_the_run_waits(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    memory = td.MemoryStore()
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    await started(memory, blobs=blobs, blob_threshold=100)
    [info] = await blobs.list()
    kept = await blobs.get(info.key)
    await blobs.delete(info.key)
    counted = CountsTurns(memory)
    async with engine_on(counted, blobs=blobs, blob_threshold=100) as engine:
        await trio.sleep(400 - trio.current_time())
        run = await reported(memory)
        assert run.error is not None
        assert (run.error.type, run.error.details) == ("BlobNotFound", {"blob": info.key})
        assert f"blob {info.key!r} is not in the blob store" in run.error.message
        assert "the run waits for an engine that can" in run.error.message
        # Tried at 10 s, then once a minute: never in a loop.
        assert counted.begun["r"] == 7
        assert run.wake_at == fixed_wall() - 400 + 430
        assert (run.lease_owner, run.recoveries) == (None, 0)
        assert len(reports(caplog)) == 1
        # The blob back, the run goes on at its next try.
        await blobs.put(info.key, kept, at=fixed_wall())
        assert await engine.result("r") == len(TEXT)
        assert trio.current_time() == 430
        assert (await engine.get("r")).error is None


async def test_a_blob_altered_on_disk_is_reported_and_a_put_repairs_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    memory = td.MemoryStore()
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    await started(memory, blobs=blobs, blob_threshold=100)
    [info] = await blobs.list()
    file = tmp_path / "blobs" / info.key
    kept = file.read_bytes()
    file.write_bytes(kept.replace(b"payload", b"PAYLOAD", 1))
    with pytest.raises(td.BlobCorrupted) as caught:
        await blobs.get(info.key)
    assert caught.value.key == info.key
    assert isinstance(caught.value, td.StoreError)
    async with engine_on(memory, blobs=blobs, blob_threshold=100) as engine:
        await trio.sleep(20 - trio.current_time())
        run = await reported(memory)
        assert run.error is not None
        assert (run.error.type, run.error.details) == ("BlobCorrupted", {"blob": info.key})
        # Another run with the same input writes its blob again: repaired.
        assert await engine.result((await engine.start(naps, TEXT, run_id="again")).id) == len(TEXT)
        assert file.read_bytes() == kept
        assert await engine.result("r") == len(TEXT)
    assert len(reports(caplog)) == 1


@pytest.mark.parametrize(
    ("written", "read", "error_type", "said"),
    [
        pytest.param(
            {"codec": td.AesGcmCodec(RING1)},
            {},
            "CodecError",
            "a payload is encrypted with key 'k1', and no codec (codec=) was configured",
            id="no-codec",
        ),
        pytest.param(
            {"blob_threshold": 100},
            {},
            "BlobNotFound",
            "but none was configured (blobs=) to read it",
            id="no-blob-store",
        ),
    ],
)
async def test_an_engine_without_the_layer_reports_the_run_and_leaves_it(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    written: dict[str, Any],
    read: dict[str, Any],
    error_type: str,
    said: str,
) -> None:
    memory = td.MemoryStore()
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    if "blob_threshold" in written:
        written = {**written, "blobs": blobs}
    await started(memory, **written)
    # Before the marks, this engine ran the body on the envelope (or the
    # reference) as if it were the input; now it reports the run.
    async with engine_on(memory, **read):
        await trio.sleep(200 - trio.current_time())
    run = await reported(memory)
    assert run.error is not None
    assert run.error.type == error_type
    assert said in run.error.message
    assert len(reports(caplog)) == 1
    async with engine_on(memory, **written) as engine:
        assert await engine.result("r") == len(TEXT)


def _show(url: str, args: Sequence[str] = ()) -> str:
    shown = invoke(["runs", "show", "r", "--store", url, *args])
    assert shown.exit_code == 0, shown.output
    return shown.stdout


def test_the_report_shows_in_runs_show_and_the_console(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    blobs = td.LocalBlobStore(tmp_path / "blobs")

    async def fill() -> None:
        await started(url, blobs=blobs, blob_threshold=100)
        for info in await blobs.list():
            await blobs.delete(info.key)
        async with engine_on(url, blobs=blobs, blob_threshold=100):
            await trio.sleep(20)

    trio.run(fill, clock=trio.testing.MockClock(autojump_threshold=0))
    table = _show(url)
    assert "payload_undecodable" in table
    assert "cannot be decoded" in table
    assert "suspended" in table
    document = json.loads(_show(url, ["--json"]))
    error = document["run"]["error"]
    assert (error["code"], error["type"]) == ("payload_undecodable", "BlobNotFound")
    # Read without the blob store, the input is shown as what its mark says.
    assert document["run"]["input"]["blob"].startswith("sha256-")

    async def read_console() -> None:
        async with td.open_client(url) as client:
            transport = httpx.ASGITransport(app=console_app(client))
            async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
                run = (await http.get("/api/runs/r")).json()["run"]
                assert run["error"]["code"] == "payload_undecodable"
                assert run["input"]["blob"].startswith("sha256-")
                page = (await http.get("/runs/r")).text
                assert "payload_undecodable" in page
                assert "cannot be decoded" in page

    trio.run(read_console)


async def test_the_local_blob_store_checks_reads_and_repairs_on_put(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    data = b"the payload"
    key = "sha256-" + hashlib.sha256(data).hexdigest()
    await blobs.put(key, data, at=1_700_000_000.0)
    file = tmp_path / "blobs" / key
    for altered in (b"the PAYLOAD", b"the payload, longer", b""):
        file.write_bytes(altered)
        with pytest.raises(td.BlobCorrupted, match="does not match its key"):
            await blobs.get(key)
        await blobs.put(key, data, at=1_700_000_100.0)
        assert await blobs.get(key) == data
    # What holds the bytes already is not written again, only stamped.
    inode = file.stat().st_ino
    await blobs.put(key, data, at=1_700_000_200.0)
    assert file.stat().st_ino == inode
    info = await blobs.stat(key)
    assert info is not None
    assert info.stored_at == 1_700_000_200.0
