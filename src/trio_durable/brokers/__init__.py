"""What a broker adapter is written against.

An adapter implements `Broker` (and its `Consumer`), translates its client
library's errors into `BrokerUnavailable`, reports its size limit as
`Broker.max_payload` (refusing larger bodies with `PayloadTooLarge`: see
`check_payload_sizes`), shows URLs only through `mask_url` and `scrub`, and
registers an opener under the
entry-point group ``trio_durable.brokers`` by URL scheme. It must pass the
suites in ``tests/conformance/test_broker.py`` and
``tests/conformance/test_broker_engine.py``; see ``docs/brokers.md``.
"""

from .._brokers import open_broker as open_broker
from .._brokers._base import RESULTS as RESULTS
from .._brokers._base import Broker as Broker
from .._brokers._base import BrokerError as BrokerError
from .._brokers._base import BrokerUnavailable as BrokerUnavailable
from .._brokers._base import Consumer as Consumer
from .._brokers._base import Delivery as Delivery
from .._brokers._base import Outgoing as Outgoing
from .._brokers._base import PayloadTooLarge as PayloadTooLarge
from .._brokers._base import WorkerDescriptor as WorkerDescriptor
from .._brokers._base import check_payload_sizes as check_payload_sizes
from .._brokers._base import is_broker_safe as is_broker_safe
from .._brokers._memory import BrokerFaults as BrokerFaults
from .._brokers._memory import MemoryBroker as MemoryBroker
from .._urls import mask_url as mask_url
from .._urls import scrub as scrub

__all__ = [
    "RESULTS",
    "Broker",
    "BrokerError",
    "BrokerFaults",
    "BrokerUnavailable",
    "Consumer",
    "Delivery",
    "MemoryBroker",
    "Outgoing",
    "PayloadTooLarge",
    "WorkerDescriptor",
    "check_payload_sizes",
    "is_broker_safe",
    "mask_url",
    "open_broker",
    "scrub",
]
