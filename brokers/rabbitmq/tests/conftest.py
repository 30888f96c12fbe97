"""Fixtures of the RabbitMQ adapter's tests.

They run against the server ``AMQP_URL`` names, or one that the
repository's ``tests/servers`` starts for the session when RabbitMQ is
installed (``real_server``; under ``CI=true`` a missing server fails them).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from servers.fixture import real_server as real_server


@pytest.fixture(scope="session")
def amqp_url(real_server: Callable[[str], str]) -> str:
    """The URL of the RabbitMQ server under test."""
    return real_server("rabbitmq")
