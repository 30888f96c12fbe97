"""The webhook and breakpoint routes: ``POST /hooks/{token}`` and the
breakpoint actions."""

from __future__ import annotations

from starlette.routing import BaseRoute


def hook_routes() -> list[BaseRoute]:
    """The routes of webhooks and breakpoints."""
    return []
