"""Real servers for the integration tests: RabbitMQ, NATS, PostgreSQL.

Each server has a module here (``rabbitmq``, ``nats``, ``postgres``) with:

- ``ENV``: the environment variable that carries its URL (``AMQP_URL``,
  ``NATS_URL``, ``POSTGRES_URL``);
- ``available() -> bool``: whether its binaries are installed here;
- ``start(workdir: Path) -> str``: start a private instance on loopback with
  its state under ``workdir``, wait until it answers, and return its URL;
  the processes outlive the caller (they are daemons), and what ``stop``
  needs is recorded under ``workdir``;
- ``stop(workdir: Path) -> None``: stop what ``start`` started there.

``.ci/run`` starts them all with ``python tests/servers start`` and exports
the URLs; a developer can do the same, or let the ``real_server`` fixture
(``tests/conftest.py``) start one for the test session when its variable is
unset. Under ``CI=true`` a missing server fails the tests instead of
skipping them, so a broken set-up can never pass as skipped tests.
"""

from __future__ import annotations

import importlib
import socket
from types import ModuleType
from typing import Final

NAMES: Final = ("rabbitmq", "nats", "postgres")


def module(name: str) -> ModuleType:
    """The module that starts and stops the server ``name``."""
    if name not in NAMES:
        raise ValueError(f"unknown server {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}")


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing listens on now (for the nodes of a
    cluster a test starts): all are held open until all are found."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
