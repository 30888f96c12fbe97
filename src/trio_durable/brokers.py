"""The broker adapter SDK: what a broker adapter is written against.

An adapter implements `Broker` (and its `Consumer`) over some message
broker, and imports nothing of trio-durable but this module and the
top-level ``trio_durable`` (a test keeps the in-tree adapters to that). It
finds here:

- the protocol and its message types: `Broker`, `Consumer`, `Outgoing`,
  `Delivery`, `WorkerDescriptor`, the `RESULTS` queue name,
  `is_broker_safe`, and `needs_heartbeat`, which reads a broker's optional
  member of that name (False: announcements last until withdrawn, with no
  heartbeat; True where a broker does not have it), and `ping`, which asks
  a broker whose optional ``ping`` member (`Pingable`) makes one round
  trip to its server whether it answers now, and `backlog`, which asks
  one whose optional ``backlog`` member (`SupportsBacklog`) counts the
  messages waiting on a queue; `WorkerLoad`, how busy a worker said it was
  in its descriptor;
- the errors it raises: `BrokerUnavailable` (the client library's error
  translated at the boundary, chained as ``__cause__``), `PayloadTooLarge`
  (checked with `check_payload_sizes` before anything is sent), both kinds
  of `BrokerError`, and `InvalidURLError` and `UsageError` for bad URLs and
  bad calls;
- the bridge to an asyncio client library: `open_bridge` gives a `Bridge`
  (``thread`` or ``trio-asyncio`` mode, `bridge_mode` reads a URL's
  ``?bridge=``) that runs coroutines on the client's loop and hands
  deliveries over in batches through an `Inbox`; `OwnedTasks` holds the
  asyncio tasks the adapter starts on that loop; an `Outbox` publishes the
  messages of concurrent dispatches a batch at a time (`OutboxJob` says how
  each dispatch's went);
- the descriptor codec, `descriptor_to_json` and `descriptor_from_json`, for
  adapters that keep announcements on a server;
- clock access: `Clock` reads durable time (seconds since the epoch, moving
  with Trio's clock), for expiries compared across processes, and
  `Bridge.now` reads Trio's clock from the asyncio side too;
- URLs in messages: `mask_url` and `scrub` keep passwords out of errors and
  logs, `userinfo_is_ambiguous` (with `AMBIGUOUS_HINT`) refuses a URL whose
  password would be split across its parts;
- `open_broker`, and the in-process `MemoryBroker` (with `BrokerFaults`).

An adapter registers its opener (a callable taking the URL and returning an
async context manager that yields the broker) under the entry-point group
``trio_durable.brokers``, named by URL scheme, and runs the public
conformance suites of `trio_durable.testing.conformance` against its own
factory. See ``docs/brokers.md`` and ``docs/writing-a-broker-adapter.md``.
"""

from ._base._clock import Clock as Clock
from ._base._exceptions import InvalidURLError as InvalidURLError
from ._base._exceptions import UsageError as UsageError
from ._base._urls import AMBIGUOUS_HINT as AMBIGUOUS_HINT
from ._base._urls import mask_url as mask_url
from ._base._urls import scrub as scrub
from ._base._urls import userinfo_is_ambiguous as userinfo_is_ambiguous
from ._brokers import open_broker as open_broker
from ._brokers._base import RESULTS as RESULTS
from ._brokers._base import Broker as Broker
from ._brokers._base import BrokerError as BrokerError
from ._brokers._base import BrokerUnavailable as BrokerUnavailable
from ._brokers._base import Consumer as Consumer
from ._brokers._base import Delivery as Delivery
from ._brokers._base import Outgoing as Outgoing
from ._brokers._base import PayloadTooLarge as PayloadTooLarge
from ._brokers._base import Pingable as Pingable
from ._brokers._base import SupportsBacklog as SupportsBacklog
from ._brokers._base import WorkerDescriptor as WorkerDescriptor
from ._brokers._base import WorkerLoad as WorkerLoad
from ._brokers._base import backlog as backlog
from ._brokers._base import check_payload_sizes as check_payload_sizes
from ._brokers._base import is_broker_safe as is_broker_safe
from ._brokers._base import needs_heartbeat as needs_heartbeat
from ._brokers._base import ping as ping
from ._brokers._bridge import DEFAULT_BRIDGE as DEFAULT_BRIDGE
from ._brokers._bridge import Bridge as Bridge
from ._brokers._bridge import BridgeMode as BridgeMode
from ._brokers._bridge import BridgeStatistics as BridgeStatistics
from ._brokers._bridge import Inbox as Inbox
from ._brokers._bridge import OwnedTasks as OwnedTasks
from ._brokers._bridge import bridge_mode as bridge_mode
from ._brokers._bridge import open_bridge as open_bridge
from ._brokers._codec import descriptor_from_json as descriptor_from_json
from ._brokers._codec import descriptor_to_json as descriptor_to_json
from ._brokers._memory import BrokerFaults as BrokerFaults
from ._brokers._memory import MemoryBroker as MemoryBroker
from ._brokers._outbox import Outbox as Outbox
from ._brokers._outbox import OutboxJob as OutboxJob

__all__ = [
    "AMBIGUOUS_HINT",
    "DEFAULT_BRIDGE",
    "RESULTS",
    "Bridge",
    "BridgeMode",
    "BridgeStatistics",
    "Broker",
    "BrokerError",
    "BrokerFaults",
    "BrokerUnavailable",
    "Clock",
    "Consumer",
    "Delivery",
    "Inbox",
    "InvalidURLError",
    "MemoryBroker",
    "Outbox",
    "OutboxJob",
    "OwnedTasks",
    "Outgoing",
    "PayloadTooLarge",
    "Pingable",
    "SupportsBacklog",
    "UsageError",
    "WorkerDescriptor",
    "WorkerLoad",
    "backlog",
    "bridge_mode",
    "check_payload_sizes",
    "descriptor_from_json",
    "descriptor_to_json",
    "is_broker_safe",
    "mask_url",
    "needs_heartbeat",
    "open_bridge",
    "open_broker",
    "ping",
    "scrub",
    "userinfo_is_ambiguous",
]
