"""On-error routing: handing a failed run to a handler workflow.

A workflow may declare routes, ``OnError(code, workflow=handler)`` and at
most one catch-all ``OnError(workflow=handler)``. When a run fails with a
code that a route matches, the run is not ended: it hands off. The handler
starts as a child run ``<run>.onError.<attempt>`` with the input
``{run_id, workflow, input, error}``, the handoff is recorded as a checkpoint
at seq ``HANDOFF_BASE + attempt`` (past any seq a body reaches) that the
handler's end settles, and the run is tagged ``onError:<code>`` (or
``onError:*``). From then on every turn of the run only follows the handler:
the run ends as its handler ends.

`Engine.retry` retires handoffs: each stays in the timeline renamed
``onError:retried:<handler id>``, is never followed again, and the next
failure hands off to ``<run>.onError.<attempt + 1>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final, final

import attrs

from ._exceptions import RegistrationError
from ._index_text import refuse_nul
from ._records import Checkpoint, ErrorInfo, Run

HANDOFF_BASE: Final = 1_000_000_000
"""Handoffs sit at seqs from here on: past every seq a body can reach."""

NEVER_ROUTED: Final = frozenset({"non_determinism", "nested_workflow_call"})
"""Codes that mark a broken deploy or program, never handed to a handler."""

RETIRED_PREFIX: Final = "onError:retried:"
"""The name a retired handoff takes (followed by its handler's id). Its
handler, detached from the run, settles nothing: a handoff still pending
then stays so, which `Store.list_stalled_runs` looks past."""
TAG_PREFIX: Final = "onError:"


@final
@attrs.define(frozen=True)
class OnError:
    """A route from a failure's code to a handler workflow.

    ``OnError("card_declined", workflow="refund")`` routes failures with that
    code; ``OnError(workflow="page_oncall")`` routes every other failure.

    Attributes:
      code: The error code to match, or None for the catch-all.
      workflow: The handler workflow's name. It receives one argument, a
        dict ``{"run_id", "workflow", "input", "error"}`` where ``error`` is
        ``{"message", "code"?, "details"?}``.
    """

    code: str | None = None
    workflow: str = attrs.field(kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.code is not None and (not isinstance(self.code, str) or not self.code):
            raise RegistrationError(
                f"an on-error code must be a non-empty string, not {self.code!r}"
            )
        # The code names the route in the run's tags (`on_error_tag`).
        refuse_nul("an on-error code", self.code, RegistrationError)
        if not isinstance(self.workflow, str) or not self.workflow:
            raise RegistrationError(
                f"an on-error route needs a handler workflow name, not {self.workflow!r}"
            )
        refuse_nul("an on-error handler's name", self.workflow, RegistrationError)

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "workflow": self.workflow}


def check_on_error_routes(workflow: str, routes: Sequence[OnError]) -> tuple[OnError, ...]:
    """Validate a workflow's routes: at most one per code, one catch-all.

    Raises:
      RegistrationError: A route is not an `OnError`, or two share a code.
    """
    if isinstance(routes, OnError):
        routes = [routes]
    seen: dict[str | None, OnError] = {}
    for route in routes:
        if not isinstance(route, OnError):
            raise RegistrationError(
                f"on_error of workflow {workflow!r} takes td.OnError routes, not {route!r}"
            )
        if route.code in seen:
            what = "catch-all route" if route.code is None else f"route for code {route.code!r}"
            raise RegistrationError(
                f"workflow {workflow!r} has a second {what} "
                f"(to {route.workflow!r}; the first goes to {seen[route.code].workflow!r})"
            )
        seen[route.code] = route
    return tuple(routes)


def pick_on_error_route(routes: Sequence[OnError], error: ErrorInfo) -> OnError | None:
    """The route a failure takes: its code's, else the catch-all, else none.
    Codes in `NEVER_ROUTED` are never routed."""
    if error.code in NEVER_ROUTED:
        return None
    by_code = {route.code: route for route in routes}
    if error.code is not None and error.code in by_code:
        return by_code[error.code]
    return by_code.get(None)


def handoffs(checkpoints: dict[int, Checkpoint]) -> list[Checkpoint]:
    """A run's handoff checkpoints (retired ones too), oldest first."""
    return [checkpoints[seq] for seq in sorted(checkpoints) if seq >= HANDOFF_BASE]


def active_handoff(checkpoints: dict[int, Checkpoint]) -> Checkpoint | None:
    """The handoff the run follows now, if any."""
    live = [cp for cp in handoffs(checkpoints) if not cp.name.startswith(RETIRED_PREFIX)]
    return live[-1] if live else None


def handler_input(run: Run, error: ErrorInfo) -> str:
    """The handler's arguments: one dict describing the failed run."""
    return json.dumps(
        [
            {
                "run_id": run.id,
                "workflow": run.workflow,
                "input": json.loads(run.input),
                "error": error.to_json(),
            }
        ],
        separators=(",", ":"),
    )


def on_error_tag(route: OnError) -> str:
    return f"{TAG_PREFIX}{'*' if route.code is None else route.code}"


def without_on_error_tags(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(tag for tag in tags if not tag.startswith(TAG_PREFIX))


_CHILD: Final = re.compile(r"^(?P<parent>.+)\.(?:child\.\d+|onError\.\d+|all\.\d+\.\d+)$")


def parent_of(run_id: str) -> str | None:
    """The parent of a run id the engine made, or None for any other id.

    Engine-made ids are ``<parent>.child.<seq>`` (a child run),
    ``<parent>.all.<first seq>.<index>`` (a fan member) and
    ``<parent>.onError.<attempt>`` (an on-error handler).
    """
    match = _CHILD.match(run_id)
    return None if match is None else match.group("parent")


def lineage(run_id: str) -> list[str]:
    """``run_id`` and its engine-made ancestors, the root last."""
    chain = [run_id]
    while (parent := parent_of(chain[-1])) is not None:
        chain.append(parent)
    return chain
