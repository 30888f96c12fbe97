"""The code of docs/message-signing.md runs as the page says: each of its
Python blocks is this module's code (a test checks that), and the tests
below run them."""

from __future__ import annotations

import base64
import re
import secrets
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from prometheus_samples import sample
from trio_durable.brokers import Outgoing

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "message-signing.md"

# -- "Turning it on" -------------------------------------------------------------------

app = td.App("payments")


@app.step(group="cards")
async def charge(order: str) -> str:
    return f"charged {order}"


@app.workflow()
async def checkout(ctx: td.Context, order: str) -> str:
    return await ctx.step(charge, order)


ring = td.Keyring.single(b"a shared secret of 32 bytes.....")


async def run_checkout(broker: td.Broker, engine_ring: td.Keyring, worker_ring: td.Keyring) -> str:
    async with (
        td.open_engine(app, broker=broker, signing=engine_ring) as engine,
        td.open_worker(app, broker=broker, groups=["cards"], signing=worker_ring),
    ):
        handle = await engine.start(checkout, "o-1")
        return await handle.result()


# -- "Rotating keys" -------------------------------------------------------------------

K1 = "k1:" + base64.b64encode(b"the old key, 32 bytes long......").decode()
K2 = "k2:" + base64.b64encode(b"the new key, 32 bytes long......").decode()

before = td.Keyring.parse(K1)  # k1 signs
deploy_1 = td.Keyring.parse(f"{K1},{K2}")  # k1 signs; k2 verifies too
deploy_2 = td.Keyring.parse(f"{K2},{K1}")  # k2 signs; k1 verifies too
deploy_3 = td.Keyring.parse(K2)  # k2 only: k1 is retired

# -- "What is rejected, and where it shows" ---------------------------------------------


def signature_rejections(engine: td.Engine) -> dict[str, int]:
    stats = engine.statistics()
    return {
        "unsigned": stats.rejected_unsigned,
        "forged": stats.rejected_forged,
        "unknown_key": stats.rejected_unknown_key,
    }


# -- "Making a key" ---------------------------------------------------------------------


def new_key(key_id: str) -> str:
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}"


# -- the tests -------------------------------------------------------------------------


async def test_a_signed_checkout_runs(autojump_clock: trio.testing.MockClock) -> None:
    assert await run_checkout(td.MemoryBroker(), ring, ring) == "charged o-1"


@pytest.mark.parametrize(
    ("engine_ring", "worker_ring"),
    [
        (old, new)
        for pair in [(before, deploy_1), (deploy_1, deploy_2), (deploy_2, deploy_3)]
        for old, new in (pair, pair[::-1])
    ],
)
async def test_each_step_of_a_rotation_works_with_the_step_before(
    autojump_clock: trio.testing.MockClock, engine_ring: td.Keyring, worker_ring: td.Keyring
) -> None:
    assert await run_checkout(td.MemoryBroker(), engine_ring, worker_ring) == "charged o-1"


async def test_skipping_a_deploy_of_the_rotation_breaks_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # k1 retired while a worker still signs with it: its result is rejected.
    broker = td.MemoryBroker()
    async with (
        td.open_engine(app, broker=broker, signing=deploy_3) as engine,
        td.open_worker(app, broker=broker, groups=["cards"], signing=deploy_1),
    ):
        run = await engine.start(checkout, "o-2")
        with trio.move_on_after(60):
            await engine.result(run.id)
        assert signature_rejections(engine) == {"unsigned": 0, "forged": 0, "unknown_key": 1}
        metrics = engine.metrics()
    name = "trio_durable_messages_unauthenticated_total"
    assert sample(metrics, name, kind="result", reason="unknown_key") == 1.0


async def test_an_unsigned_result_is_counted(autojump_clock: trio.testing.MockClock) -> None:
    broker = td.MemoryBroker()
    async with td.open_engine(app, broker=broker, signing=ring) as engine:
        await broker.dispatch([Outgoing(queue=engine.results_queue, body=b'{"v":1}')])
        await trio.testing.wait_all_tasks_blocked()
        assert signature_rejections(engine) == {"unsigned": 1, "forged": 0, "unknown_key": 0}


def test_a_new_key_parses_into_a_ring() -> None:
    made = td.Keyring.parse(new_key("k7"))
    assert made.current == "k7"
    assert len(made.current_key) == 32


def _code(text: str) -> str:
    """``text`` without its import lines and blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 4
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block
