"""The app of the deployment test's processes: every build has the same
workflows; the step says which build ran it (``DEPLOY_BUILD``, set in each
worker's environment)."""

from __future__ import annotations

import os

import trio_durable as td

app = td.App("deploy")


@app.step(group="g")
async def which() -> str:
    return os.environ.get("DEPLOY_BUILD", "?")


@app.workflow(versioning="pinned")
async def pinned_order(ctx: td.Context) -> list[str]:
    first = await ctx.step(which)
    await ctx.wait_signal("go")
    return [first, await ctx.step(which)]


@app.workflow(versioning="auto_upgrade")
async def upgrading_order(ctx: td.Context) -> list[str]:
    first = await ctx.step(which)
    await ctx.wait_signal("go")
    return [first, await ctx.step(which)]


@app.workflow(versioning="pinned")
async def quick(ctx: td.Context) -> str:
    return await ctx.step(which)
