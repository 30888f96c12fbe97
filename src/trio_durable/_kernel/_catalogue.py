"""The catalogue: what live workers announce about workflows and steps an
engine holds no code for.

A workflow the engine does not register, but that live workers announce, is
served by convention: its decision tasks go to the group its announcers
serve it on, and its on-error routes are the ones they announce for the
run's version, when they all agree. Steps are looked up the same way (their
retry policy, timeout and flow-control queue).

Every lookup reads the announcements through one cache, refreshed at most
every `CACHE_SECONDS` of Trio's clock: a burst of lookups (a burst of failed
runs, say) costs one broker read, and lookups made while a read is under
way wait for it and share it.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any, Final, final

import trio

from .._base._exceptions import RegistrationError
from .._base._on_error import OnError
from .._base._policies import FlowQueue
from .._base._records import DEFAULT_NAMESPACE, LATEST_VERSION
from .._brokers._base import BrokerError, WorkerDescriptor

if TYPE_CHECKING:
    from .._brokers._base import Broker

logger = logging.getLogger("trio_durable")

CACHE_SECONDS: Final = 5.0
"""How long one read of the announcements answers lookups, in seconds of
Trio's clock."""

FAILED_READ_SECONDS: Final = 1.0
"""How long a failed read answers lookups (as no announcements at all):
short, so a broker that comes back is seen soon, yet a burst of lookups
against a broker that is down costs one read a second, not one each."""


