"""Registration: the `App`, its workflows and steps, and retry policies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    TypeVar,
    final,
    overload,
)

from .._base._controls import Collect, RateLimit, run_controls
from .._base._exceptions import (
    RegistrationError,
    ScheduleError,
    UnknownEntityError,
    UnknownWorkflowError,
)
from .._base._on_error import OnError, check_on_error_routes
from .._base._policies import NO_RETRY as NO_RETRY
from .._base._policies import FlowQueue as FlowQueue
from .._base._policies import Retry as Retry
from .._base._policies import Versioning as Versioning
from .._base._records import LATEST_VERSION
from .._base._search_values import SearchAttributeType
from .._features.entities._entity_defs import Entity, define_entity
from .._features.schedules._schedule_spec import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_CRON,
    Overlap,
    ScheduleSpec,
    make_spec,
)
from .._kernel._definitions import A1 as A1
from .._kernel._definitions import A2 as A2
from .._kernel._definitions import A3 as A3
from .._kernel._definitions import A4 as A4
from .._kernel._definitions import A5 as A5
from .._kernel._definitions import DEFAULT_VERSION as DEFAULT_VERSION
from .._kernel._definitions import P as P
from .._kernel._definitions import R as R
from .._kernel._definitions import Step as Step
from .._kernel._definitions import Workflow as Workflow
from .._kernel._definitions import remote_body as remote_body
from .._kernel._definitions import remote_step_body as remote_step_body
from .._kernel._definitions import shadow_workflow as shadow_workflow
from .._kernel._definitions import workflow_of as workflow_of
from .._kernel._registration_checks import (
    check_body,
    check_entity_key,
    check_group,
    check_name,
    check_queue_options,
    check_search_attribute,
    check_step_options,
    check_subscriber,
    check_unregistered,
    check_versioning,
    check_workflow_options,
)
from ._context import Context
from ._registration_hash import registration_hash

if TYPE_CHECKING:
    from .._kernel._replay import Replay

T = TypeVar("T")


@final
class App:
    """A set of workflows and steps, registered by decorators.

    Args:
      name: The application's name, for people and worker announcements.
      version: The application's version, for people and announcements.
    """

    def __init__(self, name: str, *, version: str = "0") -> None:
        self.name = check_name("app", name)
        self.version = version
        self._workflows: dict[tuple[str, str], Workflow[Any, Any]] = {}
        self._latest: dict[str, Workflow[Any, Any]] = {}
        self._steps: dict[str, Step[Any, Any]] = {}
        self._queues: dict[str, FlowQueue] = {}
        self._schedules: dict[str, ScheduleSpec] = {}
        self._entities: dict[str, Entity] = {}
        self._hashed: tuple[tuple[int, int, int], str] | None = None
        self._search_attributes: dict[str, SearchAttributeType] = {}

    def queue(
        self,
        name: str,
        *,
        concurrency: int,
        priority: int = 0,
        rate_limit: RateLimit | None = None,
    ) -> FlowQueue:
        """Register a flow-control queue.

        Args:
          name: The queue's name.
          concurrency: How many of its steps may run at once, fleet-wide.
          priority: The default priority of steps sent through it (higher
            is admitted first).
          rate_limit: At most so many of its steps sent per period,
            fleet-wide (each attempt counts), or None.

        Raises:
          RegistrationError: The name is taken or invalid, or an option is
            out of range.
        """
        check_name("queue", name)
        check_unregistered("queue", name, self._queues, self.name)
        check_queue_options(concurrency, priority, rate_limit)
        flow = FlowQueue(
            name=name, concurrency=concurrency, priority=priority, rate_limit=rate_limit
        )
        self._queues[name] = flow
        return flow

    def get_queue(self, name: str) -> FlowQueue | None:
        """The flow-control queue registered as ``name``, or None."""
        return self._queues.get(name)

    @property
    def queues(self) -> list[FlowQueue]:
        """The registered flow-control queues, by name."""
        return sorted(self._queues.values(), key=lambda q: q.name)

    def schedule(
        self,
        name: str,
        workflow: Workflow[..., Any] | str,
        *,
        cron: str = DEFAULT_CRON,
        timezone: str = "UTC",
        args: tuple[Any, ...] | list[Any] = (),
        overlap: Overlap = "skip",
        catchup_window: float = DEFAULT_CATCHUP_WINDOW,
        jitter: float = 0.0,
    ) -> None:
        """Declare a schedule: each tick of ``cron`` in ``timezone`` starts
        one run of ``workflow`` with ``args``, fleet-wide. Every engine of
        this app writes it to its store when it opens (see docs/schedules.md).

        Args:
          name: The schedule's name (letters, digits, '_', '.', '-').
          workflow: The workflow, or the name of one (registered here or
            served elsewhere).
          cron: A cron expression (5 fields, or 6 with seconds last).
          timezone: The IANA timezone ``cron`` is read in.
          args: The runs' inputs, checked against the workflow if known.
          overlap: What a tick does while the previous run is still open:
            ``"skip"`` it, ``"buffer_one"`` (start it when that run ends;
            further ticks meanwhile are skipped) or ``"allow"`` it.
          catchup_window: Seconds a tick may be late (after an outage) and
            still start; older ticks are skipped and counted as missed.
          jitter: Each tick starts up to this many seconds late, by a
            delay derived from the name and the tick.

        Raises:
          ScheduleError: The name is taken, or an option (the cron
            expression, the timezone, ...) or ``args`` are invalid.
        """
        check = workflow if isinstance(workflow, Workflow) else None
        if isinstance(workflow, str) and workflow in self._latest:
            check = self._latest[workflow]
        spec = make_spec(
            name,
            workflow,
            cron=cron,
            timezone=timezone,
            args=args,
            overlap=overlap,
            catchup_window=catchup_window,
            jitter=jitter,
            check=check,
        )
        if name in self._schedules:
            raise ScheduleError(f"schedule {name!r} is already declared in app {self.name!r}")
        self._schedules[name] = spec

    @property
    def schedules(self) -> list[ScheduleSpec]:
        """The schedules declared with `schedule`, by name."""
        return [self._schedules[name] for name in sorted(self._schedules)]

    @overload
    def workflow(
        self, fn: Callable[Concatenate[Context, P], Awaitable[R]], /
    ) -> Workflow[P, R]: ...

    @overload
    def workflow(
        self,
        /,
        *,
        name: str | None = None,
        version: str = DEFAULT_VERSION,
        on_error: Sequence[OnError] = (),
        group: str | None = None,
        timeout: float | None = None,
        concurrency_key: Callable[..., str] | None = None,
        max_concurrent: int | None = None,
        singleton: bool = False,
        dedup_key: Callable[..., str] | None = None,
        rate_limit: RateLimit | None = None,
        events: str | Sequence[str] = (),
        debounce: float | None = None,
        debounce_collect: Collect = "last",
        check_arguments: bool = False,
        versioning: Versioning = "auto_upgrade",
    ) -> Callable[[Callable[Concatenate[Context, P], Awaitable[R]]], Workflow[P, R]]: ...

    def workflow(
        self,
        fn: Callable[..., Awaitable[Any]] | None = None,
        /,
        *,
        name: str | None = None,
        version: str = DEFAULT_VERSION,
        on_error: Sequence[OnError] = (),
        group: str | None = None,
        timeout: float | None = None,
        concurrency_key: Callable[..., str] | None = None,
        max_concurrent: int | None = None,
        singleton: bool = False,
        dedup_key: Callable[..., str] | None = None,
        rate_limit: RateLimit | None = None,
        events: str | Sequence[str] = (),
        debounce: float | None = None,
        debounce_collect: Collect = "last",
        check_arguments: bool = False,
        versioning: Versioning = "auto_upgrade",
    ) -> Any:
        """Register an ``async def`` as a workflow: ``@app.workflow``, or
        ``@app.workflow(...)`` with options.

        The body takes a `Context` first, then its inputs, positionally. The
        name defaults to the function's name and the version to ``"1"``;
        several versions of one name may be registered (`Engine.start` by
        name takes the one registered last).

        Args:
          fn: The function, when used without parentheses.
          name: The registered name; defaults to the function's name.
          version: The version; defaults to ``"1"``.
          on_error: Routes that hand a failed run to a handler workflow by
            its error's code: at most one `OnError` per code and one
            catch-all.
          group: Makes the workflow remote: engines send its decision tasks
            to workers serving this group (a broker-safe token), which run
            its body. Without it, a worker whose app registers the workflow
            serves its decision tasks under the workflow's name as the group.
          timeout: Seconds a run may take from its start (an `Engine.start`
            may give its own); when they pass, the run is cancelled with
            compensation, and its awaited children with it
            (docs/run-controls.md).
          concurrency_key: Maps a run's inputs to a key: at most
            ``max_concurrent`` runs per key execute at once, fleet-wide; the
            others wait in start order (docs/concurrency-keys.md).
          max_concurrent: The limit per key; 1 if not given.
          singleton: While a run with the same key is open, a start returns
            that run instead of starting another.
          dedup_key: Maps a run's inputs to a key: while a run with the same
            key waits to be admitted, a start returns that run.
          rate_limit: At most so many runs admitted per period, fleet-wide.
          events: Event names: `Engine.send_event` of one starts a run with
            the event's payload (docs/events.md).
          debounce: Seconds: events for one key within this window start one
            run.
          debounce_collect: ``"last"`` (the run gets the last payload) or
            ``"all"`` (the list of the window's payloads).
          check_arguments: Non-determinism detection also compares a digest
            of each durable operation's arguments, not only its kind and
            name; checkpoints recorded before it was turned on are accepted
            as they are (docs/determinism.md).
          versioning: How its runs follow the builds of the workers
            (docs/deployments.md): ``"auto_upgrade"`` (the default) moves a
            run to the workflow's current build at each turn (guard changes
            with `Context.patched`); ``"pinned"`` keeps a run, its remote
            steps and its decisions on the build it started on while it
            lasts.

        Raises:
          RegistrationError: The name and version are taken, the name is
            invalid, the group is not broker-safe, the function is not an
            ``async def``, its first
            parameter is not the context (missing, not positional, or
            annotated with a type other than `Context` or `typing.Any`), it
            has a required
            keyword-only parameter, or two routes share a code; or it
            subscribes to events but cannot take a payload (the list of
            them, with ``debounce_collect="all"``) as its one input.
        """
        check_workflow_options(version, group, check_arguments, versioning)

        # Options are checked before anything else, under the name given
        # (none of them depends on the name).
        wf_controls = run_controls(
            name or "?",
            timeout=timeout,
            concurrency_key=concurrency_key,
            max_concurrent=max_concurrent,
            singleton=singleton,
            dedup_key=dedup_key,
            rate_limit=rate_limit,
            events=events,
            debounce=debounce,
            debounce_collect=debounce_collect,
        )

        def register(fn: Callable[..., Awaitable[Any]]) -> Workflow[Any, Any]:
            wf_name = check_body("workflow", fn, name, context=True)
            key = (wf_name, version)
            if (wf_name, LATEST_VERSION) in self._workflows:
                raise RegistrationError(
                    f"workflow {wf_name!r} is declared remote in app {self.name!r}"
                    " (remote_workflow): its body lives on workers"
                )
            if key in self._workflows:
                raise RegistrationError(
                    f"workflow {wf_name!r} version {version!r} is already registered in app {self.name!r}"
                )
            routes = check_on_error_routes(wf_name, on_error)
            check_subscriber(f"workflow {wf_name!r}", fn, wf_controls)
            wf: Workflow[Any, Any] = Workflow(
                fn,
                name=wf_name,
                version=version,
                on_error=routes,
                group=group,
                controls=wf_controls,
                check_arguments=check_arguments,
                versioning=versioning,
            )
            self._workflows[key] = wf
            self._latest[wf_name] = wf
            return wf

        return register if fn is None else register(fn)

    def remote_workflow(
        self, name: str, *, group: str | None = None, versioning: Versioning = "auto_upgrade"
    ) -> Workflow[..., Any]:
        """Declare by name a workflow whose body lives on workers: the engine
        sends each turn of its runs to a worker of ``group`` as a decision
        task (docs/remote-workflows.md). Start it by the object returned or
        by name.

        A workflow no engine declares is served by convention all the same,
        when live workers announce it; declaring it pins its group and lets
        `Engine.start` check its name without asking the fleet.

        Args:
          name: The workflow's name.
          group: The group whose workers serve it; defaults to the group the
            workers announce for it, else its name.
          versioning: As for `workflow`.

        Raises:
          RegistrationError: The name is taken or invalid, the group is
            not broker-safe, or the versioning is unknown.
        """
        check_name("workflow", name)
        check_group("workflow", group)
        check_versioning(versioning)
        check_unregistered("workflow", name, self._latest, self.name)
        wf = shadow_workflow(name, LATEST_VERSION, group, versioning)
        self._workflows[(name, LATEST_VERSION)] = wf
        self._latest[name] = wf
        return wf

    @overload
    def step(self, fn: Callable[P, Awaitable[R]], /) -> Step[P, R]: ...

    @overload
    def step(
        self,
        /,
        *,
        name: str | None = None,
        group: str | None = None,
        requires: Sequence[str] = (),
        queue: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Step[P, R]]: ...

    def step(
        self,
        fn: Callable[..., Awaitable[Any]] | None = None,
        /,
        *,
        name: str | None = None,
        group: str | None = None,
        requires: Sequence[str] = (),
        queue: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Register an ``async def`` as a step: ``@app.step``, or
        ``@app.step(...)`` with options.

        A step takes its inputs positionally.

        Args:
          fn: The function, when used without parentheses.
          name: The registered name; defaults to the function's name.
          group: Makes the step remote: it runs on workers serving this group
            (a broker-safe token), reached through the broker. Without it the
            step runs in the engine's process.
          requires: Capabilities (such as ``"gpu"``) a worker must offer for
            the step to be dispatched; only for remote steps.
          queue: A flow-control queue (see `App.queue`) every call of the step
            goes through; only for remote steps.
          retry: The retry policy; defaults to ``Retry()`` (3 attempts).
          timeout: Seconds one attempt may take; a timed-out attempt fails
            with code ``"timeout"`` and is retried like any other failure.

        Raises:
          RegistrationError: The name is taken or invalid, an option is out
            of range, the function is not an ``async def``, or it has a
            required keyword-only parameter.
        """
        check_step_options(
            group=group, requires=requires, queue=queue, retry=retry, timeout=timeout
        )

        def register(fn: Callable[..., Awaitable[Any]]) -> Step[Any, Any]:
            step_name = check_body("step", fn, name, context=False)
            check_unregistered("step", step_name, self._steps, self.name)
            step: Step[Any, Any] = Step(
                fn,
                name=step_name,
                retry=retry or Retry(),
                timeout=timeout,
                group=group,
                requires=tuple(sorted(set(requires))),
                queue=queue,
            )
            self._steps[step_name] = step
            return step

        return register if fn is None else register(fn)

    def entity(
        self, name: str, *, key: type[str] | type[int] = str
    ) -> Callable[[type[T]], type[T]]:
        """Register a class as the keyed entity ``name``:
        ``@app.entity("cart", key=str)``.

        Each key has its own state, an instance of the class (made with no
        arguments for a new key) whose attributes are stored as JSON. Its
        ``async`` methods marked `exclusive` run one at a time per key,
        fleet-wide, and the state they leave commits with their result;
        those marked `shared` read the state concurrently. Call them with
        `Context.entity`, `Engine.entity` or `Client.entity`
        (docs/entities.md). The class is returned unchanged.

        Args:
          name: The entity's name.
          key: The type of its keys: ``str`` (the default) or ``int``.

        Raises:
          RegistrationError: The name is taken or invalid, ``key`` is not
            ``str`` or ``int``, the class cannot be made with no arguments,
            or a handler is not an ``async def`` (or a public ``async def``
            is not marked).
        """
        check_name("entity", name)
        check_entity_key(name, key)

        def register(cls: type[T]) -> type[T]:
            check_unregistered("entity", name, self._entities, self.name)
            entity = define_entity(name, cls, key)
            wf = entity.workflow
            self._entities[name] = entity
            self._workflows[(wf.name, wf.version)] = wf
            self._latest[wf.name] = wf
            return cls

        return register

    def get_entity(self, name: str) -> Entity:
        """The entity registered as ``name``.

        Raises:
          UnknownEntityError: None is.
        """
        entity = self._entities.get(name) if isinstance(name, str) else None
        if entity is None:
            known = ", ".join(sorted(self._entities)) or "none"
            raise UnknownEntityError(f"no entity {name!r} in app {self.name!r} (known: {known})")
        return entity

    # -- lookups --------------------------------------------------------------

    def context(self, replay: Replay) -> Context:
        """The `Context` a body of this app runs with while ``replay``
        replays it."""
        return Context(replay)

    def get_workflow(self, name: str, version: str | None = None) -> Workflow[Any, Any]:
        """The workflow registered as ``name`` (and ``version``, if given;
        else the one registered last).

        Raises:
          UnknownWorkflowError: None is registered so.
        """
        wf = self._latest.get(name) if version is None else self._workflows.get((name, version))
        if wf is None:
            known = ", ".join(sorted({n for n, _ in self._workflows})) or "none"
            what = repr(name) if version is None else f"{name!r} version {version!r}"
            raise UnknownWorkflowError(f"no workflow {what} in app {self.name!r} (known: {known})")
        return wf

    def find_workflow(self, name: str, version: str) -> Workflow[Any, Any] | None:
        """The workflow a run of ``name`` at ``version`` executes here (for
        `LATEST_VERSION`, the one registered last), or None, in one lookup."""
        if version == LATEST_VERSION:
            return self._latest.get(name)
        return self._workflows.get((name, version))

    def has_workflow(self, name: str, version: str) -> bool:
        """Whether ``name`` is registered at ``version``."""
        return (name, version) in self._workflows

    def get_step(self, name: str) -> Step[Any, Any] | None:
        """The step registered as ``name``, or None."""
        return self._steps.get(name)

    @property
    def workflows(self) -> list[Workflow[Any, Any]]:
        """Every registered workflow, in registration order."""
        return list(self._workflows.values())

    @property
    def steps(self) -> list[Step[Any, Any]]:
        """Every registered step, in registration order."""
        return list(self._steps.values())

    @property
    def groups(self) -> list[str]:
        """The worker groups of the remote steps, sorted (see
        `workflow_groups` for the groups that decide workflows)."""
        return sorted({s.group for s in self._steps.values() if s.group is not None})

    @property
    def workflow_groups(self) -> list[str]:
        """The decision groups of the workflows with a body here (each one's
        group, else its name), sorted: the groups whose decision tasks a
        worker of this app can serve."""
        return sorted(
            {wf.decision_group for wf in self._workflows.values() if wf.fn is not remote_body}
        )

    def registration_hash(self) -> str:
        """A canonical hash of every registration (see
        `._registration_hash.registration_hash`): two processes of one
        deploy announce the same hash, and a rollout shows as two hashes.
        Computed once per set of registrations (they are only ever added)."""
        size = (len(self._steps), len(self._queues), len(self._workflows))
        if self._hashed is None or self._hashed[0] != size:
            self._hashed = (size, registration_hash(self))
        return self._hashed[1]

    def search_attribute(self, name: str, type: object) -> None:
        """Declare the search attribute ``name`` of ``type`` (``str``, ``int``,
        ``float``, ``bool``, ``datetime.datetime`` or ``list[str]``), which
        runs may then carry (see docs/search-attributes.md). An engine
        records it in its store when it opens: one name has one type for
        good, fleet-wide.

        Raises:
          SearchAttributeError: The name or type is invalid, or the name is
            declared with another type.
        """
        kind = check_search_attribute(self._search_attributes, name, type, self.name)
        self._search_attributes[name] = kind

    @property
    def search_attributes(self) -> dict[str, SearchAttributeType]:
        """The declared search attributes' types, by name."""
        return dict(sorted(self._search_attributes.items()))
