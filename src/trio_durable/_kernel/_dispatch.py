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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._base._exceptions import StoreError
from .._base._records import Checkpoint, Mark, RunStatus
from .._base._run_records import RunRecord
from .._brokers._base import Broker, BrokerError, Outgoing, PayloadTooLarge, WorkerDescriptor
from .._stores._ops import ClaimCheckpoint, Op, UpdateRun
from .._stores._record_ops import ClaimRecord
from .._wire._payload import lowered, task_message
from ._builds import build_gap, build_queue
from ._decision_record import DECISION, decision_of
from ._learned import Learned, step_of
from ._sent import Key, sent_key

if TYPE_CHECKING:
    import random

    from .._base._clock import Clock
    from .._stores._base import Store
    from .._wire._layers import WireLayers
    from .._wire._messages import Task
    from ._carrier import Carrier
    from ._definitions import Registry, Step
    from ._sent import SentTasks

logger = logging.getLogger("trio_durable")

DISPATCH_CHUNK: Final = 1000
"""Tasks sent in one call to the broker at most."""

QUICK_TRIES: Final = 4
"""Tries of one send, a short jittered wait apart (50 ms, doubling), before
its tasks become retries due later (`Dispatcher.defer`)."""

QUICK_SPAN: Final = 1.0
"""Seconds after its first try that a send is tried again at once, at most:
an adapter that waited for its connection that long before it failed has
waited enough (the retry due later takes over)."""

BROKER_RETRY_FIRST: Final = 1.0
"""Seconds until a send the broker refused is tried again, at the least;
later in an outage, as long as it has lasted (so the retries of one step
come about twice as far apart each time)."""

BROKER_RETRY_CAP: Final = 30.0
"""Seconds until a send the broker refused is tried again, at the most."""

_SUSPENDED: Final[frozenset[RunStatus]] = frozenset({"suspended"})


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


def broker_queue(route: str, requires: Sequence[str], build: str | None = None) -> str:
    """The broker queue a step's tasks travel on: its group route (its
    build's queue of it, for a run on a build: see `_builds`), or for a
    step that requires capabilities, that queue's queue for exactly those,
    which only workers offering them consume. (The engine's check that a
    capable worker is live does not keep a worker of the group without
    them from taking the task off a queue they share.)"""
    route = build_queue(route, build)
    if not requires:
        return route
    return f"{route}~{'~'.join(sorted(set(requires)))}"


