"""The webhook endpoint is safe to expose (issue: a probe took an engine
from 178 to 900 MB with three 100 MB bodies and no credential): 20 bodies
of 100 MB to ``/hooks/not-a-token`` are answered before they are read, and
the engine serving them (a process of its own, measured from outside)
keeps its memory, while a normal request answers throughout."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

from cli_processes import TESTS
from raw_http import Upload, request, stream_until_answered

BODY: Final = 100 * 1024 * 1024
UPLOADS: Final = 20
WITHIN: Final = 20 * 1024
"""How much the serving process's memory may grow, in KiB."""


def resident_kib(pid: int) -> int:
    """The process's resident memory (VmRSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


@asynccontextmanager
async def engine_process(store: str) -> AsyncIterator[tuple[trio.Process, str, str]]:
    """`console_process` running: the process, its console's URL and a
    live webhook's token."""
    process = await trio.lowlevel.open_process(
        [sys.executable, str(TESTS / "console_process.py"), store],
        cwd=TESTS,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(60):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                assert chunk, "the engine process exited before serving"
                line += chunk
        url, token = line.decode().split()
        yield process, url, token
    finally:
        process.kill()
        with trio.CancelScope(shield=True), trio.fail_after(60):
            await process.wait()


async def test_unknown_tokens_are_answered_without_reading_100_mb_bodies(tmp_path: Path) -> None:
    async with engine_process(f"sqlite:///{tmp_path / 'exposed.db'}") as (process, url, token):
        # Warm up: the routes run once before the first measure.
        assert (await request(url, "GET", "/api/runs")).status == 200
        warm = await stream_until_answered(url, "/hooks/not-a-token", BODY)
        assert warm.answer is not None
        assert warm.answer.status == 404
        before = resident_kib(process.pid)
        uploads: list[Upload] = []
        normal: list[int] = []

        async def upload(chunked: bool) -> None:
            uploads.append(
                await stream_until_answered(url, "/hooks/not-a-token", BODY, chunked=chunked)
            )
            # A normal request answers throughout.
            normal.append((await request(url, "GET", "/api/runs")).status)

        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                for i in range(UPLOADS):
                    nursery.start_soon(upload, i % 2 == 1)
        after = resident_kib(process.pid)
        assert len(uploads) == UPLOADS
        for done in uploads:
            assert done.answer is not None
            assert done.answer.status == 404
            assert done.answer.json()["error"]["code"] == "webhook_not_found"
            # Answered while the body was on its way: at most what the
            # sockets' buffers hold went out.
            assert done.sent < BODY // 4
        assert normal == [200] * UPLOADS
        assert after - before < WITHIN, f"{before} KiB before, {after} KiB after"
        # The live webhook was never touched, and still delivers.
        delivered = await request(url, "POST", f"/hooks/{token}", body=b'"done"')
        assert delivered.status == 202
