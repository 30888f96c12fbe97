"""The ``trio-durable`` command masks only the password of a URL in its
error line (`trio_durable._base._urls.scrub`): a password equal to the user name,
the scheme, the host or a path segment (``postgres:postgres``,
``amqp:amqp``, ``nats:nats``, ``a:a``) leaves the scheme, the extra and
the rest of the message whole.

In process (click's `CliRunner`) where a client library must seem missing,
and as a real ``trio-durable`` process where a server refuses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cli_processes import CONSOLE_SCRIPT, TESTS, WITHIN
from trio_durable._cli import cli

POSTGRES = "postgresql://postgres:postgres@127.0.0.1:1/postgres"
AMQP = "amqp://amqp:amqp@127.0.0.1:1/amqp"
NATS = "nats://nats:nats@127.0.0.1:1"

NO_SUCH_STORE = (
    "Error: no store is registered for the scheme 'a' in 'a://a:***@a/a' (known: memory,"
    " postgres, postgresql, sqlite; packages add theirs under the entry-point group"
    " 'trio_durable.stores')"
)


def _uninstall(monkeypatch: pytest.MonkeyPatch, module: str, importers: list[str]) -> None:
    """``module`` as on a machine without it: None in sys.modules makes its
    import raise ModuleNotFoundError, and the modules that import it are
    dropped so that their import runs again and meets the gap."""
    for name in [n for n in sys.modules if n == module or n.startswith(f"{module}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, module, None)
    for name in importers:
        monkeypatch.delitem(sys.modules, name, raising=False)


def _error_line(args: list[str]) -> tuple[int, str]:
    """The exit code and the one error line of the command run in process."""
    runner = CliRunner(env={"TRIO_DURABLE_STORE": None, "TRIO_DURABLE_BROKER": None})
    result = runner.invoke(cli, args, prog_name="trio-durable")
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stderr.strip().splitlines()[-1]


MISSING = [
    (
        ["runs", "list", "--store", POSTGRES],
        "psycopg",
        ["trio_durable._stores._postgres", "trio_durable._stores._postgres_ops"],
        "Error: the store scheme 'postgresql' needs the 'postgres' extra:"
        " pip install 'trio-durable[postgres]' (no module named 'psycopg')",
    ),
    (
        ["workers", "--broker", AMQP],
        "aio_pika",
        ["trio_durable_rabbitmq", "trio_durable_rabbitmq._amqp"],
        "Error: the broker scheme 'amqp' needs the trio-durable-rabbitmq package:"
        " pip install trio-durable-rabbitmq (no module named 'aio_pika')",
    ),
    (
        ["workers", "--broker", NATS],
        "nats",
        ["trio_durable_nats", "trio_durable_nats._nats"],
        "Error: the broker scheme 'nats' needs the trio-durable-nats package:"
        " pip install trio-durable-nats (no module named 'nats')",
    ),
]


@pytest.mark.parametrize(
    ("args", "module", "importers", "expected"), MISSING, ids=[m[1] for m in MISSING]
)
def test_a_missing_extra_is_named_whole_whatever_the_password(
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    module: str,
    importers: list[str],
    expected: str,
) -> None:
    _uninstall(monkeypatch, module, importers)
    assert _error_line(args) == (2, expected)


def test_an_unknown_scheme_is_named_whole_whatever_the_password() -> None:
    assert _error_line(["runs", "list", "--store", "a://a:a@a/a"]) == (2, NO_SUCH_STORE)
    code, line = _error_line(["workers", "--broker", "a://a:a@a/a"])
    assert code == 2
    assert line.startswith("Error: no broker is registered for the scheme 'a' in 'a://a:***@a/a'")
    assert line.endswith("packages add theirs under the entry-point group 'trio_durable.brokers')")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``trio-durable ARGS`` as a process, with no store or broker in its
    environment."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TRIO_DURABLE_STORE", "TRIO_DURABLE_BROKER")
    }
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args],
        cwd=TESTS,
        env=environment,
        capture_output=True,
        text=True,
        timeout=WITHIN,
        check=False,
    )


REFUSED = [
    (
        ["runs", "list", "--store", POSTGRES],
        "Error: cannot open the PostgreSQL store at"
        " postgresql://postgres:***@127.0.0.1:1/postgres: connection failed:"
        ' connection to server at "127.0.0.1", port 1 failed: Connection refused',
    ),
    (
        ["runs", "list", "--store", "postgresql://u:127.0.0.1@127.0.0.1:1/x"],
        "Error: cannot open the PostgreSQL store at postgresql://u:***@127.0.0.1:1/x:"
        ' connection failed: connection to server at "127.0.0.1", port 1 failed:',
    ),
    (["workers", "--broker", AMQP], "Error: RabbitMQ: AMQPConnectionError: "),
    (
        ["workers", "--broker", NATS],
        "Error: cannot connect to NATS at nats://nats:***@127.0.0.1:1:",
    ),
    (["runs", "list", "--store", "a://a:a@a/a"], NO_SUCH_STORE),
]


@pytest.mark.parametrize(("args", "expected"), REFUSED, ids=[r[0][-1] for r in REFUSED])
def test_a_refusal_names_the_url_with_only_its_password_masked(
    args: list[str], expected: str
) -> None:
    done = _run(args)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(expected), done.stderr
    assert done.returncode == (2 if "://a:" in args[-1] else 3), done.stderr
    user_password = args[-1].partition("://")[2].rpartition("@")[0]
    assert user_password not in done.stderr + done.stdout
