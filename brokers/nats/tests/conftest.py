"""Fixtures of the NATS adapter's tests.

They run against the server ``NATS_URL`` names, or one that the
repository's ``tests/servers`` starts for the session when nats-server is
installed (``real_server``; under ``CI=true`` a missing server fails them).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servers.fixture import real_server as real_server


@pytest.fixture(scope="session")
def nats_url(real_server: Callable[[str], str]) -> str:
    """The URL of the NATS server under test."""
    return real_server("nats")
