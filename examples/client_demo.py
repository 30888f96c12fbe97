"""The client: controlling runs from a process that runs none of them.

An engine runs in a process of its own on a SQLite file. This process opens
a client on the same file, with no app: it starts two runs of the engine's
``approval`` workflow by name, signals the first and waits for its result,
cancels the second, and reads both back. The engine learns of each write
at once (see docs/client.md): nothing here waits for a lease to lapse or a
scan to come round.

Run it with ``python examples/client_demo.py [path/to/client-demo.db]``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

import trio_durable as td

app = td.App("approvals")


@app.workflow()
async def approval(ctx: td.Context, request: dict[str, Any]) -> str:
    decision = await ctx.wait_signal("decision", timeout=3600)
    return f"{request['what']}: {decision}"


async def serve(url: str) -> None:
    """The engine process: runs the app's workflows until its stdin closes."""
    async with td.open_engine(app, store=url):
        print("engine ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)


async def main(url: str) -> None:
    async with trio.open_nursery() as nursery:
        engine: trio.Process = await nursery.start(
            partial(
                trio.run_process,
                [sys.executable, __file__, "--engine", url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        )
        assert engine.stdin is not None
        assert engine.stdout is not None
        # Wait for the engine to be up (its first line).
        await engine.stdout.receive_some()
        async with td.open_client(url) as client:
            first = await client.start("approval", {"what": "laptop"}, run_id="req-1")
            second = await client.start("approval", {"what": "yacht"}, run_id="req-2")
            print(f"started {first.id} and {second.id} ({first.status})")

            began = time.perf_counter()
            await client.signal("req-1", "decision", "approved")
            print(f"req-1 -> {await client.result('req-1')!r}")
            print(f"  signal to result: {time.perf_counter() - began:.3f} s")

            await client.cancel("req-2")
            try:
                await client.result("req-2")
            except td.RunCancelled:
                print("req-2 -> cancelled")

            for run_id in ("req-1", "req-2"):
                run = await client.get(run_id)
                print(f"{run.id}: {run.status} (workflow {run.workflow} v{run.version})")
            try:
                await client.signal("req-1", "decision", "too late")
            except td.InvalidRunStateError as exc:
                print(f"refused: {exc}")
        await engine.stdin.aclose()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--engine"]:
        trio.run(serve, sys.argv[2])
    else:
        folder = tempfile.mkdtemp()
        path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(folder) / "client-demo.db"
        trio.run(main, f"sqlite:///{path}")
