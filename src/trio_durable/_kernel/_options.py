"""Options: the settings of an engine and of a worker, checked once by
attrs validators.

`open_engine` and `open_worker` take their settings as keyword arguments
and build one `EngineOptions` (`_engine_options`) or `WorkerOptions` from
them; the validators below refuse a bad value with a `UsageError` that
names the option, and the parts read the checked values from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, TypeGuard, final

import attrs

from .._base._bounds import is_finite
from .._base._exceptions import UsageError
from .._base._keyring import Keyring
from .._base._records import DEFAULT_TRACEBACK_LIMIT
from .._brokers._base import is_broker_safe

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

DEFAULT_TIMER_BATCH_SIZE: Final = 500

DEFAULT_MAX_DELIVERIES: Final = 5
"""How often a task may be delivered before it counts as poison."""

_ID_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:@")


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_finite(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: a positive, finite number of seconds."""
    if not _is_number(value) or not is_finite(value) or value <= 0:
        raise UsageError(f"{attribute.name} must be a positive finite number, not {value!r}")


def at_least_zero(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{attribute.name} must be an integer >= 0, not {value!r}")


def concurrency(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Validator: how many tasks run at once, a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"concurrency must be a positive integer, not {value!r}")


def _at_least_one(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{attribute.name} must be a positive integer, not {value!r}")


def _capabilities(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, str) or not all(is_broker_safe(c) for c in value):
        raise UsageError(f"capabilities must be a list of broker-safe names, not {value!r}")


def check_id(what: str, value: object) -> None:
    """Check a run id, namespace or engine id.

    Raises:
      UsageError: ``value`` is not 1 to 255 characters of letters, digits
        and ``_.-:@``.
    """
    if not isinstance(value, str) or not value or len(value) > 255 or not set(value) <= _ID_CHARS:
        raise UsageError(
            f"{what} must be 1 to 255 characters of letters, digits and '_.-:@', not {value!r}"
        )


def tracing_or_provider(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool) and not callable(getattr(value, "get_tracer", None)):
        raise UsageError(f"tracing must be True, False or a tracer provider, not {value!r}")


def keyring_or_none(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Keyring):
        raise UsageError(f"signing takes a td.Keyring or None, not {type(value).__name__}")


def check_secret(value: object) -> bytes | None:
    """``open_engine``'s ``webhook_secret`` as bytes.

    Raises:
      UsageError: It is not None, bytes or str, or shorter than 16 bytes.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode()
    if not isinstance(value, bytes):
        raise UsageError(f"webhook_secret must be bytes or a str, not {type(value).__name__}")
    if len(value) < 16:
        raise UsageError("webhook_secret must be at least 16 bytes long")
    return value


@final
@attrs.frozen(kw_only=True)
class WorkerOptions:
    """A worker's settings, as `open_worker` takes them.

    A bad value raises `UsageError` when the options are made, as does a
    ``heartbeat`` that is not shorter than ``ttl``.
    """

    concurrency: int = attrs.field(default=16, validator=concurrency)
    heartbeat: float = attrs.field(default=5.0, validator=positive_finite)
    ttl: float = attrs.field(default=15.0, validator=positive_finite)
    max_deliveries: int = attrs.field(default=DEFAULT_MAX_DELIVERIES, validator=_at_least_one)
    traceback_limit: int = attrs.field(default=DEFAULT_TRACEBACK_LIMIT, validator=at_least_zero)
    capabilities: Sequence[str] = attrs.field(default=(), validator=_capabilities)
    tracing: bool | TracerProvider = attrs.field(default=False, validator=tracing_or_provider)
    signing: Keyring | None = attrs.field(default=None, validator=keyring_or_none)

    def __attrs_post_init__(self) -> None:
        if self.heartbeat >= self.ttl:
            raise UsageError(
                f"heartbeat ({self.heartbeat} s) must be shorter than ttl ({self.ttl} s)"
            )
        object.__setattr__(self, "heartbeat", float(self.heartbeat))
        object.__setattr__(self, "ttl", float(self.ttl))


def _console_host(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise UsageError(f"ConsoleOptions.host must be an address or host name, not {value!r}")


def _console_port(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise UsageError(f"ConsoleOptions.port must be an integer from 0 to 65535, not {value!r}")


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a bearer token that a request can match, or
    None if it can.

    A request's ``Authorization`` header loses surrounding spaces, and
    HTTP header values are ASCII: a token with either could never match.
    """
    if not token:
        return "it is empty"
    if token != token.strip():
        return "it has leading or trailing spaces, which an Authorization header loses"
    if not all("!" <= c <= "~" for c in token):
        return "it holds characters outside visible ASCII (! to ~), which no request can send"
    return None


def _console_token(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise UsageError(
            f"ConsoleOptions.token must be a string or None, not {type(value).__name__}"
        )
    problem = token_problem(value)
    if problem is not None:
        raise UsageError(f"ConsoleOptions.token cannot be used: {problem}")


def _origins(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise UsageError(f"ConsoleOptions.cors_origins is a list of origins, not {value!r}")
    if not all(isinstance(origin, str) and origin for origin in value):
        raise UsageError(f"ConsoleOptions.cors_origins must hold origins, not {value!r}")
    return tuple(value)


def _max_body(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BODY_LIMIT:
        raise UsageError(
            f"ConsoleOptions.max_body must be an integer from 1 to {MAX_BODY_LIMIT} bytes,"
            f" not {value!r}"
        )


def _seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not _is_number(value) or not is_finite(value) or value <= 0:
        raise UsageError(
            f"ConsoleOptions.{attribute.name} must be a positive finite number of seconds,"
            f" not {value!r}"
        )


def _webhooks(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"ConsoleOptions.webhooks must be True, False or None, not {value!r}")


def _hosts(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise UsageError(f"ConsoleOptions.allowed_hosts is a list of host names, not {value!r}")
    hosts: list[str] = []
    for host in value:
        if (
            not isinstance(host, str)
            or not host
            or not all("!" <= c <= "~" for c in host)
            or (host != "*" and "*" in host)
        ):
            raise UsageError(
                "ConsoleOptions.allowed_hosts must hold host names or addresses"
                f" (or '*' for any), not {host!r}"
            )
        hosts.append(normal_host(host))
    return tuple(hosts)


def normal_host(host: str) -> str:
    """A host name or address as the console compares them: lower case,
    an IPv6 address without its brackets."""
    host = host.lower()
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


MAX_BODY_LIMIT: Final = 2**40
"""The largest ``ConsoleOptions.max_body`` (1 TiB): a bound, not advice."""

LOOPBACK_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
"""Host names a console answers to by default, besides its ``host``."""


@final
@attrs.frozen(kw_only=True)
class ConsoleOptions:
    """The console an engine serves from its own nursery:
    ``open_engine(app, console=td.ConsoleOptions(port=8080))``; the same
    settings `serve_console`, `console_app` and ``trio-durable console``
    take (docs/console.md).

    It serves the JSON API, the pages and ``/metrics`` of that engine (see
    docs/http-api.md); `Engine.console_url` tells where.

    Attributes:
      host: The address to listen on (loopback by default).
      port: The port; 0 lets the system choose one.
      token: The bearer token actions need; None serves read-only. It
        must be visible ASCII with no surrounding spaces.
      cors_origins: Origins allowed to call the API from a browser; none
        by default (CORS off).
      allowed_hosts: The names and addresses requests may give as their
        ``Host`` (the port aside; ``"*"`` for any); any other is answered
        421 before routing, so a page whose DNS name was rebound to this
        address reads nothing. None: ``host``, ``localhost``,
        ``127.0.0.1`` and ``::1``. `console_app` alone (mounted in your
        own server) checks only the hosts it is given.
      max_body: The most bytes a request's body may hold (1 MiB by
        default); a longer one is answered 413, from its
        ``Content-Length`` before it is read or as it streams in.
      read_timeout: The most seconds a request's body may take to arrive,
        from when its headers did; then it is answered 408 and the
        connection closed.
      idle_timeout: The most seconds a connection may wait for the client:
        for a request's headers to be complete, between two requests, and
        between two pieces of a body (then 408).
      webhooks: Whether ``POST /hooks/{token}`` delivers webhooks. None
        (the default): when the console has a ``token``; a read-only
        console refuses them (403) unless this is True.

    Raises:
      UsageError: A value is malformed.
    """

    host: str = attrs.field(default="127.0.0.1", validator=_console_host)
    port: int = attrs.field(default=8080, validator=_console_port)
    token: str | None = attrs.field(default=None, validator=_console_token, repr=False)
    cors_origins: tuple[str, ...] = attrs.field(default=(), converter=_origins)
    allowed_hosts: tuple[str, ...] | None = attrs.field(default=None, converter=_hosts)
    max_body: int = attrs.field(default=1024 * 1024, validator=_max_body)
    read_timeout: float = attrs.field(default=30.0, validator=_seconds)
    idle_timeout: float = attrs.field(default=10.0, validator=_seconds)
    webhooks: bool | None = attrs.field(default=None, validator=_webhooks)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "read_timeout", float(self.read_timeout))
        object.__setattr__(self, "idle_timeout", float(self.idle_timeout))

    @property
    def hosts(self) -> tuple[str, ...]:
        """The ``Host`` names a served console answers to: ``allowed_hosts``,
        or by default ``host`` and the loopback names."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        return tuple(dict.fromkeys((normal_host(self.host), *LOOPBACK_HOSTS)))

    @property
    def delivers_webhooks(self) -> bool:
        """Whether ``POST /hooks/{token}`` delivers (see ``webhooks``)."""
        return self.token is not None if self.webhooks is None else self.webhooks
