"""TEMP stand-in (replaced by the catalogue branch)."""

from __future__ import annotations

from typing import Any

from ._app import FlowQueue
from ._brokers._base import Broker
from ._on_error import OnError

CACHE_SECONDS = 5.0


class Catalogue:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def served(self, workflow: str, version: str, namespace: str) -> str | None:
        for d in await self._broker.worker_descriptors():
            info = d.workflows.get(workflow)
            if info is None or info.get("group") is None:
                continue
            group = info["group"]
            route = group if namespace == "default" else f"{group}@{namespace}"
            if route in d.groups and (not version or version in info.get("versions", [])):
                return route
        return None

    async def on_error_routes(self, workflow: str, version: str) -> tuple[OnError, ...] | str:
        for d in await self._broker.worker_descriptors():
            info = d.workflows.get(workflow)
            if info:
                return tuple(
                    OnError(r["code"], workflow=r["workflow"]) for r in info.get("on_error", [])
                )
        return ()

    async def queue(self, name: str) -> FlowQueue | None:
        return None

    async def step(self, name: str) -> dict[str, Any] | None:
        return None
