"""trio-durable-rabbitmq: the RabbitMQ broker of trio-durable.

Installing it registers the ``amqp://`` and ``amqps://`` broker URL schemes
(entry-point group ``trio_durable.brokers``): ``td.open_engine(app,
broker="amqp://user:password@host:5672/vhost")`` then runs remote steps over
RabbitMQ, through aio-pika behind the asyncio bridge of
`trio_durable.brokers`. See ``docs/rabbitmq.md`` in trio-durable.
"""

from ._amqp import AmqpBroker as AmqpBroker
from ._amqp import AmqpStatistics as AmqpStatistics
from ._amqp import open_amqp_broker as open_amqp_broker
from ._amqp_consume import AmqpConsumer as AmqpConsumer
from ._amqp_topology import DEAD_LETTER_SUFFIX as DEAD_LETTER_SUFFIX
from ._amqp_topology import WORKERS_EXCHANGE as WORKERS_EXCHANGE
from ._amqp_topology import queue_arguments as queue_arguments
from ._amqp_url import DEFAULT_MAX_PAYLOAD as DEFAULT_MAX_PAYLOAD
from ._amqp_url import AmqpOptions as AmqpOptions
from ._amqp_url import parse_amqp_url as parse_amqp_url

__version__ = "0.1.0"

__all__ = [
    "DEAD_LETTER_SUFFIX",
    "DEFAULT_MAX_PAYLOAD",
    "WORKERS_EXCHANGE",
    "AmqpBroker",
    "AmqpConsumer",
    "AmqpOptions",
    "AmqpStatistics",
    "open_amqp_broker",
    "parse_amqp_url",
    "queue_arguments",
]
