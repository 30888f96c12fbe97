"""`FrontCore`: what a front end (`Engine`, `Client`) is made of, as the
methods they share (`_front_end`, the `_front_*` families) see it."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, final

import attrs

from .._base._records import DEFAULT_TRACEBACK_LIMIT

if TYPE_CHECKING:
    from .._base._clock import Clock
    from .._base._records import Run
    from .._brokers._base import Broker
    from .._features.messages._published import AskKind
    from .._features.messages._streams import StreamWaiters
    from .._kernel._endings import Endings
    from .._kernel._wakers import Waker
    from .._stores._base import Store
    from ._app import App


@final
@attrs.define(frozen=True, kw_only=True)
class FrontCore:
    """One front end's parts.

    Attributes:
      store: Its store.
      app: The app it checks starts against (None: a client opened
        without one).
      types: The app outputs are structured with (for a client without
        an app, one with no workflows: outputs come as plain JSON).
      clock: Its clock.
      origin: Its id, which its writes carry (an engine's or a client's).
      rng: Its seeded random source (ids it makes up).
      waker: How a run its writes give something to do is woken.
      endings: Where its callers wait for runs' ends.
      streams: Where its stream readers wait.
      poll_interval: Seconds between reads of a run that nothing
        announces (`math.inf` on a store that announces writes).
      broker: Its broker (None: a client opened without one).
      check_open: Raises once the front end is closed (`EngineClosedError`;
        a client's `trio.ClosedResourceError`).
      traceback_limit: How much of a handler's traceback an error keeps.
      ask_query: Has the workers of a remote workflow whose body the app
        lacks answer a query of its run or validate an update (an
        engine's, see `_remote_queries`; None for a client).
    """

    store: Store
    app: App | None
    types: App
    clock: Clock
    origin: str
    rng: random.Random
    waker: Waker
    endings: Endings
    streams: StreamWaiters
    poll_interval: float
    broker: Broker | None
    check_open: Callable[[], None]
    traceback_limit: int = DEFAULT_TRACEBACK_LIMIT
    ask_query: Callable[[Run, str, list[Any], AskKind], Awaitable[str]] | None = None


class FrontPart:
    """The base of each family of methods `Engine` and `Client` share: it
    holds the front end's parts, and names the two calls the families
    use that `FrontEnd` writes (`get`, `result`)."""

    _core: FrontCore

    async def get(self, run_id: str, *, namespace: str | None = None) -> Run:
        raise NotImplementedError

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        raise NotImplementedError
