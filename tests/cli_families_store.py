"""A SQLite file holding runs, a schedule, an event and entity states of
`cli_families_app`, for the tests of the command's families; and the
digest that tells whether a command changed a byte of it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

import cli_families_app
import trio_durable as td
from test_cli import invoke

APP = "cli_families_app:app"


def digest(path: Path) -> str:
    """The file's bytes (and its journal's, if one is left), hashed."""
    hashes = [hashlib.sha256(path.read_bytes()).hexdigest()]
    for extra in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-journal")):
        if extra.exists():
            hashes.append(hashlib.sha256(extra.read_bytes()).hexdigest())
    return ",".join(hashes)


async def fill(store: str) -> None:
    """``order-1`` waits for ``submit`` (with a line added), ``order-2``
    completed, ``parent-1`` completed with its children ``parent-1.child.*``,
    ``failing-1`` handed to ``failing-1.onError.*``, the schedule
    ``nightly`` (paused), the event ``evt-1`` with its run, the cart
    ``alice`` holding one item and the counter ``7`` at 1."""
    app = cli_families_app.app
    async with td.open_engine(app, store=store) as engine:
        first = await engine.start("order", "o-1", run_id="order-1")
        await engine.drain()
        assert await engine.update(first.id, "add_line", "apple", 2) == 2
        second = await engine.start("order", "o-2", run_id="order-2")
        await engine.drain()
        await engine.signal(second.id, "submit")
        await engine.start("parent", 2, run_id="parent-1")
        await engine.start("failing", "card declined", run_id="failing-1")
        await engine.create_schedule("nightly", "greet", cron="0 3 * * *", args=["night"])
        await engine.pause_schedule("nightly")
        await engine.send_event("order.placed", {"sku": "pen"}, event_id="evt-1")
        await engine.entity("cart", "alice").add("pen")
        await engine.entity("counter", 7).bump()
        await engine.drain()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("families") / "families.db"
    trio.run(fill, f"sqlite:///{path}")
    return path


@contextmanager
def unchanged(path: Path) -> Iterator[None]:
    """Checks that the block leaves the file byte-identical."""
    before = digest(path)
    yield
    assert digest(path) == before, "the command wrote to the store"


def env_of(path: Path, app: str | None = APP) -> dict[str, str | None]:
    """The environment of a command on the file (with the App, unless None)."""
    return {"TRIO_DURABLE_STORE": f"sqlite:///{path}", "TRIO_DURABLE_APP": app}


def refused(path: Path, args: list[str], code: int, app: str | None = APP) -> str:
    """Run a command that must fail with ``code`` and write nothing; its
    one error line."""
    from test_cli import one_error_line

    with unchanged(path):
        result = invoke(args, env=env_of(path, app))
    assert result.exit_code == code, (result.exit_code, result.output)
    return one_error_line(result)
