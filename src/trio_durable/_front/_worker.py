"""The worker: runs remote steps for the groups it serves.

For each group route it consumes tasks with a prefetch of ``concurrency``
(a step that requires capabilities has a queue of its own per route, which
only workers offering them consume: see `broker_queue`),
runs each task's step once (retries are the engine's: it dispatches a new
attempt when a result says the step may be retried), and hands the result to
its `ResultPublisher`, which acks each task only after its result was
published. The decision and query tasks of remote workflows go to its
`RemoteTurns` (`_remote_turns`). A heartbeat re-announces the worker's
descriptor well within its time to live.
"""

from __future__ import annotations

import logging
import math
import random
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from .._base import _serde
from .._base._clock import Clock
from .._base._current import StepInfo, call_step
from .._base._exceptions import FatalError, SerializationError
from .._base._failures import error_info, logged_traceback
from .._base._keyring import Keyring
from .._base._observe import Metrics
from .._base._records import DEFAULT_NAMESPACE, DEFAULT_TRACEBACK_LIMIT
from .._brokers._base import (
    Broker,
    BrokerError,
    Consumer,
    Delivery,
    WorkerDescriptor,
    needs_heartbeat,
)
from .._kernel._decider import EagerSteps
from .._kernel._dispatch import served_broker_queues, split_group_route
from .._kernel._options import DEFAULT_MAX_DELIVERIES
from .._payloads._blobs import Blobs
from .._wire._blob_wire import offload_result, resolve_task_input
from .._wire._messages import Result, Task, WireError
from .._wire._signing import SignatureRejected, count_rejection, open_signed
from .._wire._tracing import DISABLED, Tracing, attributes
from ._app import App, Step
from ._descriptor import LoadMeter, describe
from ._health import Readiness
from ._remote_turns import RemoteTurns
from ._result_publisher import Outcome, ResultPublisher

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("trio_durable")


@final
@attrs.define(kw_only=True)
class WorkerStatistics:
    """Counters a worker keeps.

    Attributes:
      received: Tasks received (redeliveries included).
      completed: Tasks whose step returned.
      failed: Tasks whose step raised.
      rejected: Task messages rejected because they did not decode into a
        valid, in-range task (see docs/brokers.md); each was dropped, or
        dead-lettered where the broker keeps a dead-letter queue.
      poisoned: Tasks delivered more than ``max_deliveries`` times, failed
        with code ``poison`` without running (see `open_worker`).
      in_flight: Tasks received and not yet acked.
      rejected_unsigned, rejected_forged, rejected_unknown_key: With
        ``signing=``, task messages rejected (never run) because they were
        unsigned, their signature did not match, or their key id is not in
        the ring (see docs/message-signing.md).
    """

    received: int = 0
    completed: int = 0
    failed: int = 0
    rejected: int = 0
    poisoned: int = 0
    in_flight: int = 0
    rejected_unsigned: int = 0
    rejected_forged: int = 0
    rejected_unknown_key: int = 0


