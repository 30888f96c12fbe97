"""The trio-durable half of the broker benchmarks (``bench_amqp.py``,
``bench_nats.py``): remote steps per second over a broker URL, for one fan
and for many concurrent one-step runs, with the worker in a separate process
(``python bench/_remote_figures.py URL ROUTE`` runs it). The engine runs on a
memory store, so the figures measure the broker path, not a database.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time

import trio
from _figures import figure

import trio_durable as td

PREFETCH = 256
"""The worker's concurrency (so its prefetch), as the raw workers'."""

app = td.App("bench-broker")


@app.step(group="square")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def one_step(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    values = await ctx.all(square, list(range(n)))
    return sum(values)


async def td_worker(url: str, route: str) -> None:
    async with td.open_worker(app, broker=url, groups=[route], concurrency=PREFETCH):
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


def with_bridge(url: str, bridge: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}bridge={bridge}"


async def td_figures(url: str, fan_size: int, runs: int) -> tuple[float, float]:
    namespace = f"bench{secrets.token_hex(4)}"
    route = f"square@{namespace}"
    worker = await trio.lowlevel.open_process(
        [sys.executable, __file__, url, route],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdin is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await worker.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError("the worker process ended before it was ready")
            line += chunk
        assert line.strip() == b"ready"
        async with td.open_engine(app, broker=url, seed=1) as engine:
            fan_rate = 0.0
            if fan_size:
                start = time.perf_counter()
                run = await engine.start(
                    fan, fan_size, run_id=f"{namespace}.fan", namespace=namespace
                )
                assert await engine.result(run.id) == sum(i * i for i in range(fan_size))
                fan_rate = fan_size / (time.perf_counter() - start)

            async def one(i: int) -> None:
                run = await engine.start(
                    one_step, i, run_id=f"{namespace}.r{i}", namespace=namespace
                )
                assert await engine.result(run.id) == i * i

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for i in range(runs):
                    nursery.start_soon(one, i)
            runs_rate = runs / (time.perf_counter() - start)
            await engine.drain()
        await worker.stdin.aclose()
        with trio.fail_after(30):
            await worker.wait()
        return fan_rate, runs_rate
    finally:
        if worker.returncode is None:
            worker.kill()


def bridge_case(prefix: str, shape: str, bridge: str) -> str:
    """The case name of a figure: ``<prefix>.<shape>`` for the default
    bridge (``thread``), ``<prefix>.<shape>.bridge_<mode>`` for another."""
    if bridge == "thread":
        return f"{prefix}.{shape}"
    return f"{prefix}.{shape}.bridge_{bridge.replace('-', '_')}"


def report(
    bench: str,
    prefix: str,
    url: str,
    ceiling: float | None,
    bridges: tuple[str, ...],
    fan_size: int,
    runs: int,
) -> None:
    """Measure and report (b) and (c) for each bridge mode (cases
    ``<prefix>.fan`` and ``<prefix>.runs``, see `bridge_case`), and each as a
    share of the raw ceiling (a) (``....of_raw``), then which mode was
    faster. A shape of size 0 is not reported (so a profile can take one
    alone), nor shares without a ceiling."""
    figures: dict[str, tuple[float, float]] = {}
    for bridge in bridges:
        fan_rate, runs_rate = trio.run(td_figures, with_bridge(url, bridge), fan_size, runs)
        figures[bridge] = (fan_rate, runs_rate)
        for shape, rate, what, target in (
            ("fan", fan_rate, f"fan of {fan_size}", 80),
            ("runs", runs_rate, f"{runs} one-step runs at once", 50),
        ):
            if not rate:
                continue
            case = bridge_case(prefix, shape, bridge)
            figure(bench, case, rate, "steps/s", label=f"(b) bridge={bridge} {what}")
            if ceiling is None:
                continue
            figure(
                bench,
                f"{case}.of_raw",
                100 * rate / ceiling,
                "% of raw",
                label=f"    = share of (a), target {target}%",
            )
    if len(figures) > 1:
        fastest = max(figures, key=lambda b: sum(figures[b]))
        print(f"faster bridge here: {fastest}")


if __name__ == "__main__":
    trio.run(td_worker, sys.argv[1], sys.argv[2])
