"""What registration makes: `Step` and `Workflow`, and the bodies of
workflows and steps that live on workers only (the checks a registration
passes are `_registration_checks`')."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    final,
)

from .._base._controls import NO_CONTROLS, RunControls
from .._base._exceptions import FatalError, UnknownWorkflowError
from .._base._on_error import OnError
from .._base._policies import FlowQueue, Retry, Versioning

if TYPE_CHECKING:
    from .._base._search_values import SearchAttributeType
    from ._replay import Replay

P = ParamSpec("P")
R = TypeVar("R")
# The inputs of a step or workflow, by position, in the overloads that type
# calls of them (`Context.step`, `Engine.start`, ...): keyword options such
# as ``compensate=`` cannot sit beside ``*args: P.args, **kwargs: P.kwargs``,
# so each count of inputs has an overload of its own.
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")

DEFAULT_VERSION: Final = "1"


@final
class Step(Generic[P, R]):
    """A registered step: a function whose result is checkpointed.

    Made by `App.step`. Calling it directly runs the function, with no
    checkpoint; inside a workflow use `Context.step`.

    Attributes:
      name: The registered name.
      fn: The function.
      retry: Its retry policy.
      timeout: Seconds one attempt may take, or None.
      group: The worker group that runs it, or None for a local step.
      requires: Capabilities a worker must offer to run it.
      queue: The flow-control queue its calls go through by default.
    """

    @property
    def remote(self) -> bool:
        """Whether the step runs on workers rather than in the engine."""
        return self.group is not None

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]],
        *,
        name: str,
        retry: Retry,
        timeout: float | None,
        group: str | None = None,
        requires: tuple[str, ...] = (),
        queue: str | None = None,
    ) -> None:
        self.queue = queue
        self.fn = fn
        self.name = name
        self.retry = retry
        self.timeout = timeout
        self.group = group
        self.requires = requires
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Step {self.name}>"


@final
class Workflow(Generic[P, R]):
    """A registered workflow.

    Made by `App.workflow`. Start it with `Engine.start`, or from another
    workflow with `Context.child`. Calling it directly is an error: a
    workflow's body only runs under the engine, which checkpoints it.

    Attributes:
      name: The registered name.
      version: The registered version.
      fn: The ``async def`` body; its first parameter is the `Context`.
      on_error: Its on-error routes (see `OnError`).
      group: The worker group whose workers decide its runs (a remote
        workflow), or None. Without one, a worker that registers it still
        serves it under its name as the group (see `decision_group`).
      controls: Its run controls (timeout, concurrency key, singleton,
        deduplication, rate limit, events, debounce; see `App.workflow`).
      check_arguments: Whether replay also compares each durable
        operation's arguments (see `App.workflow`).
      versioning: ``"auto_upgrade"`` (the default: a run moves to its
        workflow's current build at each turn) or ``"pinned"`` (a run
        stays on the build it started on); see docs/deployments.md.
    """

    def __init__(
        self,
        fn: Callable[Concatenate[Any, P], Awaitable[R]],
        *,
        name: str,
        version: str,
        on_error: tuple[OnError, ...] = (),
        group: str | None = None,
        controls: RunControls = NO_CONTROLS,
        check_arguments: bool = False,
        versioning: Versioning = "auto_upgrade",
    ) -> None:
        self.fn = fn
        self.versioning: Versioning = versioning
        self.name = name
        self.version = version
        self.on_error = on_error
        self.group = group
        self.controls = controls
        self.check_arguments = check_arguments
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise FatalError(
            f"workflow {self.name!r} was called directly; start it with engine.start(), "
            "or from a workflow with ctx.child() or ctx.start_child()",
            code="nested_workflow_call",
        )

    @property
    def remote(self) -> bool:
        """Whether the workflow's turns are decided on workers (it has a
        ``group``, or was declared by name with `App.remote_workflow`)."""
        return self.group is not None or self.fn is remote_body

    @property
    def decision_group(self) -> str:
        """The group whose workers decide its turns: its ``group``, else its
        own name (served by convention)."""
        return self.group or self.name

    def __repr__(self) -> str:
        return f"<Workflow {self.name} v{self.version}>"


async def remote_body(ctx: Any, *args: Any) -> Any:
    """The body of a workflow declared by name (`App.remote_workflow`), or
    met by name in a decision: it lives on workers, never runs here."""
    raise FatalError(
        f"workflow {ctx.workflow!r} runs on workers; this process holds no body for it",
        code="remote_workflow",
    )


async def remote_step_body(*args: Any) -> Any:
    """The function of a remote step known here only from a remote
    workflow's decision: it runs on workers, never here."""
    raise FatalError("this remote step runs on workers only", code="remote_step")


def shadow_workflow(
    name: str, version: str, group: str | None = None, versioning: Versioning = "auto_upgrade"
) -> Workflow[..., Any]:
    """A workflow known here by name only, whose body lives on workers."""
    return Workflow(remote_body, name=name, version=version, group=group, versioning=versioning)


class Registry(Protocol):
    """What the kernel reads of an application's registrations: `App` is
    one. A feature that needs more of the app (its entities, its
    schedules) says what in a protocol of its own."""

    @property
    def name(self) -> str: ...

    @property
    def workflows(self) -> list[Workflow[Any, Any]]: ...

    @property
    def steps(self) -> list[Step[Any, Any]]: ...

    @property
    def queues(self) -> list[FlowQueue]: ...

    @property
    def search_attributes(self) -> dict[str, SearchAttributeType]: ...

    def get_workflow(self, name: str, version: str | None = None) -> Workflow[Any, Any]: ...

    def find_workflow(self, name: str, version: str) -> Workflow[Any, Any] | None: ...

    def has_workflow(self, name: str, version: str) -> bool: ...

    def get_step(self, name: str) -> Step[Any, Any] | None: ...

    def get_queue(self, name: str) -> FlowQueue | None: ...

    def context(self, replay: Replay) -> object:
        """The `Context` a body runs with while ``replay`` replays it."""
        ...


def workflow_of(app: Registry, target: Workflow[Any, Any] | str) -> Workflow[Any, Any]:
    """Resolve a workflow given as an object or a name against ``app``."""
    if isinstance(target, Workflow):
        if app.has_workflow(target.name, target.version):
            registered = app.get_workflow(target.name, target.version)
            if registered is target:
                return target
        raise UnknownWorkflowError(
            f"workflow {target.name!r} version {target.version!r} is not registered in app {app.name!r}"
        )
    if isinstance(target, str):
        return app.get_workflow(target)
    raise UnknownWorkflowError(f"not a workflow: {target!r}")


def remote_groups(app: Registry, served: Sequence[str]) -> tuple[str, ...]:
    """The groups of ``app``'s remote steps and of its remote workflows'
    decision tasks, sorted, less those of the group routes in ``served``
    (the engine's own worker serves them)."""
    own = {route.partition("@")[0] for route in served}
    needed = {step.group for step in app.steps if step.group is not None}
    needed |= {workflow.decision_group for workflow in app.workflows if workflow.remote}
    return tuple(sorted(needed - own))
