"""A RabbitMQ cluster on loopback for the failover tests: ``size`` nodes
(``tdq1@localhost``, ``tdq2@localhost``, ...) of the installed RabbitMQ,
each with its own AMQP and distribution ports, database, logs and (empty)
plugins file, sharing one Erlang cookie (``HOME`` is the cluster's
workdir, where the cookie file is written).

The first node starts alone; the others start together and join it as they
boot (``cluster_formation.classic_config``), which is quicker than the
``stop_app``/``join_cluster``/``start_app`` round of ``rabbitmqctl`` for
each. The shared single RabbitMQ of tests/servers/rabbitmq.py runs as
``rabbit@localhost`` on 5672/25672; the cluster's nodes take other names and
free ports, and share only epmd (which serves every Erlang node of the host;
one this module started is stopped with the last node that uses it).

A cluster belongs to the test that starts it: `kill` SIGKILLs a node's Erlang
VM, `restart` starts it again on its ports and data (it rejoins its peers),
`stop` stops every node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

from . import free_ports
from . import rabbitmq as rabbitmq_server

STARTUP_TIMEOUT: Final = 90.0
COOKIE: Final = "TRIODURABLECLUSTERTESTCOOKIE"

_CONFIG: Final = """\
# Written by tests/servers/rabbitmq_cluster.py.
listeners.tcp.1 = 127.0.0.1:{port}
loopback_users = none
cluster_formation.peer_discovery_backend = classic_config
cluster_formation.classic_config.nodes.1 = {first}
"""


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


class RabbitCluster:
    """``size`` nodes named ``tdq1@localhost``, ... with state under ``workdir``."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        if not rabbitmq_server.available():
            raise RuntimeError("RabbitMQ is not installed (the rabbitmq-server package)")
        self.workdir = workdir
        self.names = [f"tdq{i + 1}@localhost" for i in range(size)]
        ports = free_ports(2 * size)
        self.ports = ports[:size]
        self.dist_ports = ports[size:]
        self._running: set[str] = set()
        self._epmd_started: set[int] = set()
        cookie = workdir / ".erlang.cookie"
        cookie.write_text(COOKIE)
        cookie.chmod(0o400)
        for i, name in enumerate(self.names):
            home = self._home(name)
            (home / "log").mkdir(parents=True, exist_ok=True)
            (home / "enabled_plugins").write_text("[].\n")
            (home / "rabbitmq.conf").write_text(
                _CONFIG.format(port=self.ports[i], first=self.names[0])
            )

    def _home(self, name: str) -> Path:
        return self.workdir / name.split("@")[0]

    def _environment(self, name: str) -> dict[str, str]:
        i = self.names.index(name)
        home = self._home(name)
        env = dict(os.environ)
        env.pop("RABBITMQ_ERLANG_COOKIE", None)
        env.update(
            HOME=str(self.workdir),
            RABBITMQ_NODENAME=name,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.ports[i]),
            RABBITMQ_DIST_PORT=str(self.dist_ports[i]),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CONFIG_FILE=str(home / "rabbitmq.conf"),
            RABBITMQ_MNESIA_BASE=str(home / "mnesia"),
            RABBITMQ_LOG_BASE=str(home / "log"),
            RABBITMQ_PID_FILE=str(home / "rabbitmq.pid"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(home / "enabled_plugins"),
        )
        return env

    def ctl(self, name: str, *args: str, tool: str = "rabbitmqctl", timeout: float = 60.0) -> str:
        """Run a CLI tool against node ``name``; its output (raises if it fails)."""
        done = subprocess.run(
            [rabbitmq_server._tool(tool), "-n", name, *args],
            env=self._environment(name),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} on {name} failed: {done.stderr.strip()}")
        return done.stdout

    def url(self, *, first: int = 0, **options: str) -> str:
        """The broker URL: node ``first``, the others (in turn after it) as
        seeds, quorum queues; ``options`` added to its query."""
        ports = self.ports[first:] + self.ports[:first]
        seeds = ",".join(f"127.0.0.1:{port}" for port in ports[1:])
        query = {"queue_type": "quorum", "seeds": seeds, **options}
        return f"amqp://guest:guest@127.0.0.1:{ports[0]}/?" + "&".join(
            f"{k}={v}" for k, v in query.items()
        )

    def start(self) -> None:
        """Start the first node, then the others together (joining it), and
        wait until all of them run as one cluster."""
        epmd_before = rabbitmq_server._epmd_pids()
        self._spawn(self.names[0])
        self._epmd_started |= rabbitmq_server._epmd_pids() - epmd_before
        self._await(self.names[0])
        with ThreadPoolExecutor(len(self.names)) as pool:
            list(pool.map(self._spawn, self.names[1:]))
            list(pool.map(self._await, self.names[1:]))
        self._epmd_started |= rabbitmq_server._epmd_pids() - epmd_before
        self.wait_clustered()

    def _spawn(self, name: str) -> None:
        subprocess.run(
            [rabbitmq_server._tool("rabbitmq-server"), "-detached"],
            env=self._environment(name),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=rabbitmq_server.COMMAND_TIMEOUT,
        )
        self._running.add(name)

    def _await(self, name: str) -> None:
        """Wait until node ``name`` accepts AMQP connections."""
        port = self.ports[self.names.index(name)]
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _answers(port):
            if time.monotonic() > deadline:
                log = self._home(name) / "log" / f"{name}.log"
                tail = log.read_text()[-2000:] if log.exists() else "(no log)"
                raise RuntimeError(f"RabbitMQ node {name} did not start:\n{tail}")
            time.sleep(0.1)

    def wait_clustered(self) -> None:
        """Wait until every running node sees every running node."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            running = self.running_nodes()
            if running >= self._running:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster incomplete: {running} of {self._running}")
            time.sleep(0.2)

    def running_nodes(self) -> set[str]:
        """The nodes a running node says are running in the cluster."""
        for name in sorted(self._running):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                out = self.ctl(name, "eval", "rabbit_nodes:all_running().", timeout=15.0)
                return {part.strip(" '[]\n") for part in out.split(",") if "@" in part}
        return set()

    def pid(self, name: str) -> int:
        return int((self._home(name) / "rabbitmq.pid").read_text().strip())

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``'s Erlang VM: no goodbye to peers or clients."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while _alive(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {name} (pid {pid}) did not die")
            time.sleep(0.02)
        self._running.discard(name)

    def restart(self, name: str) -> None:
        """Start node ``name`` again on its ports and data; it rejoins."""
        self._spawn(name)
        self._await(name)
        self.wait_clustered()

    def queue_leader(self, queue: str, vhost: str = "/") -> str:
        """The node that leads quorum queue ``queue`` now, as a running node says."""
        for name in sorted(self._running):
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                out = self.ctl(
                    name,
                    *("list_queues", "-p", vhost, "name", "leader"),
                    *("--quiet", "--no-table-headers"),
                    timeout=15.0,
                )
                for line in out.splitlines():
                    fields = line.split("\t")
                    if len(fields) == 2 and fields[0] == queue and fields[1] in self.names:
                        return fields[1]
        raise RuntimeError(f"no running node knows the leader of {queue!r}")

    def stop(self) -> None:
        """Stop every node (SIGKILL: the data dir is thrown away), then the
        epmd this cluster started if no other node uses it."""
        for name in list(self._running):
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self.kill(name)
        self._running.clear()
        ours = {name.split("@")[0] for name in self.names}
        deadline = time.monotonic() + 10.0
        while True:
            names = subprocess.run(
                ["epmd", "-names"],
                capture_output=True,
                text=True,
                timeout=rabbitmq_server.COMMAND_TIMEOUT,
            ).stdout
            registered = {
                line.split()[1] for line in names.splitlines() if line.startswith("name ")
            }
            if not registered & ours or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not registered - ours:
            for pid in self._epmd_started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is no zombie (the detached node is
    not our child, and PID 1 of a container may never reap it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
