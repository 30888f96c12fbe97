"""`StartsRuns`: the typed `start` and `start_many` that `Engine` and
`Client` share.

Python's typing cannot say "any number of inputs, each checked against the
workflow's parameters" once, so `start` has one overload per count of
inputs; written here once, for both front ends, which say how a run is
started (`StartsRuns._start`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Concatenate, overload

from .._base._exceptions import UsageError
from .._base._records import DEFAULT_NAMESPACE
from ._app import A1, A2, A3, A4, A5, P, R, Workflow
from ._front_core import FrontPart
from ._handle import RunHandle


class StartsRuns(FrontPart):
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

    async def _start_many(
        self,
        workflow: Workflow[..., Any] | str,
        inputs: Sequence[tuple[Any, ...]],
        run_ids: Sequence[str | None],
        namespace: str,
        tags: tuple[str, ...] | list[str],
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None,
    ) -> list[RunHandle[Any]]:
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

    @overload
    async def start_many(
        self,
        workflow: Workflow[..., R],
        inputs: Sequence[tuple[Any, ...]],
        /,
        *,
        run_ids: Sequence[str] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> list[RunHandle[R]]: ...

    @overload
    async def start_many(
        self,
        workflow: str,
        inputs: Sequence[tuple[Any, ...]],
        /,
        *,
        run_ids: Sequence[str] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> list[RunHandle[Any]]: ...

    async def start_many(
        self,
        workflow: Workflow[..., Any] | str,
        inputs: Sequence[tuple[Any, ...]],
        /,
        *,
        run_ids: Sequence[str] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> list[RunHandle[Any]]:
        """Start one run of ``workflow`` per item of ``inputs``, in one
        durable write.

        Each item is the tuple of one run's positional arguments (``(x,)``
        for a workflow of one parameter). Every input is checked, and
        every id, before anything is written; then all the runs are
        created in one batch (one transaction), so after a crash either
        all of them exist or none does. Each run is otherwise started as
        `start` starts it, with the same options for all.

        Runs of a workflow with run controls (a concurrency key, a
        singleton, a dedup key, a rate limit) claim their keys one by one,
        as `start` does: they are written one after another, each on its
        own, and a failure may leave the earlier ones started.

        Args:
          workflow: A registered workflow, or its name (see `start`).
          inputs: One tuple of arguments per run.
          run_ids: One id per input, or None to derive them. Idempotent by
            id as `start` is: an id that exists returns its run, and
            writes nothing for it; an id given twice names one run.
          namespace: The tenant the runs belong to.
          tags: Labels stored on each run.
          timeout: Seconds each run may take from its start (see `start`).
          search_attributes: The search attributes of each run (see
            `start`).

        Returns:
          One `RunHandle` per input, in the order of ``inputs``.

        Raises:
          UsageError: ``inputs`` is not a sequence of tuples, ``run_ids``
            does not hold one id per input, or an option is malformed;
            nothing is written.
          UnknownWorkflowError, InvalidArgumentsError, SerializationError,
            SearchAttributeError: As for `start`, for any input; nothing
            is written.
          RunConflictError: An id belongs to a run of another workflow or
            namespace; nothing is written.
          StoreError: The store failed; nothing of the batch was written.
        """
        if run_ids is None:
            ids: Sequence[str | None] = [None] * len(inputs) if isinstance(inputs, Sequence) else []
        elif isinstance(run_ids, str) or not isinstance(run_ids, Sequence):
            raise UsageError(f"run_ids must be a sequence of ids, not {run_ids!r}")
        else:
            ids = run_ids
        return await self._start_many(
            workflow, inputs, ids, namespace, tags, timeout, search_attributes
        )
