"""A private RabbitMQ for the tests: a node on loopback, its state in a workdir.

Started without systemd, as ``.ci/run`` does: ``rabbitmq-server -detached``
with the listeners on 127.0.0.1, polled with ``rabbitmq-diagnostics -q ping``
(``rabbitmqctl await_startup`` fails at once if called before the node has
registered with epmd), then ``await_startup``. The node runs as root with
``HOME`` (so its Erlang cookie), its database and its logs under the workdir,
so the CLI calls of `stop` reach it with the same cookie. epmd, which the
node starts as a daemon and which outlives ``rabbitmqctl stop``, is killed
by the PID recorded at start (only if this module started it).

If something already answers on 127.0.0.1:5672, it is reused (as the guest
user) and `stop` leaves it alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Final

ENV: Final = "AMQP_URL"
PORT: Final = 5672
BIN: Final = Path("/usr/lib/rabbitmq/bin")
STARTUP_TIMEOUT: Final = 60.0
COMMAND_TIMEOUT: Final = 120.0
"""Seconds one command of the server's tools may take: a hung tool fails
the test that called it instead of blocking the run."""


def available() -> bool:
    """Whether RabbitMQ is installed here."""
    return (BIN / "rabbitmq-server").exists() or shutil.which("rabbitmq-server") is not None


def _answers(port: int = PORT) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _environment(workdir: Path, port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HOME=str(workdir),
        # One node per port, so a second private node (fault tests) can run
        # beside the shared one.
        RABBITMQ_NODENAME="rabbit@localhost" if port == PORT else f"rabbit-{port}@localhost",
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_DIST_PORT=str(port + 20000),
        ERL_EPMD_ADDRESS="127.0.0.1",
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        RABBITMQ_MNESIA_BASE=str(workdir / "mnesia"),
        RABBITMQ_LOG_BASE=str(workdir / "log"),
        RABBITMQ_PID_FILE=str(workdir / "rabbitmq.pid"),
        # No management plugin or other extras: they only slow start-up.
        RABBITMQ_ENABLED_PLUGINS_FILE=str(workdir / "enabled_plugins"),
    )
    return env


def _tool(name: str) -> str:
    # The Debian wrappers in /usr/sbin switch to the rabbitmq user, who can
    # neither read a root-owned workdir nor share its cookie: run the real
    # scripts as the caller.
    path = BIN / name
    return str(path) if path.exists() else name


def _epmd_pids() -> set[int]:
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "epmd":
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def start(workdir: Path, port: int = PORT) -> str:
    """Start RabbitMQ with its state under ``workdir`` (or reuse one that
    answers on ``port``) and return its URL once it accepts connections."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = f"amqp://guest:guest@127.0.0.1:{port}/"
    (workdir / "port").write_text(str(port))
    if _answers(port):
        # A node this workdir started earlier stays ours to stop; any other
        # is someone else's.
        if not (workdir / "epmd.pids").exists():
            (workdir / "reused").write_text(url)
        return url
    # Starting a node here: a marker left by an earlier reuse no longer holds.
    (workdir / "reused").unlink(missing_ok=True)
    (workdir / "enabled_plugins").write_text("[].\n")
    env = _environment(workdir, port)
    epmd_before = _epmd_pids()
    subprocess.run(
        [_tool("rabbitmq-server"), "-detached"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=COMMAND_TIMEOUT,
    )
    started_epmd = sorted(_epmd_pids() - epmd_before)
    (workdir / "epmd.pids").write_text(" ".join(map(str, started_epmd)))
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        ping = subprocess.run(
            [_tool("rabbitmq-diagnostics"), "-q", "ping"],
            env=env,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
        )
        if ping.returncode == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"RabbitMQ did not start: {ping.stderr.decode(errors='replace')}")
        time.sleep(0.5)
    subprocess.run(
        [_tool("rabbitmqctl"), "await_startup", "--timeout", str(int(STARTUP_TIMEOUT))],
        env=env,
        check=True,
        capture_output=True,
        timeout=STARTUP_TIMEOUT + COMMAND_TIMEOUT,
    )
    # epmd may have come up only while the node started.
    started_epmd = sorted(set(started_epmd) | (_epmd_pids() - epmd_before))
    (workdir / "epmd.pids").write_text(" ".join(map(str, started_epmd)))
    while not _answers(port):
        if time.monotonic() > deadline:
            raise RuntimeError("RabbitMQ started but does not accept AMQP connections")
        time.sleep(0.2)
    return url


def _port(workdir: Path) -> int:
    path = workdir / "port"
    return int(path.read_text()) if path.exists() else PORT


def stop(workdir: Path) -> None:
    """Stop the node `start` started under ``workdir``, and its epmd."""
    if (workdir / "reused").exists() or not (workdir / "epmd.pids").exists():
        return
    subprocess.run(
        [_tool("rabbitmqctl"), "stop"],
        env=_environment(workdir, _port(workdir)),
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
    )
    # epmd serves every Erlang node of the host: leave it to a node that
    # still uses it (another RabbitMQ started after ours). Ours leaves its
    # name there until its VM has exited, a moment after `stop` returns.
    ours = _environment(workdir, _port(workdir))["RABBITMQ_NODENAME"].split("@")[0]
    deadline = time.monotonic() + 10.0
    while True:
        names = subprocess.run(
            ["epmd", "-names"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT
        ).stdout
        registered = [line.split()[1] for line in names.splitlines() if line.startswith("name ")]
        if ours not in registered or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not [name for name in registered if name != ours]:
        for pid in (workdir / "epmd.pids").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
    (workdir / "epmd.pids").unlink()


def stop_app(workdir: Path) -> None:
    """Stop the RabbitMQ application in the node `start` started under
    ``workdir``, leaving the Erlang node up: every connection drops, and
    durable queues with their persistent messages wait on disk (fault tests)."""
    subprocess.run(
        [_tool("rabbitmqctl"), "stop_app"],
        env=_environment(workdir, _port(workdir)),
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
    )


def start_app(workdir: Path) -> None:
    """Start the application `stop_app` stopped, and wait until it accepts
    connections."""
    port = _port(workdir)
    subprocess.run(
        [_tool("rabbitmqctl"), "start_app"],
        env=_environment(workdir, port),
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not _answers(port):
        if time.monotonic() > deadline:
            raise RuntimeError("RabbitMQ did not come back")
        time.sleep(0.1)
