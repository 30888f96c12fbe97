"""Hostile messages over NATS: the messages that crashed workers and engines
(issue 12, item 1) are published raw to a worker's task queue and to an
engine's results queue. Each is rejected, counted and copied to the
dead-letter stream; the worker and the engine keep running and still run a
workflow to its end. On the shared server, on subjects of a namespace of
their own.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import trio

from hostile import PATIENCE, open_hostile_feed
from trio_durable.brokers import open_broker
from trio_durable_nats import DEAD_STREAM, DEAD_SUBJECT, NatsBroker, token


async def dead_letter_count(broker: NatsBroker, queue: str) -> int:
    """How many copies the dead-letter stream holds for ``queue``."""
    subject = f"{DEAD_SUBJECT}.{token(queue)}"
    js = broker._js
    info = await broker._bridge.run(lambda: js.stream_info(DEAD_STREAM, subjects_filter=subject))
    return int((info.state.subjects or {}).get(subject, 0))


async def test_hostile_messages_are_rejected_counted_and_dead_lettered(
    real_server: Callable[[str], str],
) -> None:
    nats_url = real_server("nats")
    namespace = f"hostile{secrets.token_hex(4)}"
    async with open_broker(nats_url) as broker, open_hostile_feed(broker, namespace) as feed:
        assert isinstance(broker, NatsBroker)

        async def dead_now() -> tuple[int, int]:
            return (
                await dead_letter_count(broker, feed.route),
                await dead_letter_count(broker, feed.results_queue),
            )

        before = await dead_now()
        await feed.feed()
        # Each went to the dead-letter stream, under its queue's subject.
        expected = (before[0] + len(feed.tasks), before[1] + len(feed.results))
        with trio.fail_after(PATIENCE):
            while (counts := await dead_now()) != expected:
                assert all(c <= e for c, e in zip(counts, expected, strict=True)), counts
                await trio.sleep(0.05)
