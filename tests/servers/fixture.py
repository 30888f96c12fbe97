"""The ``real_server`` fixture, shared by every test tree of the repository
(``tests`` and the adapters' ``brokers/*/tests``): the repository's root
``conftest.py`` imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from . import module


def installed(name: str) -> ModuleType:
    """The module of the server ``name`` (see `module`), for a test that
    starts a private instance of its own (to stop or kill it). Skips the
    test when the server's binaries are not installed here, except under
    ``CI=true`` (``.ci/run`` installs them all), where that fails it: a
    broken set-up never passes as skipped tests."""
    server = module(name)
    if not server.available():
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (CI=true: every server must be)")
        pytest.skip(f"{name} is not installed")
    return server


@pytest.fixture(scope="session")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Returns the URL of a real server (``"rabbitmq"``, ``"nats"`` or
    ``"postgres"``; see ``tests/servers``): the one its environment variable
    names (``.ci/run`` starts them), else one started for this test session
    and stopped after it. Skips the test when the server is not installed,
    except under ``CI=true``, where a missing server is a failure."""
    started: dict[str, str] = {}
    workdirs: list[tuple[ModuleType, Path]] = []

    def url(name: str) -> str:
        server = module(name)
        if os.environ.get(server.ENV):
            return str(os.environ[server.ENV])
        if name not in started:
            installed(name)
            workdir = tmp_path_factory.mktemp(name)
            started[name] = server.start(workdir)
            workdirs.append((server, workdir))
        return started[name]

    yield url
    for server, workdir in workdirs:
        server.stop(workdir)
