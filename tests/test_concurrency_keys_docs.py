"""The code of docs/concurrency-keys.md runs as the page says: each of its
blocks is this module's code (a test checks that), and the tests below run
them."""

from __future__ import annotations

import re
from pathlib import Path

import trio
import trio.testing

import trio_durable as td

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "concurrency-keys.md"

app = td.App("billing")
app.queue("partner_api", concurrency=4, rate_limit=td.RateLimit(10, 1.0))

invoices: list[str] = []


@app.step()
async def build_invoice(account: str, month: str) -> str:
    invoices.append(f"{account}/{month}")
    await trio.sleep(30)
    return f"invoice {account}/{month}"


@app.workflow(concurrency_key=lambda account, month: account, max_concurrent=1)
async def invoice(ctx: td.Context, account: str, month: str) -> str:
    return await ctx.step(build_invoice, account, month)


async def invoice_three_months(engine: td.Engine) -> list[str]:
    handles = [await engine.start(invoice, "acme", month) for month in ("01", "02", "03")]
    # Each start returned before the next began: one at a time for acme,
    # in the order they were started.
    return [await handle.result() for handle in handles]


@app.workflow(concurrency_key=lambda account: account, singleton=True)
async def reconcile(ctx: td.Context, account: str) -> str:
    await ctx.sleep(60)
    return f"reconciled {account}"


async def reconcile_twice(engine: td.Engine) -> bool:
    first = await engine.start(reconcile, "acme")
    second = await engine.start(reconcile, "acme")  # acme's run is open: the same run
    return first.id == second.id


@app.workflow(
    concurrency_key=lambda user: "mailer",
    max_concurrent=1,
    dedup_key=lambda user: user,
)
async def send_statement(ctx: td.Context, user: str) -> str:
    await ctx.sleep(10)
    return f"sent to {user}"


async def statements(engine: td.Engine) -> set[str]:
    ids = set()
    for user in ("ann", "bob", "ann", "ann"):
        ids.add((await engine.start(send_statement, user)).id)
    # ann's first run took the mailer's slot; her second queued, and the
    # third and fourth starts returned that queued run.
    return ids


app.queue("search_index", concurrency=1)


@app.step(group="indexers", queue="search_index")
async def reindex(account: str) -> str:
    await trio.sleep(5)
    return f"reindexed {account}"


@app.workflow()
async def account_changed(ctx: td.Context, account: str) -> str:
    try:
        return await ctx.step(reindex, account, dedup_key=account)
    except td.RemoteStepError as exc:
        if exc.code != "deduplicated":
            raise
        return f"a reindex of {account} is already queued"


@app.workflow(rate_limit=td.RateLimit(2, 60.0))
async def export(ctx: td.Context, table: str) -> str:
    return f"exported {table}"


@app.step(group="partners", queue="partner_api")
async def notify_partner(event: str) -> str:
    return f"notified {event}"


@app.workflow()
async def notify(ctx: td.Context, event: str) -> str:
    return await ctx.step(notify_partner, event)


# -- the tests -------------------------------------------------------------------------


async def test_a_key_runs_one_invoice_at_a_time(autojump_clock: trio.testing.MockClock) -> None:
    invoices.clear()
    async with td.open_engine(app) as engine:
        assert await invoice_three_months(engine) == [
            "invoice acme/01",
            "invoice acme/02",
            "invoice acme/03",
        ]
        assert trio.current_time() == 90.0
    assert invoices == ["acme/01", "acme/02", "acme/03"]


async def test_a_singleton_start_returns_the_open_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app) as engine:
        assert await reconcile_twice(engine)


async def test_a_dedup_key_returns_the_queued_run(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(app) as engine:
        assert len(await statements(engine)) == 3
        await engine.drain()


async def test_a_step_dedup_key_refuses_a_second_queued_reindex(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, serve=["indexers"]) as engine:
        handles = [await engine.start(account_changed, "acme") for _ in range(3)]
        # The first is sent at once, the second waits for the slot, the
        # third is refused while the second waits.
        assert [await h.result() for h in handles] == [
            "reindexed acme",
            "reindexed acme",
            "a reindex of acme is already queued",
        ]


async def test_rate_limits_space_out_runs_and_steps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, serve=["partners"]) as engine:
        handles = [await engine.start(export, t) for t in ("a", "b", "c")]
        for handle in handles:
            await handle.result()
        assert trio.current_time() == 60.0
        started = trio.current_time()
        handles = [await engine.start(notify, f"e{i}") for i in range(12)]
        assert [await h.result() for h in handles] == [f"notified e{i}" for i in range(12)]
        # Ten per second through partner_api: the last two a second later.
        assert trio.current_time() == started + 1.0


def _code(text: str) -> str:
    """Code lines without imports or blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 5
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block
