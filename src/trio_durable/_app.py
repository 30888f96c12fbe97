"""Registration: the `App`, its workflows and steps, and retry policies."""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Generic,
    ParamSpec,
    TypeVar,
    final,
    overload,
)

from ._brokers._base import is_broker_safe
from ._exceptions import FatalError, RegistrationError, UnknownWorkflowError
from ._on_error import OnError, check_on_error_routes
from ._policies import NO_RETRY as NO_RETRY
from ._policies import FlowQueue as FlowQueue
from ._policies import Retry as Retry
from ._policies import finite
from ._records import LATEST_VERSION

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


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(
            f"{kind} name {name!r} is invalid: use letters, digits, '_', '.', '-' "
            "(starting with a letter or '_', at most 200 characters)"
        )
    return name


def _check_parameters(target: str, fn: Callable[..., Any], *, context: bool) -> None:
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
    """

    def __init__(
        self,
        fn: Callable[Concatenate[Context, P], Awaitable[R]],
        *,
        name: str,
        version: str,
        on_error: tuple[OnError, ...] = (),
        group: str | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.version = version
        self.on_error = on_error
        self.group = group
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


@final
class App:
    """A set of workflows and steps, registered by decorators.

    Args:
      name: The application's name, for people and worker announcements.
      version: The application's version, for people and announcements.
    """

    def __init__(self, name: str, *, version: str = "0") -> None:
        self.name = _check_name("app", name)
        self.version = version
        self._workflows: dict[tuple[str, str], Workflow[Any, Any]] = {}
        self._latest: dict[str, Workflow[Any, Any]] = {}
        self._steps: dict[str, Step[Any, Any]] = {}
        self._queues: dict[str, FlowQueue] = {}

    def queue(self, name: str, *, concurrency: int, priority: int = 0) -> FlowQueue:
        """Register a flow-control queue.

        Args:
          name: The queue's name.
          concurrency: How many of its steps may run at once, fleet-wide.
          priority: The default priority of steps sent through it (higher
            is admitted first).

        Raises:
          RegistrationError: The name is taken or invalid, or an option is
            out of range.
        """
        _check_name("queue", name)
        if name in self._queues:
            raise RegistrationError(f"queue {name!r} is already registered in app {self.name!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise RegistrationError(
                f"queue concurrency must be a positive integer, not {concurrency!r}"
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise RegistrationError(f"queue priority must be an integer, not {priority!r}")
        flow = FlowQueue(name=name, concurrency=concurrency, priority=priority)
        self._queues[name] = flow
        return flow

    def get_queue(self, name: str) -> FlowQueue | None:
        """The flow-control queue registered as ``name``, or None."""
        return self._queues.get(name)

    @property
    def queues(self) -> list[FlowQueue]:
        """The registered flow-control queues, by name."""
        return sorted(self._queues.values(), key=lambda q: q.name)

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

        Raises:
          RegistrationError: The name and version are taken, the name is
            invalid, the group is not broker-safe, the function is not an
            ``async def``, its first
            parameter is not the context (missing, not positional, or
            annotated with a type other than `Context` or `typing.Any`), it
            has a required
            keyword-only parameter, or two routes share a code.
        """
        if not isinstance(version, str) or not version:
            raise RegistrationError(f"workflow version must be a non-empty string, not {version!r}")
        if group is not None and not is_broker_safe(group):
            raise RegistrationError(
                f"workflow group {group!r} is not broker-safe: use letters, digits, '_', '.', '-'"
                " (at most 100, not starting with '.' or '-')"
            )

        def register(fn: Callable[..., Awaitable[Any]]) -> Workflow[Any, Any]:
            if not inspect.iscoroutinefunction(fn):
                raise RegistrationError(f"workflow {fn!r} must be an async def")
            wf_name = _check_name("workflow", fn.__name__ if name is None else name)
            _check_parameters(f"workflow {wf_name!r}", fn, context=True)
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
            wf: Workflow[Any, Any] = Workflow(
                fn, name=wf_name, version=version, on_error=routes, group=group
            )
            self._workflows[key] = wf
            self._latest[wf_name] = wf
            return wf

        return register if fn is None else register(fn)

    def remote_workflow(self, name: str, *, group: str | None = None) -> Workflow[..., Any]:
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

        Raises:
          RegistrationError: The name is taken or invalid, or the group is
            not broker-safe.
        """
        _check_name("workflow", name)
        if group is not None and not is_broker_safe(group):
            raise RegistrationError(
                f"workflow group {group!r} is not broker-safe: use letters, digits, '_', '.', '-'"
                " (at most 100, not starting with '.' or '-')"
            )
        if name in self._latest:
            raise RegistrationError(f"workflow {name!r} is already registered in app {self.name!r}")
        wf = shadow_workflow(name, LATEST_VERSION, group)
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
        if retry is not None and not isinstance(retry, Retry):
            raise RegistrationError(f"retry must be a td.Retry, not {retry!r}")
        if group is not None and not is_broker_safe(group):
            raise RegistrationError(
                f"step group {group!r} is not broker-safe: use letters, digits, '_', '.', '-'"
                " (at most 100, not starting with '.' or '-')"
            )
        if isinstance(requires, str) or not all(isinstance(r, str) and r for r in requires):
            raise RegistrationError(
                f"requires must be a list of capability names, not {requires!r}"
            )
        if requires and group is None:
            raise RegistrationError("requires= only applies to remote steps (give a group=)")
        if queue is not None and group is None:
            raise RegistrationError("queue= only applies to remote steps (give a group=)")
        if timeout is not None:
            finite("step timeout", timeout)
            if timeout <= 0:
                raise RegistrationError(f"step timeout must be positive, not {timeout!r}")

        def register(fn: Callable[..., Awaitable[Any]]) -> Step[Any, Any]:
            if not inspect.iscoroutinefunction(fn):
                raise RegistrationError(f"step {fn!r} must be an async def")
            step_name = _check_name("step", fn.__name__ if name is None else name)
            _check_parameters(f"step {step_name!r}", fn, context=False)
            if step_name in self._steps:
                raise RegistrationError(
                    f"step {step_name!r} is already registered in app {self.name!r}"
                )
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

    # -- lookups --------------------------------------------------------------

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
        """A canonical hash of every registration: steps with their groups,
        requirements, flow-control queues, retries and timeouts, the queues,
        and workflows with their versions, on-error routes and groups.

        It does not depend on registration order, nor on how an equal number
        is written (``backoff=1`` or ``1.0``), so two processes of one deploy
        announce the same hash and a rollout shows as two hashes.
        """

        def number(value: float | None) -> float | None:
            # json writes 1 and 1.0 differently; equal settings must hash alike.
            return None if value is None else float(value)

        data = {
            "steps": {
                s.name: {
                    "group": s.group,
                    "requires": list(s.requires),
                    "queue": s.queue,
                    "retry": {
                        "attempts": s.retry.attempts,
                        "backoff": number(s.retry.backoff),
                        "max_backoff": number(s.retry.max_backoff),
                        "jitter": number(s.retry.jitter),
                    },
                    "timeout": number(s.timeout),
                }
                for s in sorted(self._steps.values(), key=lambda s: s.name)
            },
            "queues": {
                q.name: {"concurrency": q.concurrency, "priority": q.priority}
                for q in sorted(self._queues.values(), key=lambda q: q.name)
            },
            "workflows": sorted(
                [
                    name,
                    version,
                    sorted([r.code or "", r.workflow] for r in wf.on_error),
                    # Only when given, so that a deploy declaring no
                    # workflow group hashes as it did before groups existed.
                    *([] if wf.group is None else [wf.group]),
                ]
                for (name, version), wf in self._workflows.items()
            ),
        }
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def workflow_of(app: App, target: Workflow[Any, Any] | str) -> Workflow[Any, Any]:
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


if TYPE_CHECKING:
    _ = Context
