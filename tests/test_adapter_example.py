"""The worked example of ``docs/writing-a-broker-adapter.md``
(``examples/tiny_broker.py``): registered under the ``tiny`` scheme by the
metadata of an installed distribution, found by URL, and held to the public
conformance suites, as an outside adapter would be. The page shows the
example exactly as it is."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable.brokers import Broker, Consumer, open_broker
from trio_durable.testing.conformance import (
    BROKER_CHECKS,
    BROKER_ENGINE_CHECKS,
    BrokerFactory,
)

ROOT: Final = Path(__file__).resolve().parent.parent
EXAMPLE: Final = ROOT / "examples" / "tiny_broker.py"
PAGE: Final = ROOT / "docs" / "writing-a-broker-adapter.md"

sys.path.insert(0, str(EXAMPLE.parent))
from tiny_broker import TinyBroker, open_tiny_broker  # noqa: E402


@pytest.fixture
def tiny_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution that ships the example and registers its scheme, as
    ``pip install`` of a package with this in its pyproject.toml would::

        [project.entry-points."trio_durable.brokers"]
        tiny = "tiny_broker:open_tiny_broker"
    """
    info = tmp_path / "tiny_broker-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-broker\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[trio_durable.brokers]\ntiny = tiny_broker:open_tiny_broker\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def _tiny(url: str = "tiny://") -> Callable[[], AbstractAsyncContextManager[Broker]]:
    return lambda: open_broker(url)


FACTORIES: Final = [
    pytest.param(BrokerFactory(open=_tiny(), trio_clock=True), id="tiny"),
    pytest.param(
        BrokerFactory(open=_tiny("tiny://?max_payload=200000"), trio_clock=True),
        id="tiny-max-payload",
    ),
]


@pytest.mark.usefixtures("tiny_installed")
@pytest.mark.parametrize("factory", FACTORIES)
@pytest.mark.parametrize(
    "check", BROKER_CHECKS + BROKER_ENGINE_CHECKS, ids=lambda check: check.__name__
)
async def test_the_example_conforms(
    check: Callable[[BrokerFactory], Awaitable[None]],
    factory: BrokerFactory,
    autojump_clock: trio.testing.MockClock,
) -> None:
    await check(factory)


app = td.App("tiny")


@app.step(group="math")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def squares(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(square, list(range(n)))


@pytest.mark.usefixtures("tiny_installed")
async def test_an_engine_runs_remote_steps_over_the_example_by_url(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, broker="tiny://", serve=["math"], seed=0) as engine:
        assert isinstance(engine.broker, TinyBroker)
        run = await engine.start(squares, 5)
        assert await engine.result(run.id) == [0, 1, 4, 9, 16]


async def test_without_its_distribution_the_scheme_is_unknown() -> None:
    with pytest.raises(td.InvalidURLError, match="no broker is registered for the scheme 'tiny'"):
        async with open_broker("tiny://"):
            pass  # pragma: no cover


@pytest.mark.parametrize(
    "url", ["tiny://host", "tiny://?max_payload=0", "tiny://?max_payload=²", "tiny://?x=1"]
)
async def test_the_example_refuses_bad_urls(url: str) -> None:
    with pytest.raises(td.InvalidURLError):
        async with open_tiny_broker(url):
            pass  # pragma: no cover


async def test_the_example_satisfies_the_protocol() -> None:
    # Checked by mypy: structurally a Broker and a Consumer.
    broker: Broker = TinyBroker()
    async with broker.open_consumer("q", prefetch=1) as consumer:
        typed: Consumer = consumer
        await typed.ack([])


def test_the_page_shows_the_example_as_it_is() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- examples/tiny_broker\.py -->\n```python\n(.*?)```", page, re.S)
    assert blocks == [EXAMPLE.read_text(encoding="utf-8")]
