"""An App to operate from the command line (docs/operations.md, "Runs from
the command line"): run it in an engine process and a worker process, then
start, list, signal, cancel, retry and prune its runs with ``trio-durable``::

    export TRIO_DURABLE_STORE=sqlite:///ops.db
    export TRIO_DURABLE_BROKER=amqp://guest:guest@127.0.0.1:5672/
    export TRIO_DURABLE_APP=examples/ops_app.py:app
    trio-durable engine examples/ops_app.py:app &
    trio-durable worker examples/ops_app.py:app --groups ops &
    trio-durable runs start approval --input '["order-7"]' --run-id approval-7
    trio-durable runs signal approval-7 approve --payload '"ada"'
    trio-durable runs result approval-7 --wait

Workflows:

- ``approval(order)`` waits for the signal ``approve`` (its payload: who
  approved), then returns ``"<order> approved by <who>"``;
- ``doubled(x)`` runs the remote step ``double`` on a worker of the group
  ``ops``, and ``fan_out(n)`` runs it once per ``0..n-1`` as one fan;
- ``needs_file(path)`` fails with the code ``missing_file`` while ``path``
  does not exist: create the file and retry the run, and it completes.
"""

from __future__ import annotations

import trio

import trio_durable as td

GROUP = "ops"

app = td.App("ops")


@app.step(group=GROUP)
async def double(x: int) -> int:
    return 2 * x


@app.step()
async def read_file(path: str) -> str:
    file = trio.Path(path)
    if not await file.exists():
        raise td.FatalError(f"no file {path!r} yet", code="missing_file", details={"path": path})
    return (await file.read_text()).strip()


@app.workflow()
async def approval(ctx: td.Context, order: str) -> str:
    who = await ctx.wait_signal("approve", type=str)
    return f"{order} approved by {who}"


@app.workflow()
async def doubled(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, x)


@app.workflow()
async def fan_out(ctx: td.Context, n: int) -> int:
    return sum(await ctx.all(double, list(range(n))))


@app.workflow()
async def needs_file(ctx: td.Context, path: str) -> str:
    return await ctx.step(read_file, path)
