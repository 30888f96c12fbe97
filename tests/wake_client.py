"""A client in a process of its own, for the tests of cross-process
wake-ups: ``python tests/wake_client.py STORE_URL ACTION RUN_ID``, where
ACTION is ``signal``, ``cancel``, ``retry`` or ``start`` (of ``wait_go``)."""

from __future__ import annotations

import sys

import trio

import trio_durable as td


async def main(url: str, action: str, run_id: str) -> None:
    async with td.open_client(url) as client:
        if action == "signal":
            await client.signal(run_id, "go", {"from": "another process"})
        elif action == "cancel":
            await client.cancel(run_id)
        elif action == "retry":
            await client.retry(run_id)
        elif action == "start":
            await client.start("wait_go", run_id=run_id)
        else:
            raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    url, action, run_id = sys.argv[1:]
    trio.run(main, url, action, run_id)
