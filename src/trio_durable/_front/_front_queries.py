"""The query methods `Engine` offers (and any other front end may): each
one line into `_queries` or `_retention` on the front end's store."""

from __future__ import annotations

import datetime
from collections.abc import Collection, Mapping
from typing import Any

from .._base._records import QueueDepth, RunStatus
from .._features.retention import _retention
from .._kernel._views import FanPage, Retention, RunDetail, RunHistory, RunPage
from .._stores._base import Store
from . import _queries
from ._front_bulk import BULK
from ._front_core import FrontPart


class RunQueries(FrontPart):
    """Finding and reading runs, and pruning ended ones, on the front
    end's store (durable time: its clock's)."""

    def _query_store(self) -> Store:
        self._core.check_open()
        return self._core.store

    async def list_runs(
        self,
        *,
        status: RunStatus | Collection[RunStatus] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tags: Collection[str] = (),
        created_after: float | datetime.datetime | None = None,
        created_before: float | datetime.datetime | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        id_prefix: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        facets: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunPage:
        """A page of runs matching every filter given, newest first.

        Pages follow each other by keyset: pass a page's ``next_cursor`` as
        ``cursor`` for the next one, with the same filters. Runs created
        meanwhile never shift a page (newer runs come before the first).

        Args:
          status: A run status, or a collection of them.
          workflow: The workflow's name.
          namespace: The runs' namespace.
          tags: Runs having all of these tags.
          created_after: Runs created at or after this (durable seconds
            since the epoch, or an aware datetime).
          created_before: Runs created before this.
          parent_id: Children of this run (children, fan members and
            on-error handlers' runs record the run that started them).
          top_level: Only runs without a parent: no child, fan member
            or on-error handler's run (not with ``parent_id``).
          id_prefix: Runs whose id starts with this.
          limit: Runs per page, 1 to 500.
          cursor: Where to go on: a `RunPage`'s ``next_cursor``.
          facets: Count the runs matching every filter but ``status``, per
            status, into `RunPage.facets` (this reads every such run's
            index entry: slower than a page on a large store).
          search_attributes: Runs whose search attributes match, by name:
            a value matches equal values (for a keyword list, lists that
            hold it), a `SearchRange` the values in it (int, float and
            datetime attributes). Names and types are those the store
            records (see docs/search-attributes.md).

        Raises:
          SearchAttributeError: A search attribute filter names an
            attribute the store does not record, or a value not of its type.
          UsageError: A filter, ``limit`` or ``cursor`` is malformed.
        """
        return await _queries.list_runs(
            self._query_store(),
            status=status,
            workflow=workflow,
            namespace=namespace,
            tags=tags,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
            top_level=top_level,
            id_prefix=id_prefix,
            limit=limit,
            cursor=cursor,
            facets=facets,
            search_attributes=search_attributes,
        )

    async def count_runs(
        self,
        *,
        status: RunStatus | Collection[RunStatus] | None = None,
        workflow: str | None = None,
        namespace: str | None = None,
        tags: Collection[str] = (),
        created_after: float | datetime.datetime | None = None,
        created_before: float | datetime.datetime | None = None,
        parent_id: str | None = None,
        top_level: bool = False,
        id_prefix: str | None = None,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> dict[RunStatus, int]:
        """How many runs match every filter given, per status (statuses
        with none left out), counted in the store: the filters are
        `list_runs`'s.

        Raises:
          SearchAttributeError: A search attribute filter names an
            attribute the store does not record, or a value not of its type.
          UsageError: A filter is malformed.
        """
        return await _queries.count_runs(
            self._query_store(),
            status=status,
            workflow=workflow,
            namespace=namespace,
            tags=tags,
            created_after=created_after,
            created_before=created_before,
            parent_id=parent_id,
            top_level=top_level,
            id_prefix=id_prefix,
            search_attributes=search_attributes,
        )

    async def history(self, run_id: str, *, namespace: str | None = None) -> RunHistory:
        """The run's timeline: every checkpoint with its kind, name, status,
        attempts, errors and times, the ids of its children and on-error
        handlers, and what each retry of the run replaced (`RunHistory.retried`:
        the run's error then and the operations the retry deleted or reset,
        with every attempt's error and traceback). Payloads are left out.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
        """
        return await _queries.history(self._query_store(), run_id, namespace=namespace)

    async def run_detail(self, run_id: str, *, namespace: str | None = None) -> RunDetail:
        """The run for people: stats per fan and the timeline with every fan
        wider than 20 members folded into its stats, and what each retry of
        the run replaced (`RunDetail.retried`). It reads O(1) rows per fan,
        whatever its width, and per retry; read members with `fan_page`.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
        """
        return await _queries.run_detail(self._query_store(), run_id, namespace=namespace)

    async def fan_page(
        self,
        run_id: str,
        fan: int,
        *,
        offset: int = 0,
        limit: int = 100,
        failed: bool = False,
        namespace: str | None = None,
    ) -> FanPage:
        """A page of the members of a fan, by seq.

        Args:
          run_id: The run.
          fan: The fan's first seq (`FanStats.first_seq`).
          offset: How many matching members to skip.
          limit: Members per page, 1 to 500.
          failed: Only the failed members.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: The run has no such fan, or ``offset`` or ``limit``
            is out of range.
        """
        return await _queries.fan_page(
            self._query_store(),
            run_id,
            fan,
            offset=offset,
            limit=limit,
            failed=failed,
            namespace=namespace,
        )

    async def prune(self, retention: Retention, *, limit: int | None = None) -> int:
        """Delete the ended runs ``retention`` no longer keeps, now, in its
        batches, each with the records that go with it; at most ``limit``
        (None: all). The event records and the states of bulk operations
        older than its ``events`` age go too. Returns how many runs were
        deleted.

        Raises:
          UsageError: ``retention`` is not a `Retention` or ``limit`` is bad.
        """
        return await _retention.prune(
            self._query_store(), retention, self._core.clock.now(), limit, aged=(BULK,)
        )

    async def queue_depths(self) -> list[QueueDepth]:
        """Each flow-control queue that holds or awaits a slot now, by name:
        the steps and runs admitted (holding a slot) and waiting, counted
        in the store (a queue with neither is left out; its limit is the
        app's, `App.queue`)."""
        return await self._query_store().queue_depths()

    async def queue_position(self, queue: str, run_id: str, seq: int) -> int | None:
        """Where the step at ``seq`` of ``run_id`` stands in the line of the
        flow-control queue ``queue`` (a `HistoryEntry`'s ``queue``): 1 for
        the next one a released slot lets in, in the order releases let
        waiters in (priority, then arrival); None if it does not wait in
        that line. One count over the store's index of the line."""
        return await self._query_store().queue_position(queue, run_id, seq)
