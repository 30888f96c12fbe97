"""Conformance suites: run them against your own store or broker adapter.

In the manner of `trio.testing.check_two_way_stream`, each check is an
``async def check_...(factory)`` that raises `AssertionError` when the
implementation breaks its protocol; a tuple lists the checks of each suite
for a parametrized test, and ``check_...`` runners run a whole suite. No
pytest fixture is involved: ``factory`` opens what the checks need (servers,
temporary directories, bridge modes are the factory's business).

For a broker adapter (``docs/writing-a-broker-adapter.md``)::

    from trio_durable.testing.conformance import BROKER_CHECKS, BrokerFactory

    factory = BrokerFactory(open=lambda: open_my_broker("mine://localhost"),
                            quiet_period=0.5)

    @pytest.mark.parametrize("check", BROKER_CHECKS, ids=lambda c: c.__name__)
    async def test_my_broker(check):
        await check(factory)

For a store (``docs/writing-a-store.md``), the same with ``STORE_CHECKS``
and a `StoreFactory` (or any zero-argument opener of a fresh, empty store).

A check about a capability the implementation lacks (``priorities=False``,
a store that is no `RunWatch`) is skipped, never passed: under pytest it
calls ``pytest.skip`` with the reason; elsewhere it raises `CheckSkipped`.
`run_checks` runs checks and reports each as a `CheckResult` (passed,
failed or skipped); the ``check_...`` runners return those of a whole suite
and raise at the first failure.
"""

# -- Brokers: the protocol suite and the engine suite (docs/brokers.md) --------------
# -- Blob stores (docs/large-payloads.md) ------------------------------------------
from ._blob_store import BLOB_STORE_CHECKS as BLOB_STORE_CHECKS
from ._blob_store import OpenBlobStore as OpenBlobStore
from ._blob_store import check_blob_store as check_blob_store
from ._broker import BROKER_CHECKS as BROKER_CHECKS
from ._broker import (
    check_a_body_over_max_payload_is_refused_and_nothing_is_sent as check_a_body_over_max_payload_is_refused_and_nothing_is_sent,
)
from ._broker import (
    check_a_cancelled_receive_loses_nothing as check_a_cancelled_receive_loses_nothing,
)
from ._broker import (
    check_a_waiting_receive_gets_a_later_dispatch as check_a_waiting_receive_gets_a_later_dispatch,
)
from ._broker import (
    check_acked_messages_are_never_delivered_again as check_acked_messages_are_never_delivered_again,
)
from ._broker import check_backlog_counts_what_waits as check_backlog_counts_what_waits
from ._broker import check_broker as check_broker
from ._broker import check_dispatched_bodies_arrive_intact as check_dispatched_bodies_arrive_intact
from ._broker import (
    check_higher_priorities_are_delivered_first as check_higher_priorities_are_delivered_first,
)
from ._broker import (
    check_ping_answers_and_disturbs_nothing as check_ping_answers_and_disturbs_nothing,
)
from ._broker import (
    check_prefetch_bounds_unacked_messages as check_prefetch_bounds_unacked_messages,
)
from ._broker import check_queues_are_separate as check_queues_are_separate
from ._broker import (
    check_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing as check_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing,
)
from ._broker import (
    check_receive_returns_at_least_one_and_at_most_max_items as check_receive_returns_at_least_one_and_at_most_max_items,
)
from ._broker import check_reject_requeues_or_drops as check_reject_requeues_or_drops
from ._broker import check_the_results_queue_is_a_queue as check_the_results_queue_is_a_queue
from ._broker import check_two_consumers_share_a_queue as check_two_consumers_share_a_queue
from ._broker import (
    check_unacked_messages_are_delivered_again_after_the_consumer_closes as check_unacked_messages_are_delivered_again_after_the_consumer_closes,
)
from ._broker_descriptors import (
    check_a_descriptor_is_forgotten_after_its_ttl as check_a_descriptor_is_forgotten_after_its_ttl,
)
from ._broker_descriptors import (
    check_an_announcement_without_heartbeat_lasts_until_withdrawn as check_an_announcement_without_heartbeat_lasts_until_withdrawn,
)
from ._broker_descriptors import (
    check_announce_withdraw_and_lookup_by_group as check_announce_withdraw_and_lookup_by_group,
)
from ._broker_descriptors import (
    check_descriptors_round_trip_every_field as check_descriptors_round_trip_every_field,
)
from ._broker_engine import (
    check_a_mix_of_remote_workflows_settles_exactly_once as check_a_mix_of_remote_workflows_settles_exactly_once,
)
from ._broker_engine_remote import (
    check_a_mix_of_workflows_decided_on_workers_settles_exactly_once as check_a_mix_of_workflows_decided_on_workers_settles_exactly_once,
)
from ._broker_engine_suite import BROKER_ENGINE_CHECKS as BROKER_ENGINE_CHECKS
from ._broker_engine_suite import check_broker_engine as check_broker_engine
from ._broker_factory import EVENTUALLY as EVENTUALLY
from ._broker_factory import QUIET_PERIOD as QUIET_PERIOD
from ._broker_factory import BrokerFactory as BrokerFactory
from ._broker_factory import BrokerMaker as BrokerMaker

# -- end of the broker suites ---------------------------------------------------------
# -- What every suite reports -------------------------------------------------------
from ._outcomes import CheckResult as CheckResult
from ._outcomes import CheckSkipped as CheckSkipped
from ._outcomes import Outcome as Outcome
from ._outcomes import run_checks as run_checks

# -- Stores: the store suite (docs/writing-a-store.md) -----------------------------
from ._store import STORE_CHECKS as STORE_CHECKS
from ._store import check_store as check_store
from ._store_support import OpenStore as OpenStore
from ._store_support import OpenStorePair as OpenStorePair
from ._store_support import StoreCheck as StoreCheck
from ._store_support import StoreFactory as StoreFactory
