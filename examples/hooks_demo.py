"""Webhooks and breakpoints (docs/webhooks-and-breakpoints.md).

An engine runs on a SQLite file and serves the console on a free local
port, read-only (no bearer token) but delivering webhooks, as a console
exposed for webhooks alone would. A client on the same file (its own store object, as another process
would have) sets a breakpoint on the ``charge`` step of ``refund``, so the
run pauses before charging; it is continued once a person has looked. The
workflow then creates a webhook and waits for it: an HTTP ``POST
/hooks/{token}`` (no bearer token: the webhook's token is the credential)
delivers the decision, and a second delivery of the same token is refused.

Run it with ``python examples/hooks_demo.py [path/to/hooks-demo.db]``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import trio

import trio_durable as td
from trio_durable.console import serve_console

app = td.App("refunds")
outbox: trio.MemorySendChannel[str] | None = None


@app.step()
async def charge(amount: int) -> str:
    return f"refunded {amount}"


@app.workflow()
async def refund(ctx: td.Context, amount: int) -> str:
    charged = await ctx.step(charge, amount)
    token = await ctx.webhook("confirmation")
    # Handed out here, not through a step: a step's arguments are
    # recorded, and the store is to hold no token.
    if outbox is not None:
        outbox.send_nowait(token)
    decision = await ctx.wait_signal("confirmation")
    return f"{charged}, customer says {decision['answer']}"


def post(url: str, body: Any) -> tuple[int, Any]:
    """POST ``body`` as JSON (in a worker thread): the status and the answer."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


async def main(path: Path) -> None:
    global outbox
    url = f"sqlite:///{path}"
    send, tokens = trio.open_memory_channel[str](1)
    outbox = send
    async with (
        td.open_engine(app, store=url, webhook_secret=b"the same on every engine!") as engine,
        td.open_store(url) as other,
        td.open_client(other) as client,
        trio.open_nursery() as nursery,
    ):
        console: str = await nursery.start(partial(serve_console, engine, port=0, webhooks=True))
        bp = await client.set_breakpoint(workflow="refund", step="charge")
        handle = await client.start("refund", 30, run_id="refund-1")
        # As a console would: look until the run shows as paused.
        while True:
            paused = await client.paused_steps("refund-1")
            if paused:
                break
            await trio.sleep(0.05)
        print(f"paused before {paused[0].step!r} (seq {paused[0].seq}) at {bp.id}")
        await client.clear_breakpoint(bp.id)
        await client.continue_run("refund-1")

        token = await tokens.receive()
        hook = f"{console}/hooks/{token}"
        print("webhook:", *await trio.to_thread.run_sync(post, hook, {"answer": "thanks"}))
        print("refund-1 ->", await client.result(handle.id))
        status, answer = await trio.to_thread.run_sync(post, hook, {"answer": "again"})
        print("again:", status, answer["error"]["code"])
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            trio.run(main, Path(folder) / "hooks-demo.db")
