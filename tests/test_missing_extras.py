"""A URL whose client library is not installed names the extra to install."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

import trio_durable as td

# What each scheme imports, and the adapter modules that import it (dropped
# from sys.modules so that the import runs again and meets the gap).
MISSING = {
    "amqp://guest:guest@127.0.0.1:5672/": (
        "rabbitmq",
        "aio_pika",
        ["trio_durable.brokers._amqp"],
    ),
    "amqps://127.0.0.1/": ("rabbitmq", "aio_pika", ["trio_durable.brokers._amqp"]),
    "nats://127.0.0.1:4222": ("nats", "nats", ["trio_durable.brokers._nats"]),
    "postgresql://postgres@127.0.0.1/db": (
        "postgres",
        "psycopg",
        ["trio_durable._stores._postgres", "trio_durable._stores._postgres_ops"],
    ),
}


def _uninstall(monkeypatch: pytest.MonkeyPatch, module: str, importers: list[str]) -> None:
    # None in sys.modules makes `import module` raise ModuleNotFoundError, as
    # on a machine without the package.
    monkeypatch.setitem(sys.modules, module, None)
    for name in [n for n in sys.modules if n == module or n.startswith(f"{module}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in importers:
        monkeypatch.delitem(sys.modules, name, raising=False)


async def _open(opener: Callable[[str], AbstractAsyncContextManager[Any]], url: str) -> None:
    async with opener(url):
        pass  # pragma: no cover


@pytest.mark.parametrize("url", list(MISSING))
async def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    extra, module, importers = MISSING[url]
    _uninstall(monkeypatch, module, importers)
    scheme = url.split(":", 1)[0]
    kind = "store" if scheme.startswith("postgres") else "broker"
    expected = rf"the {kind} scheme '{scheme}' needs the '{extra}' extra: pip install 'trio-durable\[{extra}\]'"
    opener = td.open_store if kind == "store" else td.open_broker
    with pytest.raises(td.InvalidURLError, match=expected) as caught:
        await _open(opener, url)
    assert isinstance(caught.value.__cause__, ImportError)
    # The password never shows: the message names the scheme, not the URL.
    assert "guest:guest" not in str(caught.value)


async def test_open_engine_names_the_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _uninstall(monkeypatch, "aio_pika", ["trio_durable.brokers._amqp"])
    with pytest.raises(td.InvalidURLError, match=r"pip install 'trio-durable\[rabbitmq\]'"):
        async with td.open_engine(td.App("x"), broker="amqp://127.0.0.1/"):
            pass  # pragma: no cover
