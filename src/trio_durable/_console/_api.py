"""The JSON API: runs, a run's detail, history and fan pages, the fleet,
the flow-control queues, and the actions on a run."""

from __future__ import annotations

from starlette.routing import BaseRoute


def api_routes() -> list[BaseRoute]:
    """The routes under ``/api`` and ``/metrics``."""
    return []
