"""``--http HOST:PORT`` of the ``engine`` and ``worker`` processes (the
face itself: `_front._health`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .._base._exceptions import UsageError
from .._front._health import check_address


def _address(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[str, int] | None:
    if value is None:
        return None
    try:
        return check_address(value, "--http")
    except UsageError:
        raise click.BadParameter(
            f"give HOST:PORT (such as 127.0.0.1:9464, or port 0 for any free one), not {value!r}"
        ) from None


def http_option(what: str) -> Callable[[Any], Any]:
    """``--http HOST:PORT``: serve `/healthz`, `/readyz` and `/metrics`."""
    return click.option(
        "--http",
        "http_address",
        metavar="HOST:PORT",
        callback=_address,
        help=f"Serve /healthz, /readyz ({what}) and /metrics on this address.",
    )
