"""Helpers for tests that run ``trio-durable`` as real processes: start one,
wait for a line of its output, signal it, wait for runs in the store."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

import trio_durable as td

TESTS: Final = Path(__file__).parent
ROOT: Final = TESTS.parent
CONSOLE_SCRIPT: Final = Path(sys.executable).parent / "trio-durable"
WITHIN: Final = 60.0
"""Seconds a process may take to print an awaited line or to exit (a
loaded machine starts a Python process slowly)."""


def read_terminal(leader: int, process: subprocess.Popen[bytes], within: float = WITHIN) -> bytes:
    """What ``process`` shows on the pseudo-terminal whose leader end is
    ``leader``, until it closes it. A process that still holds it after
    ``within`` seconds is killed, and the test fails: a hung command never
    blocks the run."""
    deadline = time.monotonic() + within
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            process.kill()
            process.wait(timeout=within)
            raise AssertionError(f"{process.args!r} still ran after {within} s: {shown!r}")
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            return shown
        if not chunk:
            return shown
        shown += chunk


@attrs.define
class CliProcess:
    """A running ``trio-durable`` process and what it printed so far (stdout
    and stderr together, line by line)."""

    process: trio.Process
    lines: list[str] = attrs.field(factory=list)
    _changed: trio.Event = attrs.field(factory=trio.Event)
    _ended: bool = False

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    async def read_output(self) -> None:
        assert self.process.stdout is not None
        pending = b""
        async for chunk in self.process.stdout:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            self.lines.extend(line.decode(errors="replace") for line in complete)
            self._changed.set()
            self._changed = trio.Event()
        if pending:
            self.lines.append(pending.decode(errors="replace"))
        self._ended = True
        self._changed.set()

    async def wait_for(self, text: str) -> str:
        """The first line holding ``text``, once the process printed it.

        Raises:
          AssertionError: The process closed its output (exited) first.
          trio.TooSlowError: It took longer than `WITHIN`.
        """
        with trio.fail_after(WITHIN):
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                if self._ended:
                    status = await self.process.wait()
                    raise AssertionError(
                        f"exited with {status} without printing {text!r}:\n{self.output}"
                    )
                await self._changed.wait()

    async def stop(self, signum: int) -> int:
        """Send ``signum`` and wait for the exit status."""
        self.process.send_signal(signum)
        return await self.exited()

    async def exited(self) -> int:
        with trio.fail_after(WITHIN):
            return await self.process.wait()


@asynccontextmanager
async def cli_process(
    args: Sequence[str],
    *,
    cwd: Path = TESTS,
    env: Mapping[str, str] | None = None,
    console_script: bool = False,
) -> AsyncIterator[CliProcess]:
    """Run ``python -m trio_durable ARGS`` (or the ``trio-durable`` console
    script) while the block lasts; one still running at the end is killed."""
    command = [str(CONSOLE_SCRIPT)] if console_script else [sys.executable, "-m", "trio_durable"]
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TRIO_DURABLE_STORE", "TRIO_DURABLE_BROKER")
    }
    environment.update(env or {})
    process = await trio.lowlevel.open_process(
        [*command, *args],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    running = CliProcess(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(running.read_output)
            try:
                yield running
            finally:
                if process.returncode is None:
                    process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()
    finally:
        if process.stdout is not None:
            await process.stdout.aclose()


async def start_runs(
    store: str, starts: Sequence[tuple[str, str, tuple[object, ...]]], namespace: str = "default"
) -> None:
    """Start runs ``(run_id, workflow, args)`` of `cli_app.app` from this
    process through a client, which only writes them: the engine under test
    executes them. (An engine here would run their first turns itself, and
    a remote step it sent to a broker of its own would die with it.)"""
    import cli_app

    async with td.open_client(store, app=cli_app.app) as client:
        for run_id, workflow, args in starts:
            await client.start(workflow, *args, run_id=run_id, namespace=namespace)


async def wait_for_runs(
    store: str, run_ids: Sequence[str], statuses: Sequence[str] = ("completed",)
) -> dict[str, td.Run]:
    """The runs, once each is in one of ``statuses`` (polled: another
    process writes them)."""
    async with td.open_store(store) as opened:
        with trio.fail_after(WITHIN):
            while True:
                runs = {run_id: await opened.get_run(run_id) for run_id in run_ids}
                if all(r is not None and r.status in statuses for r in runs.values()):
                    return {run_id: run for run_id, run in runs.items() if run is not None}
                await trio.sleep(0.05)


async def read_runs(store: str, run_ids: Sequence[str]) -> dict[str, td.Run]:
    """The runs as stored now."""
    async with td.open_store(store) as opened:
        found = {run_id: await opened.get_run(run_id) for run_id in run_ids}
    assert all(run is not None for run in found.values()), found
    return {run_id: run for run_id, run in found.items() if run is not None}
