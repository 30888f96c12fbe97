"""A URL whose package or client library is not installed names what to
install, and the built-in schemes need no entry-point metadata
(`trio_durable._base._schemes`: one rule for stores and brokers)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

import trio_durable as td
from trio_durable._base import _schemes
from trio_durable._brokers import BROKERS, broker_opener
from trio_durable._brokers._memory import open_memory_broker
from trio_durable._stores import STORES, store_opener
from trio_durable._stores._memory import open_memory_store
from trio_durable._stores._postgres import open_postgres_store
from trio_durable._stores._sqlite import open_sqlite_store

RABBITMQ = ("the trio-durable-rabbitmq package", "trio-durable-rabbitmq")
NATS = ("the trio-durable-nats package", "trio-durable-nats")
POSTGRES = ("the 'postgres' extra", "'trio-durable[postgres]'")

# What each scheme needs, the module its import meets missing, and the
# modules that import it (dropped from sys.modules so that the import runs
# again and meets the gap).
MISSING = {
    "amqp://guest:guest@127.0.0.1:5672/": (
        RABBITMQ,
        "aio_pika",
        ["trio_durable_rabbitmq", "trio_durable_rabbitmq._amqp"],
    ),
    "amqps://127.0.0.1/": (
        RABBITMQ,
        "aio_pika",
        ["trio_durable_rabbitmq", "trio_durable_rabbitmq._amqp"],
    ),
    "nats://127.0.0.1:4222": (
        NATS,
        "nats",
        ["trio_durable_nats", "trio_durable_nats._nats"],
    ),
    "nats+tls://127.0.0.1:4222": (
        NATS,
        "nats",
        ["trio_durable_nats", "trio_durable_nats._nats"],
    ),
    "postgresql://postgres@127.0.0.1/db": (
        POSTGRES,
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


def _expected(scheme: str, needs: tuple[str, str], why: str) -> str:
    what, pip = needs
    kind = "store" if scheme.startswith("postgres") else "broker"
    text = f"the {kind} scheme '{scheme}' needs {what}: pip install {pip} ({why})"
    return f"^{re.escape(text)}$"


@pytest.mark.parametrize("url", list(MISSING))
async def test_a_missing_client_library_is_named(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    needs, module, importers = MISSING[url]
    _uninstall(monkeypatch, module, importers)
    scheme = url.split("://", 1)[0]
    opener = td.open_store if scheme.startswith("postgres") else td.open_broker
    with pytest.raises(
        td.InvalidURLError, match=_expected(scheme, needs, f"no module named '{module}'")
    ) as caught:
        await _open(opener, url)
    assert isinstance(caught.value.__cause__, ImportError)
    # The password never shows: the message names the scheme, not the URL.
    assert "guest:guest" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "package", "needs"),
    [
        ("amqp://guest:guest@127.0.0.1/", "trio_durable_rabbitmq", RABBITMQ),
        ("nats://127.0.0.1", "trio_durable_nats", NATS),
    ],
)
async def test_an_adapter_whose_module_is_gone_is_named(
    monkeypatch: pytest.MonkeyPatch, url: str, package: str, needs: tuple[str, str]
) -> None:
    # Its metadata still registers the scheme, but its code cannot be
    # imported (a half-removed install).
    _uninstall(monkeypatch, package, [])
    scheme = url.split("://", 1)[0]
    with pytest.raises(
        td.InvalidURLError, match=_expected(scheme, needs, f"no module named '{package}'")
    ):
        await _open(td.open_broker, url)


def _without_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entry-point metadata as on a machine where no package registers a
    scheme: trio-durable alone."""
    monkeypatch.setattr(_schemes, "registered", lambda kind: [])


@pytest.mark.parametrize(
    ("url", "needs"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", RABBITMQ),
        ("amqps://127.0.0.1/", RABBITMQ),
        ("nats://127.0.0.1:4222", NATS),
        ("nats+tls://127.0.0.1:4222", NATS),
    ],
)
async def test_an_adapter_that_is_not_installed_is_named(
    monkeypatch: pytest.MonkeyPatch, url: str, needs: tuple[str, str]
) -> None:
    _without_adapters(monkeypatch)
    scheme = url.split("://", 1)[0]
    with pytest.raises(
        td.InvalidURLError, match=_expected(scheme, needs, "it is not installed")
    ) as caught:
        await _open(td.open_broker, url)
    assert "guest:guest" not in str(caught.value)


