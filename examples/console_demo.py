"""The console and its JSON API (docs/console.md, docs/http-api.md).

An engine on a SQLite file, with a worker of the ``carriers`` group in its
nursery, serves the console itself (``console=``) on a free local port,
with a bearer token. A fan of 40 shipments fails 4 of
them; the demo reads the run through the API as a browser or a script
would (its detail with the fan folded, a page of the failed members, a 304
for an unchanged run), is refused a retry without the token, then fixes
the carrier and retries with it, and the run completes. Open the printed
URL in a browser while it waits, with ``--wait``, to see the pages.

Run it with ``python examples/console_demo.py [path/to/console-demo.db] [--wait]``.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import trio

import trio_durable as td

app = td.App("shipping")
TOKEN = "demo-token"


class Carrier:
    """Whether the carrier lost parcels (fixed before the retry)."""

    broken = True


@app.step(group="carriers", retry=td.Retry(attempts=1))
async def ship(parcel: int) -> int:
    if Carrier.broken and parcel % 10 == 3:
        raise td.FatalError(f"parcel {parcel} was lost", code="lost")
    return parcel


@app.workflow()
async def deliver_all(ctx: td.Context, parcels: int) -> int:
    shipped = await ctx.all(ship, list(range(parcels)), mode="wait_all")
    return len(shipped)


def call(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> Any:
    """An HTTP request of the standard library: (status, JSON body or None)."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as answer:
            body = answer.read()
            return answer.status, json.loads(body) if body else None, answer.headers
    except urllib.error.HTTPError as error:
        body = error.read()
        return error.code, json.loads(body) if body else None, error.headers


async def main(path: str, wait: bool) -> None:
    console = td.ConsoleOptions(port=0, token=TOKEN)
    async with td.open_engine(
        app, store=f"sqlite:///{path}", serve=["carriers"], console=console
    ) as engine:
        base = engine.console_url
        assert base is not None
        await engine.start(deliver_all, 40, run_id="shipment-1")
        try:
            await engine.result("shipment-1")
        except td.RunFailed as failure:
            print(f"shipment-1 failed: {failure.code}, {failure}")
        get = trio.to_thread.run_sync

        status, detail, headers = await get(call, f"{base}/api/runs/shipment-1")
        [fan] = detail["fans"]
        print(f"detail: {status}, fan of {fan['size']} at seq {fan['first_seq']}: {fan['counts']}")
        again, _, _ = await get(
            lambda: call(f"{base}/api/runs/shipment-1", headers={"If-None-Match": headers["ETag"]})
        )
        print(f"unchanged: {again}")
        fan_url = f"{base}/api/runs/shipment-1/fans/{fan['first_seq']}?failed=true&limit=2"
        status, page, _ = await get(call, fan_url)
        seqs = [member["seq"] for member in page["members"]]
        print(f"failed members: {page['total']}, first page {seqs}")

        retry = f"{base}/api/runs/shipment-1/retry"
        status, refused, _ = await get(lambda: call(retry, "POST"))
        print(f"retry without the token: {status} {refused['error']['code']}")
        Carrier.broken = False
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, _, _ = await get(lambda: call(retry, "POST", bearer))
        print(f"retry with the token: {status}")
        print(f"shipment-1 -> {await engine.result('shipment-1')} parcels shipped")
        if wait:
            print(f"the console is at {base}/ (Ctrl+C to stop)")
            await trio.sleep_forever()


if __name__ == "__main__":
    # The engine logs each failed step and run; here the failures are the
    # demo's point, and it prints what it finds through the API.
    logging.getLogger("trio_durable").setLevel(logging.CRITICAL)
    arguments = [a for a in sys.argv[1:] if a != "--wait"]
    with tempfile.TemporaryDirectory() as folder:
        db = arguments[0] if arguments else str(Path(folder) / "console-demo.db")
        trio.run(main, db, "--wait" in sys.argv[1:])
