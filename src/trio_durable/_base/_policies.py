"""Policies a registration carries: how a step is retried (`Retry`), the
flow-control queues (`FlowQueue`) that limit steps fleet-wide, and how a
workflow's runs follow its builds (`Versioning`)."""

from __future__ import annotations

import random
from typing import Final, Literal, final

import attrs

from ._bounds import is_finite
from ._controls import RateLimit
from ._exceptions import RegistrationError

Versioning = Literal["pinned", "auto_upgrade"]
"""How a workflow's runs follow the builds of the workers
(docs/deployments.md): ``pinned`` stays on the build it started on,
``auto_upgrade`` moves to its workflow's current build at each turn."""

VERSIONINGS: Final[tuple[Versioning, ...]] = ("pinned", "auto_upgrade")


def finite(name: str, value: float, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not is_finite(value):
        raise RegistrationError(f"{name} must be a finite number, not {value!r}")
    if value < minimum:
        raise RegistrationError(f"{name} must be >= {minimum}, not {value!r}")
    return float(value)


@final
@attrs.define(frozen=True)
class Retry:
    """How a step is retried.

    Attempt ``n`` (counting from 1) that fails is followed, if attempts
    remain, by a wait of ``min(max_backoff, backoff * 2 ** (n - 1))``, scaled
    by a factor drawn uniformly from ``[1 - jitter, 1 + jitter]`` out of the
    engine's seeded random source. A `FatalError`, or any exception whose
    ``retryable`` attribute is False, is never retried.

    Attributes:
      attempts: How many attempts in all (1 means no retry).
      backoff: The first wait, in seconds.
      max_backoff: The cap on any wait, in seconds.
      jitter: The fraction by which a wait may vary (0 to 1).

    Raises:
      RegistrationError: An argument is out of range.
    """

    attempts: int = 3
    backoff: float = 1.0
    max_backoff: float = 60.0
    jitter: float = 0.1

    def __attrs_post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise RegistrationError(
                f"Retry attempts must be a positive integer, not {self.attempts!r}"
            )
        finite("Retry backoff", self.backoff)
        finite("Retry max_backoff", self.max_backoff)
        if not 0.0 <= finite("Retry jitter", self.jitter) <= 1.0:
            raise RegistrationError(f"Retry jitter must be between 0 and 1, not {self.jitter!r}")

    def delay(self, failed_attempt: int, rng: random.Random) -> float:
        """The wait after attempt ``failed_attempt`` (1-based) failed."""
        base = min(self.max_backoff, self.backoff * 2.0 ** min(failed_attempt - 1, 64))
        if self.jitter:
            base *= rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return max(0.0, base)


NO_RETRY: Final = Retry(attempts=1)


@final
@attrs.define(frozen=True)
class FlowQueue:
    """A flow-control queue: at most ``concurrency`` of its steps run at once
    across the whole fleet, higher ``priority`` admitted first, and, with a
    ``rate_limit``, at most so many of them sent per period.

    Made by `App.queue`. Admission state lives in the store, so every engine
    sharing the store shares the limit.
    """

    name: str
    concurrency: int
    priority: int = 0
    rate_limit: RateLimit | None = None