@final
class Catalogue:
    """Live workers' announcements of workflows and steps, read through a
    cache.

    Args:
      broker: Where workers announce themselves.
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._lock = trio.Lock()
        self._descriptors: tuple[WorkerDescriptor, ...] = ()
        self._read_at: float | None = None
        self._fresh_for = CACHE_SECONDS
        # Bumped by `invalidate`: a read that began before it does not
        # refresh the cache when it ends.
        self._generation = 0

    def invalidate(self) -> None:
        """Forget what was read: the next lookup reads the announcements."""
        self._read_at = None
        self._generation += 1

    def _cached(self) -> tuple[WorkerDescriptor, ...] | None:
        if self._read_at is None or trio.current_time() - self._read_at >= self._fresh_for:
            return None
        return self._descriptors

    async def descriptors(self) -> tuple[WorkerDescriptor, ...]:
        """The live workers' descriptors, by instance id, as last read (read
        again when the last read is `CACHE_SECONDS` old). A broker that
        cannot be read counts as no workers."""
        cached = self._cached()
        if cached is not None:
            await trio.lowlevel.checkpoint()
            return cached
        async with self._lock:
            # Whoever held the lock may have just read them for everyone
            # waiting on it.
            cached = self._cached()
            if cached is not None:
                return cached
            generation = self._generation
            started = trio.current_time()
            try:
                found = await self._broker.worker_descriptors()
            except BrokerError as exc:
                logger.warning("cannot read worker announcements: %s", exc)
                found, fresh_for = [], FAILED_READ_SECONDS
            else:
                fresh_for = CACHE_SECONDS
            descriptors = tuple(sorted(found, key=lambda d: d.instance_id))
            if generation == self._generation:
                # Timed from the read's start: what it returned is at least
                # that old.
                self._descriptors = descriptors
                self._read_at = started
                self._fresh_for = fresh_for
            return descriptors

    async def announces(self, workflow: str) -> bool:
        """Whether a live worker announces serving ``workflow``'s decision
        tasks. Not found in what was read, the announcements are read again
        if that read is more than `FAILED_READ_SECONDS` old: a worker may
        have started since."""
        if any(_serves(d, workflow) for d in await self.descriptors()):
            return True
        if self._read_at is not None and trio.current_time() - self._read_at < FAILED_READ_SECONDS:
            return False
        self.invalidate()
        return any(_serves(d, workflow) for d in await self.descriptors())

    async def served(self, workflow: str, version: str, namespace: str) -> str | None:
        """The group route to send ``workflow``'s decision tasks to.

        Taken from the live workers that announce a group for the workflow
        (they serve it) and consume that group's route in ``namespace``
        (``<group>``, or ``<group>@<namespace>`` outside the default
        namespace). For a ``version`` other than `LATEST_VERSION` (any
        version), an announcer must list that version. If announcers serve
        it on different groups (a rollout), the route most of them serve
        wins, ties to the first by name.

        Returns:
          The group route, or None when no live worker serves it there.
        """
        routes: Counter[str] = Counter()
        for d in await self.descriptors():
            entry = d.workflows.get(workflow)
            if not isinstance(entry, dict) or not isinstance(entry.get("group"), str):
                continue
            if version != LATEST_VERSION and version not in _versions(entry):
                continue
            group: str = entry["group"]
            # The route as `_dispatch.group_route` spells it for a step.
            route = group if namespace == DEFAULT_NAMESPACE else f"{group}@{namespace}"
            if route in d.groups:
                routes[route] += 1
        if not routes:
            return None
        return min(routes, key=lambda route: (-routes[route], route))

    async def on_error_routes(self, workflow: str, version: str) -> tuple[OnError, ...] | str:
        """The on-error routes live workers announce for ``workflow`` at
        ``version`` (for `LATEST_VERSION`, each announcer's version
        registered last).

        Announcers of other versions are ignored. When those of the version
        announce different route sets (a rollout, or a misconfigured
        worker), no set can be trusted.

        Returns:
          The one route set they agree on (empty when no live worker
          announces the workflow at that version), or, when they disagree,
          why no route can be used.
        """
        said: dict[str, list[str]] = {}
        for d in await self.descriptors():
            entry = d.workflows.get(workflow)
            if not isinstance(entry, dict):
                continue
            versions = _versions(entry)
            announced = versions[-1:] if version == LATEST_VERSION else [version]
            if not announced or announced[0] not in versions:
                continue
            by_version = entry.get("routes")
            # A worker from before per-version routes announces its
            # versions' routes together only.
            routes = (
                by_version.get(announced[0], [])
                if isinstance(by_version, dict)
                else entry.get("on_error", [])
            )
            said.setdefault(_canonical(routes), []).append(d.instance_id)
        if not said:
            return ()
        if len(said) > 1:
            sets = "; ".join(f"{', '.join(who)}: {value}" for value, who in sorted(said.items()))
            return (
                f"live workers announce different on-error routes for {workflow!r}"
                f" version {version or 'latest'!r}: {sets}"
            )
        [value] = said
        try:
            return tuple(
                OnError(route.get("code"), workflow=route.get("workflow"))
                for route in json.loads(value)
            )
        except (AttributeError, TypeError, RegistrationError) as exc:
            return f"live workers announce malformed on-error routes for {workflow!r}: {exc}"

    async def step(self, name: str) -> dict[str, Any] | None:
        """The step ``name`` as live workers announce it (``group``,
        ``requires``, ``retry``, ``timeout``, ``queue``; see
        `WorkerDescriptor`), from the first announcer by instance id, or
        None if no live worker serves it."""
        for d in await self.descriptors():
            entry = d.steps.get(name)
            if isinstance(entry, dict):
                return entry
        return None

    async def queue(self, name: str) -> FlowQueue | None:
        """The flow-control queue ``name`` as live workers announce it with
        a step that goes through it (the first such announcement by
        instance id), or None if none does."""
        for d in await self.descriptors():
            for entry in d.steps.values():
                spec = entry.get("queue") if isinstance(entry, dict) else None
                if not isinstance(spec, dict) or spec.get("name") != name:
                    continue
                concurrency, priority = spec.get("concurrency"), spec.get("priority", 0)
                if (
                    isinstance(concurrency, int)
                    and not isinstance(concurrency, bool)
                    and concurrency >= 1
                    and isinstance(priority, int)
                    and not isinstance(priority, bool)
                ):
                    return FlowQueue(name=name, concurrency=concurrency, priority=priority)
        return None


def _versions(entry: dict[str, Any]) -> list[str]:
    """The versions a workflow's entry lists; none if it is malformed (an
    announcement of some other program must not break a lookup)."""
    versions = entry.get("versions")
    if not isinstance(versions, list):
        return []
    return [v for v in versions if isinstance(v, str)]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _serves(descriptor: WorkerDescriptor, workflow: str) -> bool:
    entry = descriptor.workflows.get(workflow)
    return isinstance(entry, dict) and isinstance(entry.get("group"), str)
