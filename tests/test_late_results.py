"""What the result consumer keeps of a remote step's results that come late,
and what a remote step's checkpoint records of its attempts.

- A success that arrives after the step failed with code ``lost`` (no
  result after its last redispatch) is kept as any late success for a
  failed run is: recorded on the checkpoint, the run left as it ended, so
  that `Engine.retry` does not run the step again. While the run goes on,
  its body has acted on the loss already, and the success changes nothing.
- A remote step that failed for good lists every attempt's error in
  ``errors``, the last one too (``error`` is that last one), as a local
  step does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store

app = td.App("late")

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    yield
    calls.clear()


@app.step(group="slow", retry=td.Retry(attempts=1))
async def slow(item: str) -> str:
    calls[item] += 1
    await trio.sleep(100)
    return f"done {item}"


@app.step(group="flaky", retry=td.Retry(attempts=3, backoff=2.0, jitter=0.0))
async def flaky(item: str) -> str:
    calls[item] += 1
    raise ConnectionError(f"attempt {calls[item]} of {item} failed")


@app.workflow()
async def needs_slow(ctx: td.Context, item: str) -> str:
    return await ctx.step(slow, item)


@app.workflow()
async def survives_a_loss(ctx: td.Context, item: str) -> str:
    try:
        value = await ctx.step(slow, item)
    except td.RemoteStepError as exc:
        value = f"went on after {exc.code}"
    await ctx.wait_signal("finish")
    return value


@app.workflow()
async def needs_flaky(ctx: td.Context, item: str) -> str:
    return await ctx.step(flaky, item)


def _received(channel: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    found = []
    while True:
        try:
            found.append(channel.receive_nowait())
        except trio.WouldBlock:
            return found


async def _checkpoint(engine: td.Engine, run_id: str) -> td.Checkpoint:
    [cp] = await engine.store.get_checkpoints(run_id, 1, 1)
    return cp


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_late_success_after_lost_is_kept_so_retry_does_not_run_the_step_again(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    tmp_path: Path,
    kind: str,
) -> None:
    async with (
        shared_store(kind, tmp_path) as store,
        open_test_engine(
            app, store=store, broker=td.MemoryBroker(), serve=["slow"], remote_redispatch=(30, 1)
        ) as engine,
    ):
        with engine.subscribe() as events:
            await engine.start(needs_slow, "a", run_id="r")
            # Sent at 0 and again at 30, no result by 60: lost.
            with pytest.raises(td.RunFailed) as info:
                await engine.result("r")
            assert info.value.code == "lost"
            assert trio.current_time() == 60.0
            # The first attempt's success comes at 100, the second's at 130.
            await engine.drain()
            assert trio.current_time() == 130.0
            kinds = [e.kind for e in _received(events) if e.run_id == "r" and e.seq == 1]
        # Reported once, as the late success of a fan's cancelled member is.
        assert kinds.count("step.completed") == 1
        assert kinds.index("step.completed") > kinds.index("step.failed")
        cp = await _checkpoint(engine, "r")
        assert (cp.status, cp.output, cp.error) == ("completed", '"done a"', None)
        # The redispatch it took stays on record.
        assert [e.code for e in cp.errors] == ["redispatched"]
        run = await engine.get("r")
        assert run.error is not None
        assert (run.status, run.error.code) == ("failed", "lost")
        assert calls == Counter({"a": 2})

        assert (await engine.retry("r")).status in ("pending", "running")
        assert await engine.result("r") == "done a"
        assert calls == Counter({"a": 2})


async def test_a_late_success_after_lost_changes_nothing_while_the_run_goes_on(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(
        app, broker=td.MemoryBroker(), serve=["slow"], remote_redispatch=(30, 1)
    ) as engine:
        await engine.start(survives_a_loss, "b", run_id="r")
        await engine.drain()
        # The body caught the loss at 60 and waits: the successes at 100
        # and 130 must not change what it saw, or its replay would differ.
        assert trio.current_time() == 130.0
        cp = await _checkpoint(engine, "r")
        assert cp.error is not None
        assert (cp.status, cp.error.code) == ("failed", "lost")
        await engine.signal("r", "finish")
        assert await engine.result("r") == "went on after lost"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_remote_step_that_failed_for_good_lists_every_attempts_error(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    tmp_path: Path,
    kind: str,
) -> None:
    async with (
        shared_store(kind, tmp_path) as store,
        open_test_engine(app, store=store, broker=td.MemoryBroker(), serve=["flaky"]) as engine,
    ):
        await engine.start(needs_flaky, "c", run_id="r")
        with pytest.raises(td.RunFailed):
            await engine.result("r")
        cp = await _checkpoint(engine, "r")
    assert (cp.status, cp.attempts) == ("failed", 3)
    assert [e.message for e in cp.errors] == [
        "attempt 1 of c failed",
        "attempt 2 of c failed",
        "attempt 3 of c failed",
    ]
    # The final error is the last attempt's, as on a local step.
    assert cp.error is not None
    assert cp.errors[-1] == cp.error