def served_broker_queues(
    app: Registry, routes: Sequence[str], capabilities: Sequence[str], build: str | None = None
) -> tuple[str, ...]:
    """The broker queues a worker consumes: each group route, and each
    route's queue for the requirements of its steps that the worker's
    capabilities cover; with ``build``, each of these queues of the build
    too."""
    offered = set(capabilities)
    queues: list[str] = []
    for route in routes:
        group = split_group_route(route)[0]
        needs = [
            step.requires
            for step in app.steps
            if step.group == group and step.requires and offered >= set(step.requires)
        ]
        for of_build in (None, build) if build is not None else (None,):
            for queue in (
                broker_queue(route, (), of_build),
                *(broker_queue(route, requires, of_build) for requires in needs),
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
      layers: What tasks pass through before they are sent (tracing,
        large payloads), and the seal of the messages that carry them and
        of the failure that stands in for one too large (see `_wire_layers`).
      store: Where the sends the broker refused are made retries.
      carrier: How the checkpoints of the tasks sent name the broker.
    """

    def __init__(
        self,
        app: Registry,
        broker: Broker,
        clock: Clock,
        rng: random.Random,
        sent: SentTasks,
        results_queue: str,
        blocked_recheck: float,
        layers: WireLayers,
        *,
        store: Store,
        carrier: Carrier,
    ) -> None:
        self._app = app
        self._store = store
        self.carrier = carrier
        # When the broker first refused a send since one last went through
        # (Trio time): the retries back off as the outage lasts, however
        # many runs' sends it refuses meanwhile.
        self._away_since: float | None = None
        # Wakes a run whose sends were refused (the scheduler's, once made).
        self.wake: Callable[[str], None] = lambda run_id: None
        self._broker = broker
        self._clock = clock
        self._rng = rng
        self._sent = sent
        self._results_queue = results_queue
        self._blocked_recheck = blocked_recheck
        self._layers = layers
        # What `live_workers` last read, per group route (None: every worker).
        self._descriptor_cache: dict[str | None, tuple[float, list[WorkerDescriptor]]] = {}
        # The broker queues the embedded worker consumes: tasks sent there
        # are this engine's own to wait for (see `_sent`).
        self.own_queues: frozenset[str] = frozenset()
        # The steps remote workflows' decisions named (the runtime's).
        self.learned = Learned()

    async def send(self, tasks: list[Task]) -> None:
        """Send tasks whose pending checkpoints just committed. A task over
        the broker's ``max_payload`` is not sent: a failure of code
        ``payload_too_large`` goes to the results queue in its place, and
        settles its step like a worker's result would (see `_payload`).

        A send the broker still refuses after a few quick tries is not given
        up: the tasks' checkpoints become retries of that send, due after a
        backoff (see `defer`), and their runs' next turns send them again.
        """
        tasks, refused, reason = await self._layers.outgoing(tasks)
        away = False
        for start in range(0, len(tasks), DISPATCH_CHUNK):
            chunk = tasks[start : start + DISPATCH_CHUNK]
            if away:
                # The broker refused the chunk before: the rest waits with it.
                refused.extend(chunk)
                continue
            failure = await self._dispatch_chunk(chunk)
            if failure is not None:
                refused.extend(chunk)
                reason, away = failure, True
        if refused:
            await self.defer(refused, reason)

    async def _dispatch_chunk(self, chunk: list[Task]) -> str | None:
        """Send one chunk, trying again a few times at short intervals
        (within `QUICK_SPAN`); None once sent, else why the broker refused
        it."""
        limit = self._broker.max_payload
        outgoing, own = self._messages(chunk, limit)
        delay = 0.05
        failure = ""
        first = trio.current_time()
        for attempt in range(QUICK_TRIES):
            try:
                await self._broker.dispatch(outgoing)
                self._away_since = None
                return None
            except PayloadTooLarge as exc:
                # The broker's limit fell below what it said (it reconnected
                # to another server): fit the chunk to it and send again.
                limit = lowered(limit, exc)
                self._unsend(own)
                outgoing, own = self._messages(chunk, limit)
                failure = str(exc)
            except BrokerError as exc:
                failure = str(exc)
                if attempt == QUICK_TRIES - 1 or trio.current_time() - first > QUICK_SPAN:
                    break
                logger.warning("dispatch failed (%s); retrying", exc)
                await trio.sleep(delay * self._rng.uniform(0.5, 1.5))
                delay *= 2
        self._unsend(own)
        return failure

    async def defer(self, tasks: list[Task], reason: str) -> None:
        """Make the sends of ``tasks`` that the broker refused retries of
        those sends: each checkpoint still pending at the task's attempt is
        claimed as waiting for the broker (mark `BROKER_WAIT`, ``started_at``
        cleared), due after a backoff as long as the broker has been
        refusing sends so far, from `BROKER_RETRY_FIRST` up to
        `BROKER_RETRY_CAP` seconds, so that its run's next turn (on any
        engine) sends it again, whatever ``remote_redispatch`` says. The
        same write makes each run due now, and this engine wakes it: that
        turn suspends it until the retry."""
        moment = trio.current_time()
        if self._away_since is None:
            self._away_since = moment
        backoff = min(BROKER_RETRY_CAP, max(BROKER_RETRY_FIRST, moment - self._away_since))
        now = self._clock.now()
        due = now + backoff * self._rng.uniform(0.75, 1.0)
        mark = self.carrier.waiting(reason)
        logger.error(
            "could not dispatch %d tasks (%s); sending them again in %.1f s",
            len(tasks),
            reason,
            due - now,
        )
        by_run: dict[str, dict[Key, int]] = {}
        for task in tasks:
            by_run.setdefault(task.run_id, {})[sent_key(task)] = task.attempt
        for run_id, attempts in by_run.items():
            try:
                ops = await self._deferrals(run_id, attempts, due, mark)
                if ops:
                    ops.append(
                        UpdateRun(run_id, {"wake_at": now}, expect_status=_SUSPENDED, strict=False)
                    )
                    await self._store.apply(ops)
                    self.wake(run_id)
            except StoreError as exc:
                # The store is away too: the steps stay out as it says, and
                # a turn of their run now meets the store's outage first.
                logger.error("could not defer the sends of run %r: %s", run_id, exc)
                self.wake(run_id)

    async def _deferrals(
        self, run_id: str, attempts: dict[Key, int], due: float, mark: Mark
    ) -> list[Op]:
        """The claims that defer the sends of ``run_id``'s attempts (by
        key): those of its steps, or of its decision task, still out at
        the attempt sent."""
        seqs = sorted(key for key in attempts if isinstance(key, int))
        found: list[Checkpoint | RunRecord] = []
        if seqs:
            found.extend(await read_seqs(self._store, run_id, seqs))
        if DECISION in attempts:
            records = {record.kind: record for record in await self._store.get_records(run_id)}
            decision = decision_of(records)
            if decision is not None:
                found.append(decision)
        ops: list[Op] = []
        for cp in found:
            key = cp.seq if isinstance(cp, Checkpoint) else DECISION
            if cp.status != "pending" or cp.started_at is None or attempts.get(key) != cp.attempts:
                continue
            deferred = attrs.evolve(cp, started_at=None, wake_at=due, mark=mark)
            if isinstance(deferred, Checkpoint):
                ops.append(ClaimCheckpoint(deferred, attempt=cp.attempts))
            else:
                ops.append(ClaimRecord(deferred, attempt=cp.attempts))
        return ops

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
                    task.route,
                    () if task.kind == "decision" else self._requires(task.step),
                    task.build,
                ),
                limit,
                now,
                self._layers.signing,
            )
            if message is None:
                continue
            messages.append(message)
            if message.queue in self.own_queues or message.queue == self._results_queue:
                self._sent.add(task.run_id, sent_key(task), task.attempt)
                own.append(task)
        return messages, own

    def _unsend(self, tasks: list[Task]) -> None:
        """Stop counting tasks whose send did not happen."""
        for task in tasks:
            self._sent.unsent(task.run_id, sent_key(task), task.attempt)

    def _requires(self, step_name: str) -> tuple[str, ...]:
        step = step_of(self._app, self.learned, step_name)
        return () if step is None else step.requires

    async def live_workers(self, group_route: str | None = None) -> list[WorkerDescriptor]:
        """The live workers' descriptors (those consuming ``group_route``,
        if given), as the broker gave them at most
        ``min(1, blocked_recheck / 2)`` seconds ago: a burst of looks costs
        one read of the announcements per route and period.

        Raises:
          BrokerError: The announcements could not be read.
        """
        now = trio.current_time()
        cached = self._descriptor_cache.get(group_route)
        if cached is None or now - cached[0] >= min(1.0, self._blocked_recheck / 2):
            descriptors = await self._broker.worker_descriptors(group_route)
            cached = self._descriptor_cache[group_route] = (now, descriptors)
        return cached[1]

    async def capability_gap(
        self, group_route: str, requires: tuple[str, ...], build: str | None = None
    ) -> str | None:
        """Why no live worker of ``group_route`` (of ``build``, if given)
        can run a step that ``requires`` these capabilities, or None if one
        can (or nothing is required, nor a build)."""
        if not requires and build is None:
            return None
        try:
            descriptors = await self.live_workers(group_route)
        except BrokerError as exc:
            return f"cannot read worker announcements: {exc}"
        gap = build_gap(descriptors, group_route, build)
        if gap is not None or not requires:
            return gap
        needed = set(requires)
        if any(needed <= set(d.capabilities) for d in descriptors if build in (None, d.build_id)):
            return None
        needs = ", ".join(sorted(needed))
        of_build = "" if build is None else f" of build {build!r}"
        return f"blocked: no live worker{of_build} of group {group_route!r} offers {needs}"


async def read_seqs(store: Store, run_id: str, seqs: list[int]) -> list[Checkpoint]:
    """The checkpoints of ``run_id`` at ``seqs`` (sorted), read a range of
    neighbours at a time (a fan's members in one read, a decision apart)."""
    found: list[Checkpoint] = []
    wanted = set(seqs)
    first = last = seqs[0]
    for seq in [*seqs[1:], None]:
        if seq is not None and seq - last <= DISPATCH_CHUNK:
            last = seq
            continue
        found.extend(
            cp for cp in await store.get_checkpoints(run_id, first, last) if cp.seq in wanted
        )
        if seq is not None:
            first = last = seq
    return found
