"""`StartsRuns`: the typed `start` that `Engine` and `Client` share.

Python's typing cannot say "any number of inputs, each checked against the
workflow's parameters" once, so `start` has one overload per count of
inputs; written here once, for both front ends, which say how a run is
started (`StartsRuns._start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Concatenate, overload

from ._app import A1, A2, A3, A4, A5, P, R, Workflow
from ._handle import RunHandle
from ._records import DEFAULT_NAMESPACE


class StartsRuns:
    """The typed `start` of a front end that starts runs."""

    async def _start(
        self,
        workflow: Workflow[..., Any] | str,
        args: tuple[Any, ...],
        run_id: str | None,
        namespace: str,
        tags: tuple[str, ...] | list[str],
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[Any]:
        raise NotImplementedError

    @overload
    async def start(
        self,
        workflow: Workflow[[], R],
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1], R],
        a1: A1,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[Concatenate[A1, A2, A3, A4, A5, P], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: str,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[Any]: ...

    async def start(
        self,
        workflow: Workflow[..., Any] | str,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[Any]:
        """Start a run of ``workflow`` with positional ``args``.

        On an `Engine`, the engine runs it (or another engine sharing the
        store); on a `Client`, it is created ``pending``, leased to no
        engine, and an engine sharing the store takes it at once.

        Idempotent by ``run_id``: if a run with that id exists in
        ``namespace``, it is returned and nothing is written. Run ids are
        unique across the whole store, not per namespace: an id that a run
        of another namespace holds is refused.

        Calls are typed: a type checker checks ``args`` against the
        workflow's parameters (for up to four of them; past that the first
        five), and the handle's `RunHandle.result` returns the workflow's
        return type.

        Args:
          workflow: A registered workflow, or its name (then the version
            registered last). An engine, and a client given ``app=``, check
            ``args`` against its parameters; a client checks a `Workflow`
            without an app too, and takes a name without an app as it is:
            the inputs are not checked, and the engine that first runs the
            run runs the version registered last there.
          *args: The inputs, JSON-able values or attrs instances.
          run_id: The run's id; without it one is derived (by an engine from
            its seeded random source).
          namespace: The tenant the run belongs to.
          tags: Labels stored on the run.
          timeout: Seconds the run may take from its start; then it is
            cancelled with compensation (its error's code ``timeout``),
            and the children it awaits with it. Defaults to the
            workflow's ``@app.workflow(timeout=)``; a chain continued as
            new shares it (see docs/run-controls.md).
          search_attributes: The run's search attributes by name, each
            declared (`App.search_attribute`) and of its type; filter runs
            by them with ``list_runs(search_attributes=...)`` (see
            docs/search-attributes.md). An idempotent start of an existing
            run leaves its attributes as they are.

        Returns:
          A `RunHandle`: the run as stored, whose ``result()`` waits for its
          output (through the engine or client that started it).

        Raises:
          UnknownWorkflowError: The workflow is not registered (in the app).
          InvalidArgumentsError: ``args`` do not fit the workflow's
            parameters (their count, or an input's declared type).
          SerializationError: An input cannot be serialized.
          RunConflictError: ``run_id`` belongs to a run of another workflow,
            or to a run of another namespace (the error says nothing of
            that run).
          SearchAttributeError: A search attribute is not declared, or its
            value is not of its type; nothing is written.
          UsageError: ``run_id``, ``namespace``, ``tags`` or ``timeout`` are
            malformed.
          StoreError: The store failed.
        """
        return await self._start(
            workflow, args, run_id, namespace, tags, timeout, search_attributes=search_attributes
        )
