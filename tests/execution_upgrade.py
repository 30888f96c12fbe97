"""A store written before execution ids, with runs in flight, opened by
this trio-durable: shared by the SQLite test (tests/test_execution_upgrade.py)
and the PostgreSQL one (tests/integration/test_execution_upgrade_postgres.py).

`runs_in_flight` writes, through the store, what an older engine left: runs
suspended on a remote step whose task is out, with no execution ids. The
test then takes the schema back to the version before execution ids (its
own way per store), and `finish_in_flight_runs` opens an engine on it (which
migrates it) and answers the tasks as workers of both ages would, over the
memory broker: the tasks carry no execution id, so neither do their
results, and those settle by the rolling-upgrade rule (at their attempt,
nothing rerun). A result of another attempt, or one that names an
execution, is stale.
"""

from __future__ import annotations

from typing import Final

import attrs
import trio

import trio_durable as td
from trio_durable._stores._ops import CreateRun
from trio_durable._wire._messages import Result, Task
from trio_durable.brokers import Outgoing, open_broker

PATIENCE: Final = 30.0

app = td.App("upgrade")


@app.step(group="pay")
async def charge(order: str) -> str:
    return f"charged {order}"


@app.workflow()
async def ship(ctx: td.Context, order: str) -> str:
    return "shipped " + await ctx.step(charge, order)


ORDERS: Final = ("o-1", "o-2")


async def runs_in_flight(url: str) -> None:
    """Write, as an engine before execution ids would have, a run per order
    waiting on its `charge`, whose first attempt is out."""
    async with td.open_store(url) as store:
        for order in ORDERS:
            run = td.Run(
                id=order,
                workflow="ship",
                status="suspended",
                input=f'["{order}"]',
                created_at=1.0,
                updated_at=2.0,
            )
            step = td.Checkpoint(
                run_id=order,
                seq=1,
                name="charge",
                kind="remote",
                input=f'["{order}"]',
                attempts=1,
                group="pay",
                enqueued_at=2.0,
                started_at=2.0,
            )
            await store.apply([CreateRun(run, (step,))])


def _task(order: str, reply_to: str) -> Task:
    """The task an engine before execution ids sent for ``order``."""
    return Task(
        run_id=order,
        seq=1,
        attempt=1,
        step="charge",
        workflow="ship",
        route="pay",
        input=f'["{order}"]',
        dispatched_at=2.0,
        reply_to=reply_to,
    )


async def finish_in_flight_runs(url: str) -> None:
    """Open an engine on the store at ``url`` (migrating it), and finish the
    runs `runs_in_flight` left: ``o-1``'s task by a worker of this
    trio-durable, ``o-2``'s by a result as an older worker sends it; stale
    results first, which change nothing."""
    async with (
        open_broker("memory://upgrade") as broker,
        td.open_engine(app, store=url, broker=broker, seed=1) as engine,
    ):
        queue = engine.results_queue
        for order in ORDERS:
            [cp] = await engine.store.get_checkpoints(order)
            assert (cp.status, cp.attempts, cp.executions, cp.rerun) == ("pending", 1, (), False)
        older = Result(
            run_id="o-2",
            seq=1,
            attempt=1,
            step="charge",
            workflow="ship",
            status="completed",
            output='"charged o-2 by an older worker"',
        )
        # Neither an answer to another attempt, nor one naming an execution
        # (no task of these runs carried one) settles them.
        stale = [
            attrs.evolve(older, attempt=2),
            attrs.evolve(older, execution="0123456789abcdef0123456789abcdef"),
        ]
        await broker.dispatch([Outgoing(queue=queue, body=r.encode()) for r in stale])
        with trio.fail_after(PATIENCE):
            while engine.statistics().rejected_stale < 2:  # noqa: ASYNC110 -- a counter
                await trio.sleep(0.01)
        [cp] = await engine.store.get_checkpoints("o-2")
        assert cp.status == "pending"
        await broker.dispatch([Outgoing(queue=queue, body=older.encode())])
        await broker.dispatch([Outgoing(queue="pay", body=_task("o-1", queue).encode())])
        async with td.open_worker(app, broker=broker, groups=["pay"]):
            with trio.fail_after(PATIENCE):
                assert await engine.result("o-1") == "shipped charged o-1"
                assert await engine.result("o-2") == "shipped charged o-2 by an older worker"
        assert engine.statistics().rejected_stale == 2
        # A new run's step carries an execution id, on its checkpoint.
        async with td.open_worker(app, broker=broker, groups=["pay"]):
            await engine.start(ship, "o-3", run_id="o-3")
            with trio.fail_after(PATIENCE):
                assert await engine.result("o-3") == "shipped charged o-3"
        [cp, *_] = await engine.store.get_checkpoints("o-3")
        assert len(cp.executions) == 1
