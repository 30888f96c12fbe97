"""What the NATS adapter keeps on the server, made or brought up to date
on the asyncio side of the bridge: the streams, the durable pull consumer
of each queue and the bucket of worker announcements, and reading that
bucket and a queue's backlog (see ``docs/nats.md``)."""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from ._nats_url import (
    DEAD_MAX_AGE,
    DEAD_STREAM,
    DEAD_SUBJECT,
    RESULT_SUBJECT,
    RESULTS_STREAM,
    TASK_SUBJECT,
    TASKS_STREAM,
    WORKERS_BUCKET,
    NatsOptions,
    stream_and_subject,
    token,
)


async def ensure_stream(js: JetStreamContext, config: api.StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        # 10058: the stream exists with other settings (an older version of
        # this adapter, or other URL options): bring it to these.
        if exc.err_code != 10058:
            raise
        await js.update_stream(config)


async def set_up(js: JetStreamContext, options: NatsOptions) -> KeyValue:
    """Create the streams and the bucket, or bring them to these settings."""
    for name, subject, retention, max_age in (
        (TASKS_STREAM, TASK_SUBJECT, api.RetentionPolicy.WORK_QUEUE, None),
        (RESULTS_STREAM, RESULT_SUBJECT, api.RetentionPolicy.WORK_QUEUE, None),
        (DEAD_STREAM, DEAD_SUBJECT, api.RetentionPolicy.LIMITS, DEAD_MAX_AGE),
    ):
        await ensure_stream(
            js,
            api.StreamConfig(
                name=name,
                description="trio-durable (see docs/nats.md)",
                subjects=[f"{subject}.>"],
                retention=retention,
                storage=api.StorageType.FILE,
                num_replicas=options.replicas,
                max_age=max_age,
            ),
        )
    try:
        return await js.create_key_value(
            bucket=WORKERS_BUCKET,
            description="trio-durable worker announcements",
            history=1,
            storage=api.StorageType.FILE,
            replicas=options.replicas,
        )
    except nats.js.errors.BadRequestError:
        # It exists with other settings: use it as it is.
        return await js.key_value(WORKERS_BUCKET)


async def ensure_consumer(
    js: JetStreamContext, stream: str, subject: str, name: str, options: NatsOptions
) -> None:
    # Create-or-update: the server keeps one durable consumer per name and
    # takes the editable settings (ack_wait, max_deliver, the inactive
    # threshold) from the last call. A consumer the server deleted for its
    # inactivity is created again here, with its queue's messages, which
    # the stream kept: deleting it loses nothing.
    await js.add_consumer(
        stream,
        api.ConsumerConfig(
            name=name,
            durable_name=name,
            filter_subject=subject,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            ack_wait=options.ack_wait,
            max_deliver=options.max_deliver,
            max_ack_pending=-1,
            # 0: kept forever (nats-py leaves out a None, which an update
            # would read as "unchanged").
            inactive_threshold=options.inactive_threshold or 0.0,
        ),
    )


async def read_descriptors(js: JetStreamContext, kv: KeyValue) -> list[bytes]:
    """The current value of every key of the workers' bucket.

    The bucket's stream lists the subjects that hold a message now (the
    server drops a message whose TTL has passed), and each key's last value
    is read by its subject. A watcher's end of initial values cannot be
    relied on here: it counts the messages pending when it starts, and one
    whose TTL passes before it is delivered never comes, so the end would
    be a guess from a pause. A key purged or expired between the listing
    and its read is left out, as it would be a moment later.
    """
    prefix = f"$KV.{WORKERS_BUCKET}."
    info = await js.stream_info(f"KV_{WORKERS_BUCKET}", subjects_filter=f"{prefix}>")
    keys = [subject[len(prefix) :] for subject in sorted(info.state.subjects or {})]
    entries = await asyncio.gather(*(_value(kv, key) for key in keys))
    return [value for value in entries if value]


async def _value(kv: KeyValue, key: str) -> bytes | None:
    """The key's current value; None once it is purged, deleted or expired."""
    try:
        entry = await kv.get(key)
    except nats.js.errors.KeyNotFoundError:
        return None
    return entry.value


async def queue_backlog(js: JetStreamContext, queue: str) -> int:
    """How many of ``queue``'s messages wait to be delivered: its durable
    consumer's ``num_pending`` (messages of its subject past what the
    consumer delivered), or, before any consumer of it exists (or after the
    server deleted an idle one), every message its subject holds in the
    stream, since none of them was delivered."""
    stream, subject = stream_and_subject(queue)
    try:
        info = await js.consumer_info(stream, token(queue))
    except nats.js.errors.NotFoundError:
        state = await js.stream_info(stream, subjects_filter=subject)
        return int((state.state.subjects or {}).get(subject, 0))
    return int(info.num_pending or 0)