async def test_open_engine_names_the_missing_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    _uninstall(monkeypatch, "aio_pika", ["trio_durable_rabbitmq", "trio_durable_rabbitmq._amqp"])
    with pytest.raises(td.InvalidURLError, match=r"pip install trio-durable-rabbitmq"):
        async with td.open_engine(td.App("x"), broker="amqp://127.0.0.1/"):
            pass  # pragma: no cover


def test_built_in_schemes_need_no_entry_point_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_adapters(monkeypatch)
    assert store_opener("memory://") is open_memory_store
    assert store_opener("sqlite:///x.db") is open_sqlite_store
    assert store_opener("SQLite:///x.db") is open_sqlite_store
    assert store_opener("postgresql://h/db") is open_postgres_store
    assert store_opener("postgres://h/db") is open_postgres_store
    assert broker_opener("memory://") is open_memory_broker
    assert broker_opener("memory://name?max_payload=10") is open_memory_broker


def test_built_in_schemes_win_over_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    # A package registering 'memory' or 'sqlite' does not take them over.
    def hijack(kind: _schemes.Kind) -> list[EntryPoint]:
        return [
            EntryPoint(name=scheme, value="no_such_module:opener", group=kind.group)
            for scheme in ("memory", "sqlite")
        ]

    monkeypatch.setattr(_schemes, "registered", hijack)
    assert broker_opener("memory://") is open_memory_broker
    assert store_opener("sqlite:///x.db") is open_sqlite_store
    assert (BROKERS.group, STORES.group) == ("trio_durable.brokers", "trio_durable.stores")


async def test_the_generic_tls_scheme_is_gone() -> None:
    # NATS over TLS is nats+tls:// now; tls:// says so.
    with pytest.raises(
        td.InvalidURLError,
        match=r"^the broker scheme 'tls' is now 'nats\+tls': write nats\+tls://\.\.\. in 'tls://h:4222'$",
    ):
        await _open(td.open_broker, "tls://h:4222")


@pytest.mark.parametrize(
    ("opener", "url", "message"),
    [
        (
            td.open_broker,
            "carrier://u:s3cret@coop",
            r"no broker is registered for the scheme 'carrier' in 'carrier://u:\*\*\*@coop'"
            r" \(known: (?:[a-z+]+, )*memory(?:, [a-z+]+)*;",
        ),
        (
            td.open_store,
            "carrier://u:s3cret@coop",
            r"no store is registered for the scheme 'carrier' in 'carrier://u:\*\*\*@coop'"
            r" \(known: memory, postgres, postgresql, sqlite;",
        ),
        (
            td.open_broker,
            "localhost:5672",
            r"not a broker URL: 'localhost:5672' \(expected e\.g\. 'memory://'\)",
        ),
        (
            td.open_store,
            "app.db",
            r"not a store URL: 'app\.db' \(expected e\.g\. 'sqlite:///app\.db'\)",
        ),
    ],
)
async def test_unknown_schemes_list_the_known_ones(
    opener: Callable[[str], AbstractAsyncContextManager[Any]], url: str, message: str
) -> None:
    with pytest.raises(td.InvalidURLError, match=message) as caught:
        await _open(opener, url)
    assert "s3cret" not in str(caught.value)


async def test_an_outside_adapter_that_fails_to_import_names_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Installed metadata registers 'carrier', but the module it names needs
    # something that is not there.
    info = tmp_path / "carrier_pigeon-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: carrier-pigeon\nVersion: 2.0\n")
    (info / "entry_points.txt").write_text(
        "[trio_durable.brokers]\ncarrier = carrier_pigeon_adapter:open_broker\n"
    )
    (tmp_path / "carrier_pigeon_adapter.py").write_text("import no_such_pigeon_client\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        td.InvalidURLError,
        match=_expected(
            "carrier",
            ("the carrier-pigeon package", "carrier-pigeon"),
            "no module named 'no_such_pigeon_client'",
        ),
    ):
        await _open(td.open_broker, "carrier://u:s3cret@coop")
