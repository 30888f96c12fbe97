"""The options of `App.workflow` that control how its runs start, wait and
end, beyond the body: a whole-run timeout, concurrency keys and singletons,
deduplication of queued starts, rate limits, and the events that start runs
(with debounce). `run_controls` checks them at registration, so a bad option
fails there and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, final

import attrs

from ._bounds import is_finite
from ._exceptions import InvalidArgumentsError, RegistrationError
from ._index_text import refuse_nul

Collect = Literal["last", "all"]

_EVENT_NAME_LIMIT: Final = 200


@final
@attrs.define(frozen=True)
class RateLimit:
    """At most ``starts`` admissions per ``per`` seconds, fleet-wide: for the
    runs of a workflow (``@app.workflow(rate_limit=...)``) or the steps of a
    flow-control queue (``app.queue(..., rate_limit=...)``).

    Attributes:
      starts: How many may be admitted in any window of ``per`` seconds.
      per: The window, in seconds.
    """

    starts: int
    per: float

    def __attrs_post_init__(self) -> None:
        if isinstance(self.starts, bool) or not isinstance(self.starts, int) or self.starts < 1:
            raise RegistrationError(
                f"a rate limit's starts must be an int of at least 1, not {self.starts!r}"
            )
        if not _positive(self.per):
            raise RegistrationError(
                f"a rate limit's period must be a positive number of seconds, not {self.per!r}"
            )


@final
@attrs.define(frozen=True, kw_only=True)
class RunControls:
    """A workflow's run controls, as `App.workflow` took them (checked).

    Attributes:
      timeout: Seconds a run may take from its start before it is cancelled
        with compensation, or None.
      concurrency_key: Maps a run's inputs to its key; at most
        ``max_concurrent`` runs per key execute at once, fleet-wide.
      max_concurrent: The limit per key (1 by default when a key is given).
      singleton: A start while a run with the same key is open returns that
        run instead of starting another.
      dedup_key: Maps a run's inputs to a key; a start while a run with the
        same key is still queued (not yet admitted) returns that run.
      rate_limit: At most so many runs admitted per period, fleet-wide.
      events: The event names whose `Engine.send_event` starts a run.
      debounce: Seconds: events for one key within this window start one run.
      debounce_collect: ``"last"``: the run gets the last payload;
        ``"all"``: the list of every payload of the window.
    """

    timeout: float | None = None
    concurrency_key: Callable[..., str] | None = None
    max_concurrent: int | None = None
    singleton: bool = False
    dedup_key: Callable[..., str] | None = None
    rate_limit: RateLimit | None = None
    events: tuple[str, ...] = ()
    debounce: float | None = None
    debounce_collect: Collect = "last"

    @property
    def admitted(self) -> bool:
        """Whether the workflow's runs wait for admission before their body
        runs (a concurrency key or a rate limit)."""
        return self.concurrency_key is not None or self.rate_limit is not None


NO_CONTROLS: Final = RunControls()


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and is_finite(value)
        and value > 0
    )


def run_controls(
    workflow: str,
    *,
    timeout: float | None = None,
    concurrency_key: Callable[..., str] | None = None,
    max_concurrent: int | None = None,
    singleton: bool = False,
    dedup_key: Callable[..., str] | None = None,
    rate_limit: RateLimit | None = None,
    events: str | Sequence[str] = (),
    debounce: float | None = None,
    debounce_collect: Collect = "last",
) -> RunControls:
    """Check `App.workflow`'s run controls for ``workflow``.

    Raises:
      RegistrationError: An option is out of range or of the wrong type.
    """
    where = f"workflow {workflow!r}"
    if timeout is not None and not _positive(timeout):
        raise RegistrationError(f"{where}: timeout must be a positive number of seconds")
    for label, key_fn in (("concurrency_key", concurrency_key), ("dedup_key", dedup_key)):
        if key_fn is not None and not callable(key_fn):
            raise RegistrationError(f"{where}: {label} must map the run's inputs to a key")
    if max_concurrent is not None:
        if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int):
            raise RegistrationError(f"{where}: max_concurrent must be an int")
        if max_concurrent < 1:
            raise RegistrationError(
                f"{where}: max_concurrent must be at least 1, not {max_concurrent}"
            )
        if concurrency_key is None:
            raise RegistrationError(f"{where}: max_concurrent needs a concurrency_key")
    if singleton and concurrency_key is None:
        raise RegistrationError(f"{where}: singleton needs a concurrency_key")
    if singleton and max_concurrent not in (None, 1):
        raise RegistrationError(f"{where}: a singleton runs one at a time per key")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise RegistrationError(f"{where}: rate_limit must be a td.RateLimit")
    names = (events,) if isinstance(events, str) else tuple(events)
    for name in names:
        if not isinstance(name, str) or not name or len(name) > _EVENT_NAME_LIMIT:
            raise RegistrationError(f"{where}: event name {name!r} is invalid")
        refuse_nul(f"{where}: an event name", name, RegistrationError)
    if debounce is not None:
        if not _positive(debounce):
            raise RegistrationError(f"{where}: debounce must be a positive number of seconds")
        if not names:
            raise RegistrationError(f"{where}: debounce needs the events it applies to")
    if debounce_collect not in ("last", "all"):
        raise RegistrationError(f"{where}: debounce_collect must be 'last' or 'all'")
    return RunControls(
        timeout=None if timeout is None else float(timeout),
        concurrency_key=concurrency_key,
        max_concurrent=(1 if max_concurrent is None else max_concurrent)
        if concurrency_key is not None
        else None,
        singleton=singleton,
        dedup_key=dedup_key,
        rate_limit=rate_limit,
        events=names,
        debounce=None if debounce is None else float(debounce),
        debounce_collect=debounce_collect,
    )


def key_of(key_fn: Callable[..., str], args: tuple[Any, ...], target: str) -> str:
    """A run's key from its inputs (``target`` is ``"workflow 'name'"``),
    checked to be a string.

    Raises:
      InvalidArgumentsError: The function raised, or returned no string or
        one holding a NUL character.
    """
    try:
        key = key_fn(*args)
    except Exception as exc:
        raise InvalidArgumentsError(
            f"{target}: its key function raised {exc!r}", target=target
        ) from exc
    if not isinstance(key, str):
        raise InvalidArgumentsError(
            f"{target}: its key function returned {key!r}, not a str", target=target
        )
    if "\x00" in key:
        # Keys name queues and keyed values: indexed text (see `_index_text`).
        raise InvalidArgumentsError(
            f"{target}: its key function returned {key!r}, which holds a NUL character ('\\x00')",
            target=target,
        )
    return key
