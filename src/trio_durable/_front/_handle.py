"""The handle `Engine.start` returns: the run as stored, and its typed result."""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar, final

import attrs

from .._base._records import Run

R = TypeVar("R")


class RunResults(Protocol):
    """What a `RunHandle` reads its run's result from: the engine that
    started it, or anything else that can wait for a run by id."""

    async def result(self, run_id: str) -> Any:
        """Wait until the run ends and return its output (see `Engine.result`)."""
        ...


@final
@attrs.define(frozen=True, kw_only=True)
class RunHandle(Run, Generic[R]):
    """A run just started, typed by its workflow's return type ``R``.

    Returned by `Engine.start`. It is the `Run` as stored when ``start``
    returned (so ``handle.id``, ``handle.status`` and every other field read
    as on a `Run`, frozen at that moment), plus `RunHandle.result`, which
    waits for the run's end and returns its output as an ``R``. Read the
    current row with `Engine.get`.

    Two handles are equal when their `Run` fields are; a handle never equals
    a plain `Run`.
    """

    _results: RunResults = attrs.field(eq=False, repr=False)

    @classmethod
    def of(cls, run: Run, results: RunResults) -> RunHandle[Any]:
        """The handle of ``run``, whose result ``results`` waits for."""
        fields = {field.name: getattr(run, field.name) for field in attrs.fields(Run)}
        return cls(results=results, **fields)

    async def result(self) -> R:
        """Wait until the run ends and return its output, structured as the
        workflow's return annotation.

        Raises:
          RunFailed: The run failed or is dead (`RunCancelled` if it was
            cancelled); the error's message, code and details are the
            exception's.
        """
        value: R = await self._results.result(self.id)
        return value
