"""The flags of ``trio-durable engine`` for the options of `open_engine`:
each field of `EngineOptions` that declares a flag gets one, passed to the
command under the field's name, read as `_ENGINE_FLAGS` says (its type,
its callback, its help)."""

from __future__ import annotations

import math
import os
import secrets
import socket
from typing import Any, Final

import attrs
import click

from .._kernel._engine_options import EngineOptions
from .._stores._blob_store import BLOBS_ENV
from ._common import F, names
from ._values import RetentionSpec, Seconds, whole

WEBHOOK_SECRET_ENV: Final = "TRIO_DURABLE_WEBHOOK_SECRET"

MAX_CONCURRENCY: Final = 65535
"""The most tasks a worker runs at once from the command line (a broker's
prefetch count is a 16-bit number)."""

_ID_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:@")


def default_id(kind: str) -> str:
    """``<kind>-<host>-<pid>-<4 hex>``: an operator can tell from a lease's
    owner or a worker's announcement which process it is; the random end
    keeps two processes apart that share a host name and a pid (containers)."""
    host = "".join(c if c in _ID_CHARACTERS else "-" for c in socket.gethostname())[:200]
    return f"{kind}-{host or 'host'}-{os.getpid()}-{secrets.token_hex(2)}"


def _redispatch_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[float, int] | None:
    """``--remote-redispatch SECONDS,MAXIMUM`` as ``(seconds, maximum)``."""
    if value is None:
        return None
    seconds_text, comma, maximum_text = value.partition(",")
    try:
        seconds, maximum = float(seconds_text), int(maximum_text)
    except ValueError:
        seconds, maximum = math.nan, -1
    if not comma or not (0 < seconds < math.inf) or maximum < 0:
        raise click.BadParameter(
            f"give SECONDS,MAXIMUM: seconds a positive number, maximum an integer >= 0"
            f" (such as 300,3), not {value!r}"
        )
    return seconds, maximum


def _secret(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--webhook-secret``: checked here (`open_engine` would refuse it
    only once the app is loaded)."""
    if value is not None and len(value.encode()) < 16:
        raise click.BadParameter("give a secret of at least 16 bytes")
    return value


def _names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    return names(value)


def _engine_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    return value or default_id("engine")


_ENGINE_FLAGS: Final[dict[str, dict[str, Any]]] = {
    "engine_id": {
        "metavar": "ID",
        "callback": _engine_id,
        "help": "The owner name of its leases; unique per store.",
    },
    "seed": {
        "type": int,
        "help": "Seeds the engine's random source (its default id, run ids, retry jitter).",
    },
    "timer_batch_size": {
        "type": whole(1),
        "show_default": True,
        "help": "How many due runs the poller takes from the store at a time.",
    },
    "lease_ttl": {"type": Seconds(), "show_default": True, "help": "Seconds a run's lease lasts."},
    "reconcile_interval": {
        "type": Seconds(),
        "show_default": True,
        "help": "Seconds between scans of the store for due runs when no timer is nearer.",
    },
    "result_poll_interval": {
        "type": Seconds(),
        "show_default": True,
        "help": "Seconds between reads of a run's end, for a store that announces no writes.",
    },
    "max_recoveries": {
        "type": whole(0),
        "show_default": True,
        "help": "Takeovers of a run from engines whose lease lapsed before it is marked dead.",
    },
    "serve": {
        "multiple": True,
        "metavar": "GROUP",
        "callback": _names,
        "help": "A group route to run a worker for inside the engine (repeat it, or separate"
        " with commas).",
    },
    "worker_concurrency": {
        "type": whole(1, MAX_CONCURRENCY),
        "show_default": True,
        "help": "Tasks the worker inside the engine runs at once (with --serve).",
    },
    "capabilities": {
        "multiple": True,
        "metavar": "NAME",
        "callback": _names,
        "help": "What the worker inside the engine offers to steps with requires= (with --serve).",
    },
    "build_id": {
        "metavar": "ID",
        "help": "The build the worker inside the engine announces (default: the app's"
        " registration hash).",
    },
    "blocked_recheck": {
        "type": Seconds(),
        "show_default": True,
        "help": "Seconds between checks of a step no live worker can take (code blocked).",
    },
    "traceback_limit": {
        "type": whole(0),
        "show_default": True,
        "help": "Characters of a failed attempt's traceback kept in the history (0: none).",
    },
    "retention": {
        "type": RetentionSpec(),
        "help": "Prune ended runs and event records older than an age per name, as"
        " td.Retention: completed, failed, cancelled, terminated, dead, events (an age like 90s, 15m,"
        " 12h, 7d, 2w, or forever), interval (an age), batch (a whole number); say"
        " completed=7d,failed=30d. Off by default: every run is kept.",
    },
    "remote_redispatch": {
        "metavar": "SECONDS,MAXIMUM",
        "callback": _redispatch_option,
        "help": "Send a remote step again, as a new attempt, when no result came SECONDS after"
        " it was sent, at most MAXIMUM times, then fail it with code lost; it applies to steps"
        " already out when the engine starts too. Off by default (a durable broker keeps its"
        " tasks; this guards against one that loses them).",
    },
    "metrics_interval": {
        "type": Seconds(),
        "show_default": True,
        "help": "Seconds between reads of the flow-control queues' depths, for the metrics.",
    },
    "webhook_secret": {
        "metavar": "SECRET",
        "envvar": WEBHOOK_SECRET_ENV,
        "show_envvar": True,
        "callback": _secret,
        "help": "The secret webhook tokens are derived from (at least 16 bytes), the same on"
        " every engine; set it in the environment or the config file, not on the command line,"
        " which every user of the host sees. Default: one kept in the store.",
    },
    "blobs": {
        "metavar": "DIR",
        "envvar": BLOBS_ENV,
        "show_envvar": True,
        "help": "A directory for payloads longer than --blob-threshold (a td.LocalBlobStore).",
    },
    "blob_threshold": {
        "type": whole(1),
        "show_default": True,
        "help": "Characters over which a payload goes to --blobs.",
    },
    "blob_grace": {
        "type": click.FloatRange(min=0),
        "show_default": True,
        "help": "Seconds a blob no run refers to is kept by pruning.",
    },
}
"""How the command reads each option of `open_engine` that has a flag: the
flag, the name and the default come from the option's declaration
(`EngineOptions`), in its order."""


def engine_option_flags(command: F) -> F:
    """The flags of `EngineOptions`' fields that declare one, each passed to
    the command under the field's name."""
    for field in reversed(attrs.fields(EngineOptions)):
        flag = field.metadata["declared"].cli
        if flag is not None:
            option = click.option(
                flag, field.name, default=field.default, **_ENGINE_FLAGS[field.name]
            )
            command = option(command)
    return command
