"""Announcements through PostgreSQL: ``NOTIFY`` in the writing transaction,
``LISTEN`` on a connection of the watch's own.

A writer's `Announce` is a ``pg_notify`` in the transaction of its batch;
PostgreSQL delivers it to every listener when (and only if) that
transaction commits. The channel is named after the schema the tables are
in (``current_schema()``), so stores in other schemas of one database do not
hear each other.

The watch waits for its connection's socket on the Trio thread
(`trio.lowlevel.wait_readable`) and reads notifications with libpq's
non-blocking calls: no thread, nothing to poll. When the connection is lost
(the server restarted), it connects again with a growing delay, and then
says that announcements may have been missed (``deliver(None)``), so its
engine rescans due runs.
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from typing import Any, Final

import psycopg
import trio
from psycopg import sql

from .._base._exceptions import StoreError
from .._base._urls import scrub
from ._ops import Announce
from ._postgres_schema import connect
from ._watch import Deliver

logger = logging.getLogger("trio_durable")

CHANNEL: Final = "SELECT 'td_' || md5(current_schema())"
"""The channel of the store whose tables a connection's search path finds."""

_NOTIFY: Final = f"SELECT pg_notify(({CHANNEL}), %s)"
_PAYLOAD_LIMIT: Final = 7900
_RECONNECT_FIRST: Final = 0.05
_RECONNECT_MAX: Final = 5.0


def announcement_payload(op: Announce) -> str:
    """The ``NOTIFY`` payload of an `Announce`."""
    data = {"r": op.run_id, "k": op.kind, "w": op.workflow, "v": op.version, "o": op.origin}
    payload = json.dumps(data, separators=(",", ":"))
    if len(payload.encode()) > _PAYLOAD_LIMIT:
        # Past what NOTIFY carries: without the workflow, every engine
        # wakes the run, and those that lack it pass it on.
        data.update(w=None, v=None)
        payload = json.dumps(data, separators=(",", ":"))
    return payload


def write_announcement(cur: psycopg.Cursor[Any], op: Announce) -> None:
    """Apply an `Announce` (inside its batch's transaction)."""
    cur.execute(_NOTIFY, (announcement_payload(op),))


def _listen(conninfo: str, schema: str | None) -> psycopg.Connection[Any]:
    """A connection listening on the store's channel (in a worker thread)."""
    conn = connect(conninfo, schema)
    try:
        row = conn.execute(CHANNEL).fetchone()
        assert row is not None
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(row[0])))
    except BaseException:
        conn.close()
        raise
    return conn


def _read(conn: psycopg.Connection[Any], origin: str) -> list[Announce]:
    """The notifications that arrived, but the watch's own (on the Trio
    thread: libpq's calls here do not block).

    Raises:
      psycopg.OperationalError: The connection is lost.
    """
    pgconn = conn.pgconn
    pgconn.consume_input()
    found: list[Announce] = []
    while (notify := pgconn.notifies()) is not None:
        try:
            data = json.loads(notify.extra)
            announced = Announce(
                run_id=str(data["r"]),
                kind=data["k"],
                workflow=data["w"],
                version=data["v"],
                origin=str(data["o"]),
            )
        except (ValueError, KeyError, TypeError):
            # Not one of ours (someone else's NOTIFY on the channel): a
            # stray message must not stop the watch.
            logger.warning("ignored a notification that is no announcement: %r", notify.extra)
            continue
        if announced.origin != origin:
            found.append(announced)
    return found


async def watch_postgres(
    conninfo: str,
    schema: str | None,
    url: str,
    origin: str,
    deliver: Deliver,
    task_status: trio.TaskStatus[None],
) -> None:
    """`RunWatch.watch` of the PostgreSQL store at ``url`` (masked)."""
    started = False
    delay = _RECONNECT_FIRST
    while True:
        try:
            conn = await trio.to_thread.run_sync(_listen, conninfo, schema)
        except psycopg.Error as exc:
            reason = scrub(str(exc), conninfo)
            if not started:
                raise StoreError(f"cannot watch the PostgreSQL store at {url}: {reason}") from exc
            logger.warning(
                "cannot listen to the PostgreSQL store at %s (%s); retrying in %.2f s",
                url,
                reason,
                delay,
            )
            await trio.sleep(delay)
            delay = min(delay * 2, _RECONNECT_MAX)
            continue
        try:
            if started:
                logger.warning("listening to the PostgreSQL store at %s again", url)
                # Announcements committed while no connection listened are
                # lost: the engine rescans instead.
                deliver(None)
            else:
                task_status.started()
                started = True
            delay = _RECONNECT_FIRST
            while True:
                await trio.lowlevel.wait_readable(conn.pgconn.socket)
                found = _read(conn, origin)
                if found:
                    deliver(found)
        except psycopg.Error as exc:
            logger.warning(
                "lost the listening connection to the PostgreSQL store at %s: %s",
                url,
                scrub(str(exc), conninfo),
            )
        finally:
            with suppress(psycopg.Error):
                conn.close()
