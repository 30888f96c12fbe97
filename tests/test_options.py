"""`open_engine`'s options: each bad value is refused with its own message,
before anything is opened; good values are taken as given."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory

app = td.App("options")


@app.step(group="g")
async def remote(x: int) -> int:
    return x


@app.workflow()
async def flow(ctx: td.Context, x: int) -> int:
    return await ctx.step(remote, x)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"lease_ttl": 0}, "lease_ttl must be a positive finite number, not 0"),
        ({"lease_ttl": math.inf}, "lease_ttl must be a positive finite number, not inf"),
        ({"lease_ttl": True}, "lease_ttl must be a positive finite number, not True"),
        ({"lease_ttl": "30"}, "lease_ttl must be a positive finite number, not '30'"),
        ({"reconcile_interval": -1}, "reconcile_interval must be a positive finite number, not -1"),
        (
            {"result_poll_interval": math.nan},
            "result_poll_interval must be a positive finite number, not nan",
        ),
        ({"blocked_recheck": 0.0}, "blocked_recheck must be a positive finite number, not 0.0"),
        ({"max_recoveries": -1}, "max_recoveries must be an integer >= 0, not -1"),
        ({"max_recoveries": 1.0}, "max_recoveries must be an integer >= 0, not 1.0"),
        ({"remote_redispatch": 5}, "remote_redispatch must be (seconds, maximum), not 5"),
        (
            {"remote_redispatch": (1, 2, 3)},
            "remote_redispatch must be (seconds, maximum), not (1, 2, 3)",
        ),
        ({"remote_redispatch": (-1, 2)}, "remote_redispatch seconds must be positive, not -1"),
        ({"remote_redispatch": (True, 2)}, "remote_redispatch seconds must be positive, not True"),
        (
            {"remote_redispatch": (1, -2)},
            "remote_redispatch maximum must be an integer >= 0, not -2",
        ),
        (
            {"remote_redispatch": (1, 2.0)},
            "remote_redispatch maximum must be an integer >= 0, not 2.0",
        ),
        ({"traceback_limit": -1}, "traceback_limit must be an integer >= 0, not -1"),
        ({"worker_concurrency": 0}, "concurrency must be a positive integer, not 0"),
        ({"serve": "g"}, "serve must be a list of group names, not the string 'g'"),
        (
            {"serve": ["nope"]},
            "serve names the group 'nope', which no step or workflow of app 'options' has",
        ),
        (
            {"engine_id": "has space"},
            "engine_id must be 1 to 255 characters of letters, digits and '_.-:@', not 'has space'",
        ),
        ({"engine_id": "x" * 256}, "engine_id must be 1 to 255 characters"),
    ],
)
async def test_a_bad_option_is_refused_with_its_message(
    option: dict[str, Any], message: str
) -> None:
    with pytest.raises(td.UsageError, match=re.escape(message)):
        async with td.open_engine(app, **option):
            pass  # pragma: no cover


async def test_an_app_that_is_no_app_is_refused() -> None:
    with pytest.raises(td.UsageError, match=re.escape("open_engine needs a td.App, not 'app'")):
        async with td.open_engine("app"):  # type: ignore[arg-type]
            pass  # pragma: no cover


@pytest.mark.parametrize("size", [0, 0.5, -3, math.inf, math.nan, "7", True])
async def test_an_unusable_timer_batch_size_means_the_default(
    open_test_engine: EngineFactory, size: Any
) -> None:
    # Lenient by design: the batch size only tunes the poller.
    async with open_test_engine(app, timer_batch_size=size) as engine:
        assert (await engine.start(flow, 1)).id


async def test_a_lost_step_names_the_redispatch_seconds_as_a_float(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # Given as integers, the seconds still read as seconds in the step's
    # errors (as they always did).
    async with open_test_engine(app, remote_redispatch=(5, 1)) as engine:
        run = await engine.start(flow, 1, run_id="lost")
        with pytest.raises(td.RunFailed, match="no result after 2 dispatches"):
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints("lost", 1, 1)
        assert [e.message for e in cp.errors][:1] == ["no result within 5.0 s; dispatched again"]
        assert trio.current_time() == 10


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"groups": "g"}, "groups must be a list of group names, not the string 'g'"),
        ({"groups": []}, "a worker needs at least one group to serve"),
        ({"concurrency": 0}, "concurrency must be a positive integer, not 0"),
        ({"concurrency": True}, "concurrency must be a positive integer, not True"),
        ({"heartbeat": 0}, "heartbeat must be a positive finite number, not 0"),
        ({"ttl": math.inf}, "ttl must be a positive finite number, not inf"),
        ({"heartbeat": 15, "ttl": 15}, "heartbeat (15 s) must be shorter than ttl (15 s)"),
        ({"max_deliveries": 0}, "max_deliveries must be a positive integer, not 0"),
        ({"max_deliveries": 2.0}, "max_deliveries must be a positive integer, not 2.0"),
        ({"traceback_limit": -1}, "traceback_limit must be an integer >= 0, not -1"),
        ({"capabilities": "gpu"}, "capabilities must be a list of broker-safe names, not 'gpu'"),
        (
            {"capabilities": ["a b"]},
            "capabilities must be a list of broker-safe names, not ['a b']",
        ),
    ],
)
async def test_a_bad_worker_option_is_refused_with_its_message(
    option: dict[str, Any], message: str
) -> None:
    option.setdefault("groups", ["g"])
    with pytest.raises(td.UsageError, match=re.escape(message)):
        async with td.open_worker(app, **option):
            pass  # pragma: no cover
