"""A private PostgreSQL server for the tests, from Debian's server binaries.

``start`` runs ``initdb`` (as the ``postgres`` user when we are root: the
server refuses to run as root) and ``pg_ctl start`` with the server listening
on 127.0.0.1 only, trust authentication on loopback, its socket in its data
folder, and the durable defaults (``fsync`` and ``synchronous_commit`` on). It
creates the database ``trio_durable`` and waits until that answers.

The data folder is ``workdir/data``. When the ``postgres`` user cannot reach
``workdir`` (pytest's temporary folders are private to root), the data lives in
a folder of its own under the system's temporary folder instead, and
``workdir/data`` is a symbolic link to it, which ``stop`` removes with it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

ENV: Final = "POSTGRES_URL"
DEFAULT_PORT: Final = 5432
DATABASE: Final = "trio_durable"
USER: Final = "postgres"
START_TIMEOUT: Final = 60.0
COMMAND_TIMEOUT: Final = 120.0
"""Seconds one command of the server's tools may take: a hung tool fails
the test that called it instead of blocking the run."""


def _bindir() -> Path | None:
    """The newest installed server's binaries, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    return Path(found[-1]).parent if found else None


def available() -> bool:
    """Whether PostgreSQL's server binaries are installed."""
    return _bindir() is not None


def _as_server_user(argv: list[str]) -> list[str]:
    # The server refuses to run as root; as anyone else it runs as that user.
    if os.geteuid() == 0:
        return ["runuser", "-u", USER, "--", *argv]
    return argv


def _run(argv: list[str]) -> str:
    done = subprocess.run(
        _as_server_user(argv),
        capture_output=True,
        text=True,
        check=False,
        timeout=COMMAND_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        # As the server binds: a port our own stopped server left in
        # TIME_WAIT is free to it.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _url(port: int) -> str:
    return f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}"


def _reachable_by_server_user(folder: Path) -> bool:
    if os.geteuid() != 0:
        return True
    done = subprocess.run(
        _as_server_user(["test", "-w", str(folder), "-a", "-x", str(folder)]),
        check=False,
        timeout=COMMAND_TIMEOUT,
    )
    return done.returncode == 0


def _data_dir(workdir: Path) -> Path:
    """Create the data folder (or the link to it) and return its path."""
    data = workdir / "data"
    if data.is_symlink():
        data.unlink()  # dangling: a failed initdb removed its target
    if os.geteuid() == 0:
        os.chown(workdir, *_server_ids())
    if _reachable_by_server_user(workdir):
        data.mkdir(mode=0o700)
    else:
        data.symlink_to(tempfile.mkdtemp(prefix="trio-durable-postgres-"))
    if os.geteuid() == 0:
        os.chown(data.resolve(), *_server_ids())
    return data


def _server_ids() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def _running(bindir: Path, data: Path) -> bool:
    done = subprocess.run(
        _as_server_user([str(bindir / "pg_ctl"), "status", "-D", str(data)]),
        capture_output=True,
        check=False,
        timeout=COMMAND_TIMEOUT,
    )
    return done.returncode == 0


def _wait_until_ready(bindir: Path, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        done = subprocess.run(
            [
                str(bindir / "pg_isready"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                USER,
                "-d",
                DATABASE,
            ],
            capture_output=True,
            check=False,
            timeout=COMMAND_TIMEOUT,
        )
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"PostgreSQL on port {port} did not answer within {START_TIMEOUT} s")
        time.sleep(0.1)


def _initdb(bindir: Path, data: Path) -> None:
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ]
        )
    except BaseException:
        # Leave no half-made cluster behind for the next start to trip on.
        shutil.rmtree(data, ignore_errors=True)
        raise


def start(workdir: Path) -> str:
    """Start a server with its state under ``workdir`` and return its URL.

    A server started earlier in the same ``workdir`` and still running is
    reused.
    """
    bindir = _bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    workdir = workdir.resolve()
    data = workdir / "data"
    port_file = workdir / "port"
    if data.exists() and port_file.exists() and _running(bindir, data.resolve()):
        port = int(port_file.read_text())
        _wait_until_ready(bindir, port)
        return _url(port)
    if not data.exists():
        data = _data_dir(workdir)
        # Through the link, if any: the server user may not reach workdir.
        data = data.resolve()
        _initdb(bindir, data)
    data = data.resolve()
    # A restarted server keeps its port, so URLs handed out stay good.
    port = int(port_file.read_text()) if port_file.exists() else DEFAULT_PORT
    if not _port_is_free(port):
        port = _free_port()
    port_file.write_text(str(port))
    options = (
        f"-h 127.0.0.1 -p {port} -k {data.resolve()} -c fsync=on -c synchronous_commit=on"
        " -c max_connections=200"
    )
    _run(
        [
            str(bindir / "pg_ctl"),
            "start",
            "-D",
            str(data),
            "-w",
            "-t",
            str(int(START_TIMEOUT)),
            "-l",
            str(data.resolve() / "server.log"),
            "-o",
            options,
        ]
    )
    _wait_until_ready(bindir, port)
    exists = _run(
        [
            str(bindir / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            USER,
            "-d",
            "postgres",
            "-tAc",
            f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'",
        ]
    )
    if exists.strip() != "1":
        _run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, DATABASE])
    _wait_until_ready(bindir, port)
    return _url(port)


def stop(workdir: Path, *, keep_data: bool = False) -> None:
    """Stop the server ``start`` started in ``workdir`` and, unless
    ``keep_data`` (a test that restarts it), remove its data folder if it
    lives outside ``workdir``."""
    bindir = _bindir()
    data = workdir.resolve() / "data"
    if bindir is None or not data.exists():
        return
    if _running(bindir, data.resolve()):
        _run([str(bindir / "pg_ctl"), "stop", "-D", str(data.resolve()), "-m", "fast", "-w"])
    if data.is_symlink() and not keep_data:
        shutil.rmtree(data.resolve(), ignore_errors=True)
        data.unlink()


def restart(workdir: Path) -> None:
    """Restart the server ``start`` started in ``workdir``, on the same port,
    with a fast shutdown: every connection is cut at once and transactions
    in flight roll back (a commit sent may have landed or not)."""
    bindir = _bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)")
    data = (workdir.resolve() / "data").resolve()
    _run(
        [
            str(bindir / "pg_ctl"),
            "restart",
            "-D",
            str(data),
            "-m",
            "fast",
            "-w",
            "-t",
            str(int(START_TIMEOUT)),
            "-l",
            str(data / "server.log"),
        ]
    )
    _wait_until_ready(bindir, int((workdir / "port").read_text()))


@asynccontextmanager
async def scratch_schema(url: str) -> AsyncIterator[str]:
    """A URL of the server at ``url`` whose store lives in a fresh, uniquely
    named schema (the ``schema`` option), dropped afterwards: a test gets an
    empty database in milliseconds, without ``CREATE DATABASE``."""
    import psycopg
    import trio
    from psycopg import sql

    schema = f"test_{uuid.uuid4().hex}"
    separator = "&" if urlsplit(url).query else "?"
    try:
        yield f"{url}{separator}schema={schema}"
    finally:

        def drop() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(drop)
