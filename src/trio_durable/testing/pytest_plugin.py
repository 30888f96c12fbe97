"""A pytest plugin for tests of trio-durable's extension points.

Load it from the ``conftest.py`` at the root of your tests::

    pytest_plugins = ["trio_durable.testing.pytest_plugin"]

It makes a check of ``trio_durable.testing.conformance`` that is skipped
(a capability your broker or store says it lacks) show its reason under
pytest-trio, which otherwise reports the skip without it.
"""

from ._pytest_skips import pytest_runtest_call as pytest_runtest_call

__all__ = ["pytest_runtest_call"]
