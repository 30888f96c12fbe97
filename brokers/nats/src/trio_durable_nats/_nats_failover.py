"""Getting past "no responders" in a JetStream cluster.

A publish to a stream, or a pull request to a consumer, that reaches no
leader comes back at once with status 503, "no responders": nothing on the
server the client is connected to, nor on its routes, listens on that
subject. For a few seconds after a leader dies that is normal (the peers
elect a new leader, which then subscribes), and the answer is to publish
again a little later (`Backoff`).

It is not always transient. After the task stream's leader was SIGKILLed
and restarted under load, we saw a server of a healthy 3-node cluster keep
answering 503 for minutes to an established connection's publishes, while
the stream had a leader and the same connection still reached other
streams (see ``docs/nats.md``). The cure is the one a
restart of that server gives: another server. `ServerSwitch` notices
refusals for one stream that go on past `SWITCH_AFTER` seconds without an
answer in between and makes nats-py reconnect to another server of its
pool (the URL's ``seeds`` and the servers the cluster advertised). The
subscriptions come back with the connection; publishes whose
acknowledgement was lost time out and are published again, and messages
held unacked come back after ``ack_wait`` (at least once, as always).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, final

from nats.aio.client import Client as NatsClient

logger = logging.getLogger("trio_durable.brokers.nats")

SWITCH_AFTER: Final = 8.0
"""Seconds of "no responders" for one stream, with no answer from it in
between, after which the connection moves to another server. A leader
election after a crash takes a few seconds (the survivors wait out an
election timeout first); switching during one would not help."""


@final
class Backoff:
    """Waits between attempts that got "no responders": from `first`
    seconds, doubling up to `most`, back to `first` after `reset`."""

    __slots__ = ("_next", "first", "most")

    def __init__(self, first: float = 0.05, most: float = 1.0) -> None:
        self.first = first
        self.most = most
        self._next = first

    def next(self) -> float:
        """The wait before the next attempt."""
        wait = self._next
        self._next = min(self.most, wait * 2)
        return wait

    def reset(self) -> None:
        self._next = self.first


def stream_key(subject: str) -> str:
    """What refusals are counted by: the subject without its last token
    (``trio_durable.task``, ``$JS.API.CONSUMER.MSG.NEXT.<stream>``), one
    key per stream this adapter publishes or pulls from."""
    return subject.rpartition(".")[0] or subject


@final
class ServerSwitch:
    """Moves the connection to another server when one stream stays
    unreachable from this one (on the asyncio loop: nats-py's side).

    Attributes:
      switches: Reconnections it asked for.
    """

    def __init__(self, nc: NatsClient, after: float = SWITCH_AFTER) -> None:
        self._nc = nc
        self._after = after
        # Stream key -> when its current run of refusals began (loop time).
        self._refused_since: dict[str, float] = {}
        self.switches = 0

    def answered(self, key: str) -> None:
        """A publish or pull for ``key`` got an answer: its run ends."""
        self._refused_since.pop(key, None)

    async def refused(self, key: str) -> None:
        """A publish or pull for ``key`` got "no responders"."""
        nc = self._nc
        now = asyncio.get_running_loop().time()
        since = self._refused_since.setdefault(key, now)
        if now - since < self._after:
            return
        if len(nc.servers) < 2 or not nc.is_connected:
            return  # nowhere else to go, or already on the way there
        # A new run for every stream: the next server gets its own chance.
        self._refused_since.clear()
        self.switches += 1
        server = nc.connected_url
        logger.warning(
            "NATS server %s answered 'no responders' for %s for %.0f s; moving to another server",
            f"{server.hostname}:{server.port}" if server is not None else "?",
            key,
            now - since,
        )
        await nc.force_reconnect()
