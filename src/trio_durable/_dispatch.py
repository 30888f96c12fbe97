"""Dispatch: the broker queues tasks travel on, whether a live worker can
run a step, and sending the tasks a turn committed.

A remote step's tasks travel on its group route, ``<group>`` or
``<group>@<namespace>`` outside the default namespace. A step that
``requires`` capabilities has a queue of its own per route, which only the
workers offering them consume. Before sending such a step, a turn asks
whether a live worker offers them (the capability gap); if none does, the
step is parked instead of sent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from ._blob_wire import offload_tasks
from ._brokers._base import Broker, BrokerError, Outgoing, PayloadTooLarge, WorkerDescriptor
from ._learned import Learned, step_of
from ._payload import lowered, task_message
from ._records import DEFAULT_NAMESPACE
from ._tracing import DISABLED, Tracing

if TYPE_CHECKING:
    import random

    from ._app import App, Step
    from ._blobs import Blobs
    from ._clock import Clock
    from ._keyring import Keyring
    from ._sent import SentTasks
    from ._wire import Task

logger = logging.getLogger("trio_durable")

DISPATCH_CHUNK: Final = 1000
"""Tasks sent in one call to the broker at most."""


def group_route(step: Step[..., Any], namespace: str) -> str:
    """The group route a step's tasks travel on: its group, with the run's
    namespace as a suffix outside the default namespace."""
    assert step.group is not None
    return step.group if namespace == "default" else f"{step.group}@{namespace}"


def split_group_route(route: str) -> tuple[str, str | None]:
    """``"<group>@<namespace>"`` as ``(group, namespace)``; the namespace is
    None for a plain group."""
    group, _, namespace = route.partition("@")
    return group, namespace or None


def broker_queue(route: str, requires: Sequence[str]) -> str:
    """The broker queue a step's tasks travel on: its group route, or for a
    step that requires capabilities, the route's queue for exactly those, which
    only workers offering them consume. (The engine's check that a capable
    worker is live does not keep a worker of the group without them from
    taking the task off a queue they share.)"""
    if not requires:
        return route
    return f"{route}~{'~'.join(sorted(set(requires)))}"


def served_broker_queues(
    app: App, routes: Sequence[str], capabilities: Sequence[str]
) -> tuple[str, ...]:
    """The broker queues a worker consumes: each group route, and each
    route's queue for the requirements of its steps that the worker's
    capabilities cover."""
    offered = set(capabilities)
    queues: list[str] = []
    for route in routes:
        group = split_group_route(route)[0]
        for queue in (
            route,
            *(
                broker_queue(route, step.requires)
                for step in app.steps
                if step.group == group and step.requires and offered >= set(step.requires)
            ),
        ):
            if queue not in queues:
                queues.append(queue)
    return tuple(queues)


@final
class Dispatcher:
    """Sends an engine's tasks, and tells whether a worker can take them.

    Args:
      app: The application (for the capabilities a step requires).
      broker: Where tasks go.
      clock: Stamps the failures that stand in for tasks too large to send.
      rng: Jitters the backoff between refused sends.
      sent: Counts the tasks whose results this engine settles itself.
      results_queue: Where results (and stand-in failures) come back.
      blocked_recheck: Seconds between checks of a parked step; worker
        announcements are read again at least twice as often.
      tracing: Opens a dispatch span per task sent, whose trace context
        the task carries (see `_tracing`).
      signing: Signs every task sent, and the failure that stands in for
        one too large (see `_signing`).
    """

    def __init__(
        self,
        app: App,
        broker: Broker,
        clock: Clock,
        rng: random.Random,
        sent: SentTasks,
        results_queue: str,
        blocked_recheck: float,
        tracing: Tracing = DISABLED,
        signing: Keyring | None = None,
    ) -> None:
        self._app = app
        self._broker = broker
        self._clock = clock
        self._rng = rng
        self._sent = sent
        self._results_queue = results_queue
        self._blocked_recheck = blocked_recheck
        self._tracing = tracing
        self._signing = signing
        self._descriptor_cache: dict[str, tuple[float, list[WorkerDescriptor]]] = {}
        # The broker queues the embedded worker consumes: tasks sent there
        # are this engine's own to wait for (see `_sent`).
        self.own_queues: frozenset[str] = frozenset()
        # The steps remote workflows' decisions named (the runtime's).
        self.learned = Learned()
        # Where inputs over the threshold go (docs/large-payloads.md).
        self.blobs: Blobs | None = None

    async def send(self, tasks: list[Task]) -> None:
        """Send tasks whose pending checkpoints just committed. A task over
        the broker's ``max_payload`` is not sent: a failure of code
        ``payload_too_large`` goes to the results queue in its place, and
        settles its step like a worker's result would (see `_payload`)."""
        if self._tracing.enabled:
            tasks = [
                self._tracing.dispatched(
                    task, split_group_route(task.route)[1] or DEFAULT_NAMESPACE
                )
                for task in tasks
            ]
        if self.blobs is not None:
            tasks = await offload_tasks(self.blobs, tasks)
        for start in range(0, len(tasks), DISPATCH_CHUNK):
            chunk = tasks[start : start + DISPATCH_CHUNK]
            limit = self._broker.max_payload
            outgoing, own = self._messages(chunk, limit)
            delay = 0.05
            for attempt in range(8):
                try:
                    await self._broker.dispatch(outgoing)
                    break
                except PayloadTooLarge as exc:
                    # The broker's limit fell below what it said (it reconnected
                    # to another server): fit the chunk to it and send again.
                    limit = lowered(limit, exc)
                    self._unsend(own)
                    outgoing, own = self._messages(chunk, limit)
                except BrokerError as exc:
                    if attempt == 7:
                        # The checkpoints stay pending; remote_redispatch (if
                        # enabled) sends them again when they count as lost.
                        logger.error("could not dispatch %d tasks: %s", len(chunk), exc)
                        self._unsend(own)
                        break
                    logger.warning("dispatch failed (%s); retrying", exc)
                    await trio.sleep(delay * self._rng.uniform(0.5, 1.5))
                    delay = min(delay * 2, 5.0)
            else:
                logger.error(
                    "could not dispatch %d tasks: the broker kept refusing their size", len(chunk)
                )
                self._unsend(own)

    def _messages(
        self, tasks: Sequence[Task], limit: int | None
    ) -> tuple[list[Outgoing], list[Task]]:
        """The messages that send ``tasks`` (each task, or the failure that
        stands in for one over ``limit`` bytes), and the tasks among them
        whose results this engine settles itself: those its own worker takes,
        and those whose stand-in goes to its results queue. These are counted
        as sent before the send, since a result may be settled before the
        send returns."""
        now = self._clock.now()
        messages: list[Outgoing] = []
        own: list[Task] = []
        for task in tasks:
            if task.reply_to != self._results_queue:
                task = attrs.evolve(task, reply_to=self._results_queue)
            message = task_message(
                task,
                broker_queue(
                    task.route, () if task.kind == "decision" else self._requires(task.step)
                ),
                limit,
                now,
                self._signing,
            )
            if message is None:
                continue
            messages.append(message)
            if message.queue in self.own_queues or message.queue == self._results_queue:
                self._sent.add(task.run_id, task.seq, task.attempt)
                own.append(task)
        return messages, own

    def _unsend(self, tasks: list[Task]) -> None:
        """Stop counting tasks whose send did not happen."""
        for task in tasks:
            self._sent.unsent(task.run_id, task.seq, task.attempt)

    def _requires(self, step_name: str) -> tuple[str, ...]:
        step = step_of(self._app, self.learned, step_name)
        return () if step is None else step.requires

    async def capability_gap(self, group_route: str, requires: tuple[str, ...]) -> str | None:
        """Why no live worker of ``group_route`` can run a step that ``requires``
        these capabilities, or None if one can (or nothing is required)."""
        if not requires:
            return None
        now = trio.current_time()
        cached = self._descriptor_cache.get(group_route)
        if cached is None or now - cached[0] >= min(1.0, self._blocked_recheck / 2):
            try:
                descriptors = await self._broker.worker_descriptors(group_route)
            except BrokerError as exc:
                return f"cannot read worker announcements: {exc}"
            cached = self._descriptor_cache[group_route] = (now, descriptors)
        needed = set(requires)
        if any(needed <= set(d.capabilities) for d in cached[1]):
            return None
        needs = ", ".join(sorted(needed))
        return f"blocked: no live worker of group {group_route!r} offers {needs}"