@final
class Worker:
    """Runs remote steps; made by `open_worker`.

    Attributes:
      instance_id: This worker's id, as announced.
      routes: The group routes it serves.
      queues: The broker queues it consumes (see `served_broker_queues`).
      heartbeats: Whether it re-announces itself every ``heartbeat``
        seconds (the broker's `Broker.needs_heartbeat`), or announced
        itself until it withdraws.
      http_url: Where it serves ``/healthz``, ``/readyz`` and ``/metrics``
        (``open_worker(http=...)``), or None.
      counts_steps: Whether it counts the step attempts it runs in its own
        metrics (``trio_durable_steps_total``); not an engine's embedded
        worker, whose engine counts them from their events.
      readiness: What its ``/readyz`` answers from; set its ``draining``
        to answer 503 before the worker leaves (the ``worker`` command
        does at the first signal).
    """

    def __init__(
        self,
        app: App,
        broker: Broker,
        *,
        instance_id: str,
        routes: tuple[str, ...],
        concurrency: int,
        capabilities: tuple[str, ...],
        clock: Clock,
        heartbeat: float,
        ttl: float,
        rng: random.Random,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
        traceback_limit: int = DEFAULT_TRACEBACK_LIMIT,
        tracing: Tracing = DISABLED,
        signing: Keyring | None = None,
        build_id: str | None = None,
    ) -> None:
        self.app = app
        # Its build: by default, its registration hash (see `_builds`).
        self.build_id = app.registration_hash() if build_id is None else build_id
        self._signing = signing
        self._tracing = tracing
        self._traceback_limit = traceback_limit
        self._metrics = Metrics()
        # What its `/readyz` answers (`open_worker(http=...)`): a round trip
        # to the broker.
        self.readiness = Readiness(self.announce)
        # The URL of its health, readiness and metrics, when served.
        self.http_url: str | None = None
        # The step attempts it ran (`_count_step`): in its own registry only.
        self._step_metrics = Metrics()
        self.counts_steps = True
        self._registry: CollectorRegistry | None = None
        self._max_deliveries = max_deliveries
        self.broker = broker
        self.instance_id = instance_id
        self.routes = routes
        self.queues = served_broker_queues(app, routes, capabilities, self.build_id)
        self._concurrency = concurrency
        self._limiter = trio.CapacityLimiter(concurrency)
        self._capabilities = capabilities
        self._clock = clock
        self._heartbeat = heartbeat
        self._ttl = ttl
        # Where outputs over the threshold go (set by `open_worker`).
        self.blobs: Blobs | None = None
        self._stats = WorkerStatistics()
        self._results = ResultPublisher(
            broker,
            signing=signing,
            rng=rng,
            worker_id=instance_id,
            settled=lambda n: self._track(-n),
        )
        self._idle = trio.Event()
        self._idle.set()
        self._crashed = False
        self._stopping = False
        self._announcing = trio.Lock()
        # Whether announcements lapse without heartbeats.
        self.heartbeats = needs_heartbeat(broker)
        # What it last announced.
        self._announced: WorkerDescriptor | None = None
        self._load = LoadMeter(clock.now())
        self._turns = RemoteTurns(
            app=app,
            clock=clock,
            rng=rng,
            worker_id=instance_id,
            traceback_limit=traceback_limit,
            tracing=tracing,
            eager=EagerSteps(
                routes=frozenset(routes),
                capabilities=frozenset(capabilities),
                execute=self._execute,
            ),
            span=self._span,
        )

    def statistics(self) -> WorkerStatistics:
        """A snapshot of this worker's counters."""
        return attrs.evolve(self._stats)

    def metrics(self) -> str:
        """This worker's metrics in the Prometheus text exposition format
        (0.0.4), listed in docs/operations.md."""
        from ._prometheus import render

        return render(self.metrics_registry)

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """This worker's own prometheus-client ``CollectorRegistry`` (never
        the process-wide default one), to mount in an exporter. Made on
        first use."""
        if self._registry is None:
            from ._prometheus import metrics_registry

            self._registry = metrics_registry(lambda: [self._metrics, self._step_metrics])
        return self._registry

    @property
    def busy(self) -> bool:
        """Whether a task is received and not yet acked."""
        return self._stats.in_flight > 0

    async def wait_idle(self) -> None:
        """Wait until no task is in flight."""
        await self._idle.wait()

    def _track(self, delta: int) -> None:
        self._stats.in_flight += delta
        if self._stats.in_flight == 0:
            self._idle.set()
        elif self._idle.is_set():
            self._idle = trio.Event()

    def descriptor(self) -> WorkerDescriptor:
        """What this worker announces: with its load where heartbeats
        refresh the announcement (a held one would show it stale)."""
        now, stats = self._clock.now(), self._stats
        return describe(
            self.app,
            self.instance_id,
            self.routes,
            self._capabilities,
            now,
            held=not self.heartbeats,
            load=self._load.read(now, stats.in_flight, stats.completed, stats.failed)
            if self.heartbeats
            else None,
            build_id=self.build_id,
        )

    async def announce(self) -> None:
        """Announce what this worker serves: with its time to live where
        the broker needs heartbeats, else until withdrawn.

        Raises:
          BrokerError: The broker refused it.
        """
        descriptor = self.descriptor()
        await self.broker.announce(descriptor, self._ttl if self.heartbeats else math.inf)
        self._announced = descriptor

    async def heartbeat(self) -> None:
        """Announce again every ``heartbeat`` seconds (where the broker
        needs heartbeats: see `open_worker`)."""
        while True:
            await trio.sleep(self._heartbeat)
            await self._announce_again()

    def _registrations_changed(self) -> bool:
        """Whether what this worker holds announced (no heartbeat) is of
        other registrations than its app has now: one made after it
        opened. Cheap: the app's hash is computed once per set of
        registrations."""
        announced = self._announced
        return (
            not self.heartbeats
            and announced is not None
            and announced.registration_hash != self.app.registration_hash()
        )

    async def _announce_again(self) -> None:
        """Announce again, unless this worker is leaving, or its
        announcement is held and nothing it announces changed."""
        async with self._announcing:
            if self._stopping or (not self.heartbeats and not self._registrations_changed()):
                return
            try:
                await self.announce()
            except BrokerError as exc:
                logger.warning("worker %s could not announce itself: %s", self.instance_id, exc)

    async def _withdraw(self) -> None:
        # A heartbeat due at the moment the worker leaves would otherwise
        # announce it again after the withdraw, leaving a ghost for a whole
        # ttl: one in flight finishes first, and none starts after.
        self._stopping = True
        async with self._announcing:
            await self.broker.withdraw(self.instance_id)

    async def _lapse(self) -> None:
        """Leave a crashed worker's announcement to lapse, as a killed
        process's does: where it was held until withdrawn, it now lapses
        ``ttl`` seconds from now (the last heartbeat such a process sent)."""
        self._stopping = True
        async with self._announcing:
            if self.heartbeats or self._announced is None:
                return
            lapsing = attrs.evolve(self._announced, announced_at=self._clock.now(), held=False)
            await self.broker.announce(lapsing, self._ttl)

    async def _consume(self, queue: str, task_status: trio.TaskStatus[None]) -> None:
        async with (
            self.broker.open_consumer(queue, prefetch=self._concurrency) as consumer,
            trio.open_nursery() as nursery,
        ):
            task_status.started()
            while True:
                deliveries = await consumer.receive(self._concurrency)
                if self._registrations_changed():
                    # Held with no heartbeat: what the app registered since
                    # it opened is announced as tasks come, not on a timer.
                    nursery.start_soon(self._announce_again)
                self._stats.received += len(deliveries)
                self._track(len(deliveries))
                for delivery in deliveries:
                    nursery.start_soon(self._run_task, consumer, delivery)

    async def _run_task(self, consumer: Consumer, delivery: Delivery) -> None:
        try:
            # Checked before decoding: a task not signed by our ring never runs.
            task = Task.decode(open_signed(self._signing, "task", delivery.body))
        except (WireError, SignatureRejected) as exc:
            # A task nobody can read would loop forever if requeued: reject
            # it for good (dead-lettered where the broker keeps them).
            logger.error(
                "worker %s rejected a message of %d bytes that is no valid task: %s",
                self.instance_id,
                len(delivery.body),
                exc,
            )
            count_rejection(self._stats, self._metrics, "task", exc)
            try:
                await consumer.reject([delivery], requeue=False)
            except (BrokerError, trio.ClosedResourceError) as reject_exc:
                # It comes back, and is rejected again.
                logger.warning("worker %s could not reject it: %s", self.instance_id, reject_exc)
            finally:
                self._track(-1)
            return
        if delivery.deliveries > self._max_deliveries:
            # Each delivery so far ended without a result (the worker that
            # took it died, or its ack never reached the broker): running it
            # again would likely kill this worker too. Fail the step for good
            # and dead-letter the message instead of looping forever.
            self._stats.poisoned += 1
            logger.error(
                "task %s/%d (step %r) was delivered %d times; failing it as poison",
                task.run_id,
                task.seq,
                task.step,
                delivery.deliveries,
            )
            now = self._clock.now()
            result = Result(
                run_id=task.run_id,
                seq=task.seq,
                attempt=task.attempt,
                step=task.step,
                workflow=task.workflow,
                status="failed",
                error=(
                    f"the task was delivered {delivery.deliveries} times without a result"
                    f" (more than max_deliveries={self._max_deliveries}); not run again"
                ),
                code="poison",
                details={"deliveries": delivery.deliveries},
                retryable=False,
                started_at=now,
                finished_at=now,
                worker=self.instance_id,
                queue=task.queue,
                execution=task.execution,
            )
            self._results.send_nowait(Outcome(consumer, delivery, result, task.reply_to, True))
            return
        async with self._limiter:
            executed = await self._execute(task, redelivered=delivery.deliveries > 1)
            result = await offload_result(self.blobs, executed)
        self._results.send_nowait(Outcome(consumer, delivery, result, task.reply_to, False))

    async def _execute(self, task: Task, *, redelivered: bool = False) -> Result:
        started_at = self._clock.now()
        step = self.app.get_step(task.step)

        def result(status: Literal["completed", "failed"], **fields: Any) -> Result:
            return Result(
                run_id=task.run_id,
                seq=task.seq,
                attempt=task.attempt,
                step=task.step,
                workflow=task.workflow,
                status=status,
                started_at=started_at,
                finished_at=self._clock.now(),
                worker=self.instance_id,
                queue=task.queue,
                kind=task.kind,
                # Echoed: the engine settles the step only with a result
                # of an execution its checkpoint holds.
                execution=task.execution,
                **fields,
            )

        if task.kind == "decision":
            decided = await self._turns.decide(
                task, result, blobs=self.blobs, redelivered=redelivered
            )
            # Counted as a step's attempt is (a query is counted as neither).
            if decided.status == "completed":
                self._stats.completed += 1
            else:
                self._stats.failed += 1
            return decided
        if task.kind == "query":
            return await self._turns.answer_query(task, result, blobs=self.blobs)
        if step is None or not step.remote:
            self._stats.failed += 1
            return result(
                "failed",
                error=f"this worker has no remote step {task.step!r}",
                code="unknown_step",
                retryable=False,
            )
        self._count_step(task, "started")
        try:
            with self._span(f"execute {step.name}", task):
                value = await self._call(step, task)
                output = _serde.dumps(value)
        except Exception as exc:
            self._stats.failed += 1
            self._count_step(task, "failed", self._clock.now() - started_at)
            info = error_info(exc, step=step.name, traceback_limit=self._traceback_limit)
            code = info.code
            if isinstance(exc, TimeoutError) and code is None:
                code = "timeout"
            retryable = not isinstance(exc, FatalError | SerializationError) and (
                getattr(exc, "retryable", True) is not False
            )
            logger.warning(
                "step %r of run %r failed on worker %s (attempt %d%s): %s%s",
                step.name,
                task.run_id,
                self.instance_id,
                task.attempt,
                "" if retryable else ", not retryable",
                info.message,
                # The traceback travels in the result, to the history; the
                # log shows it (folded) only when asked for everything.
                logged_traceback(logger, exc),
                extra={"run_id": task.run_id, "workflow": task.workflow, "step": step.name},
            )
            return result(
                "failed",
                error=info.message,
                code=code,
                details=info.details,
                retryable=retryable,
                error_type=info.type,
                traceback=info.traceback,
            )
        self._stats.completed += 1
        self._count_step(task, "completed", self._clock.now() - started_at)
        return result("completed", output=output)

    def _count_step(self, task: Task, what: str, duration: float | None = None) -> None:
        """Count a step attempt this worker ran in its own metrics (a
        worker process's ``/metrics``; an engine counts its embedded
        worker's steps from its events instead)."""
        if self.counts_steps:
            self._step_metrics.count_step(task.step, what, duration)

    def _span(self, name: str, task: Task) -> AbstractContextManager[None]:
        """The span around a task this worker handles, a child of the trace
        the task carries."""
        return self._tracing.span(
            name,
            attributes(
                run_id=task.run_id,
                workflow=task.workflow,
                step=task.step,
                seq=task.seq,
                attempt=task.attempt,
                namespace=split_group_route(task.route)[1] or DEFAULT_NAMESPACE,
                worker=self.instance_id,
            ),
            parent=_trace_context(task),
            consumer=True,
        )

    @staticmethod
    def _step_info(task: Task) -> StepInfo:
        return StepInfo(
            run_id=task.run_id,
            workflow=task.workflow,
            namespace=split_group_route(task.route)[1] or DEFAULT_NAMESPACE,
            step=task.step,
            seq=task.seq,
            attempt=task.attempt,
        )

    async def _call(self, step: Step[..., Any], task: Task) -> Any:
        args = _serde.load_args(await resolve_task_input(self.blobs, task.input), step.fn)
        timeout = task.timeout if task.timeout is not None else step.timeout
        with trio.CancelScope() as scope:
            if timeout is not None:
                scope.deadline = trio.current_time() + timeout
            return await call_step(self._step_info(task), step.fn, args)
        raise TimeoutError(f"step {step.name!r} timed out after {timeout} s")

    async def _publish_forever(self) -> None:
        """Publish results and settle their tasks (see `ResultPublisher`)."""
        await self._results.publish_forever()


def _trace_context(task: Task) -> dict[str, str] | None:
    """The W3C trace context ``task`` carries, as a propagator reads it."""
    if task.traceparent is None:
        return None
    if task.tracestate is None:
        return {"traceparent": task.traceparent}
    return {"traceparent": task.traceparent, "tracestate": task.tracestate}


def crash(worker: Worker) -> None:
    """Make leaving ``worker``'s `open_worker` block act as a killed process
    would: its announcement is left to expire (for `trio_durable.testing`)."""
    worker._crashed = True


def worker_metrics(worker: Worker) -> Metrics:
    """The counters of ``worker`` (an engine adds its embedded worker's
    to its own)."""
    return worker._metrics
