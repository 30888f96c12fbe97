"""Fixtures for every test tree of the repository: ``tests`` and the
adapters' ``brokers/*/tests``.

The adapters' test directories have no conftest.py of their own: modules in
``tests`` import helpers with ``from conftest import ...``, which must always
find ``tests/conftest.py``, and pytest keeps only the last conftest it
loaded under that name. ``tests`` is on ``sys.path`` (the ``pythonpath``
option in pyproject.toml), where ``servers`` starts the real servers.
"""

from servers.fixture import real_server as real_server
from time_limit import pytest_runtest_call as pytest_runtest_call
from time_limit import pytest_runtest_setup as pytest_runtest_setup
from time_limit import pytest_runtest_teardown as pytest_runtest_teardown
from time_limit import pytest_timeout_cancel_timer as pytest_timeout_cancel_timer
from time_limit import pytest_timeout_set_timer as pytest_timeout_set_timer

# A conformance check skipped for a capability an implementation lacks
# shows its reason under pytest-trio too.
pytest_plugins = ["trio_durable.testing.pytest_plugin"]
