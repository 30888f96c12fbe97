"""trio-durable-nats: the NATS JetStream broker of trio-durable.

Installing it registers the ``nats://`` and ``nats+tls://`` broker URL
schemes (entry-point group ``trio_durable.brokers``): ``td.open_engine(app,
broker="nats://host:4222")`` then runs remote steps over NATS JetStream,
through nats-py behind the asyncio bridge of `trio_durable.brokers`. See
``docs/nats.md`` in trio-durable.
"""

from ._nats import NatsBroker as NatsBroker
from ._nats import NatsStatistics as NatsStatistics
from ._nats import open_nats_broker as open_nats_broker
from ._nats_consume import NatsConsumer as NatsConsumer
from ._nats_url import DEAD_STREAM as DEAD_STREAM
from ._nats_url import DEAD_SUBJECT as DEAD_SUBJECT
from ._nats_url import RESULTS_STREAM as RESULTS_STREAM
from ._nats_url import SCHEMES as SCHEMES
from ._nats_url import TASKS_STREAM as TASKS_STREAM
from ._nats_url import WORKERS_BUCKET as WORKERS_BUCKET
from ._nats_url import NatsOptions as NatsOptions
from ._nats_url import parse_nats_url as parse_nats_url
from ._nats_url import stream_and_subject as stream_and_subject
from ._nats_url import token as token

__version__ = "0.1.0"

__all__ = [
    "DEAD_STREAM",
    "DEAD_SUBJECT",
    "RESULTS_STREAM",
    "SCHEMES",
    "TASKS_STREAM",
    "WORKERS_BUCKET",
    "NatsBroker",
    "NatsConsumer",
    "NatsOptions",
    "NatsStatistics",
    "open_nats_broker",
    "parse_nats_url",
    "stream_and_subject",
    "token",
]
