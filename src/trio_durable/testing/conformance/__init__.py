"""Conformance suites: what an outside store or broker adapter runs to show
that it behaves as trio-durable needs.

In the manner of `trio.testing.check_two_way_stream`, each suite is a set of
``async def`` checks that take a factory of the thing under test, a tuple of
them all for ``pytest.mark.parametrize``, and one function that runs them
all. The in-tree stores and adapters are tested with the same suites.
"""

# The store suite.
from ._store import STORE_CHECKS as STORE_CHECKS
from ._store import check_store as check_store
from ._store_support import OpenStore as OpenStore
from ._store_support import OpenStorePair as OpenStorePair
from ._store_support import StoreCheck as StoreCheck
from ._store_support import StoreFactory as StoreFactory
