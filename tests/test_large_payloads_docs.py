"""The code of docs/large-payloads.md runs as the page says: each of its
blocks is this module's code (a test checks that), and the tests below run
them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio_durable as td
from trio_durable.testing.conformance import check_blob_store

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "large-payloads.md"

# -- "Turning it on" --------------------------------------------------------------------

app = td.App("reports")


@app.step(group="render")
async def render(rows: list[str]) -> str:
    return "\n".join(rows).upper()


@app.workflow()
async def report(ctx: td.Context, rows: list[str]) -> str:
    return await ctx.step(render, rows)


async def make_report(store_url: str, directory: str) -> str:
    blobs = td.LocalBlobStore(directory)
    async with (
        td.open_engine(app, store=store_url, broker="memory://reports", blobs=blobs) as engine,
        td.open_worker(app, broker="memory://reports", groups=["render"], blobs=blobs),
    ):
        rows = [f"row {n}" for n in range(200_000)]  # about 2.4 MB of JSON
        run = await engine.start(report, rows, run_id="report-1")
        text: str = await engine.result(run.id)
        return text


async def read_report(store_url: str, directory: str) -> str:
    async with td.open_client(store_url, blobs=td.LocalBlobStore(directory)) as client:
        text: str = await client.result("report-1")
        return text


# -- "Missing blobs" --------------------------------------------------------------------


async def read_without_the_blob_store(store_url: str) -> str:
    async with td.open_client(store_url) as client:
        try:
            text: str = await client.result("report-1")
        except td.BlobNotFound as exc:
            return f"missing: {exc.key}"
        return text


# -- "Garbage collection with retention" ------------------------------------------------


async def prune_reports(store_url: str, directory: str) -> int:
    async with td.open_engine(app, store=store_url, blobs=directory, blob_grace=0) as engine:
        return await engine.prune(td.Retention(completed=0))


# -- "Writing a blob store" -------------------------------------------------------------


class DictBlobStore:
    """A blob store in a dict (for tests: it lives as long as the object)."""

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[bytes, float]] = {}

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        self.blobs[key] = (data, at)

    async def get(self, key: str) -> bytes:
        try:
            data = self.blobs[key][0]
        except KeyError:
            raise td.BlobNotFound(key) from None
        if key.startswith("sha256-") and key != "sha256-" + hashlib.sha256(data).hexdigest():
            raise td.BlobCorrupted(key)
        return data

    async def stat(self, key: str) -> td.BlobInfo | None:
        if key not in self.blobs:
            return None
        data, at = self.blobs[key]
        return td.BlobInfo(key=key, size=len(data), stored_at=at)

    async def delete(self, key: str) -> None:
        self.blobs.pop(key, None)

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[td.BlobInfo]:
        keys = sorted(key for key in self.blobs if after is None or key > after)
        return [info for key in keys[:limit] if (info := await self.stat(key)) is not None]


@asynccontextmanager
async def open_dict_blob_store() -> AsyncIterator[td.BlobStore]:
    yield DictBlobStore()


async def test_dict_blob_store() -> None:
    await check_blob_store(open_dict_blob_store)


# -- the tests --------------------------------------------------------------------------


async def test_the_page_runs_as_it_says(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'reports.db'}"
    directory = str(tmp_path / "blobs")
    expected = "\n".join(f"ROW {n}" for n in range(200_000))
    assert await make_report(store_url, directory) == expected
    blobs = td.LocalBlobStore(directory)
    assert len(await blobs.list()) == 2  # the rows, and the report
    assert await read_report(store_url, directory) == expected
    assert (await read_without_the_blob_store(store_url)).startswith("missing: sha256-")
    assert await prune_reports(store_url, directory) == 1
    assert await blobs.list() == []


async def test_the_dict_blob_store_serves_an_engine(tmp_path: Path) -> None:
    blobs = DictBlobStore()
    async with td.open_engine(app, serve=["render"], blobs=blobs, blob_threshold=100) as engine:
        run = await engine.start(report, ["a" * 200])
        assert await engine.result(run.id) == "A" * 200
    assert len(blobs.blobs) == 2


def _code(text: str) -> str:
    """``text`` without its import lines and blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 5
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block
