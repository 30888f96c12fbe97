"""What registration makes: `Step` and `Workflow`, the checks their
names and signatures pass, and the bodies of workflows and steps that live
on workers only."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, Final, Generic, ParamSpec, TypeVar, final

from ._controls import NO_CONTROLS, RunControls
from ._exceptions import FatalError, RegistrationError
from ._on_error import OnError
from ._policies import Retry

if TYPE_CHECKING:
    from ._context import Context

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

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,199}$")
DEFAULT_VERSION: Final = "1"


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(
            f"{kind} name {name!r} is invalid: use letters, digits, '_', '.', '-' "
            "(starting with a letter or '_', at most 200 characters)"
        )
    return name


def check_parameters(target: str, fn: Callable[..., Any], *, context: bool) -> None:
    """Refuse what no call could fill: inputs are passed positionally, after
    the context for a workflow."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"{target}: cannot read its signature ({exc})") from exc
    if context:
        first = params[0] if params else None
        if first is None or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
            raise RegistrationError(
                f"{target} must take the context first:"
                f" async def {fn.__name__}(ctx: td.Context, ...)"
            )
        if first.annotation is not first.empty and not _is_context(fn, first):
            raise RegistrationError(
                f"{target} must take the context first, but its first parameter"
                f" {first.name!r} is annotated {_annotation_text(first.annotation)},"
                " not td.Context"
            )
    for param in params:
        if param.kind == param.KEYWORD_ONLY and param.default is param.empty:
            raise RegistrationError(
                f"{target} has the required keyword-only parameter {param.name!r}:"
                " inputs are passed positionally"
            )


def _annotation_text(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__qualname__", None) or repr(annotation)


def _is_context(fn: Callable[..., Any], param: inspect.Parameter) -> bool:
    """Whether ``param`` is annotated `Context` (or `typing.Any`, which
    claims nothing, or something that cannot be resolved at run time).

    `Context` is recognised by where it is defined: ``_context`` imports this
    module, so this one cannot import it back.
    """
    hint = param.annotation
    if isinstance(hint, str):
        try:
            hint = typing.get_type_hints(fn)[param.name]
        except Exception:
            # An annotation names something only a type checker sees (an
            # import under TYPE_CHECKING, perhaps of Context by another
            # name): what cannot be resolved cannot be judged.
            return True
    return hint is Any or (
        getattr(hint, "__module__", None) == "trio_durable._context"
        and getattr(hint, "__qualname__", None) == "Context"
    )


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
    """

    def __init__(
        self,
        fn: Callable[Concatenate[Context, P], Awaitable[R]],
        *,
        name: str,
        version: str,
        on_error: tuple[OnError, ...] = (),
        group: str | None = None,
        controls: RunControls = NO_CONTROLS,
        check_arguments: bool = False,
    ) -> None:
        self.fn = fn
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


def shadow_workflow(name: str, version: str, group: str | None = None) -> Workflow[..., Any]:
    """A workflow known here by name only, whose body lives on workers."""
    return Workflow(remote_body, name=name, version=version, group=group)
