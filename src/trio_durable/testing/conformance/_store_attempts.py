"""Store checks of attempt times: each failed attempt's start and end, kept
on its error (`ErrorInfo.started_at`, `ErrorInfo.finished_at`) through
every write that records errors, and errors without times (rows written
before attempts had times) read back without them."""

from __future__ import annotations

from collections.abc import Iterable

from ..._base._records import ErrorInfo
from ..._stores._ops import PutCheckpoint, RescheduleCheckpoint, SettleCheckpoint, UpdateRun
from ._store_support import OpenStore, StoreFactory, fresh_store, make_checkpoint, make_run


def _times(errors: Iterable[ErrorInfo | None]) -> list[tuple[float | None, float | None] | None]:
    # Attempt times take no part in comparing errors: compared here apart.
    return [None if e is None else (e.started_at, e.finished_at) for e in errors]


async def check_attempt_times_are_kept_on_errors(factory: StoreFactory | OpenStore) -> None:
    """An error's attempt times are kept by a put, a reschedule, a settle
    that appends the last attempt's error, and on a run's error; an error
    without them reads back without them."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        first = ErrorInfo(message="down", code="unavailable", started_at=10.25, finished_at=11.5)
        untimed = ErrorInfo(message="from a release before")
        await store.apply(
            [
                PutCheckpoint(
                    make_checkpoint(
                        seq=1, kind="remote", attempts=2, errors=(untimed, first), group="g"
                    )
                ),
                PutCheckpoint(
                    make_checkpoint(
                        seq=2,
                        kind="local",
                        status="failed",
                        attempts=1,
                        error=first,
                        errors=(first,),
                    )
                ),
            ]
        )
        [one, two] = await store.get_checkpoints("r1")
        assert _times(one.errors) == [(None, None), (10.25, 11.5)]
        assert _times([two.error, *two.errors]) == [(10.25, 11.5)] * 2

        second = ErrorInfo(message="still down", started_at=20.0, finished_at=20.125)
        [rescheduled] = await store.apply([RescheduleCheckpoint("r1", 1, 2, second, wake_at=30.0)])
        assert _times(rescheduled.errors) == [(None, None), (10.25, 11.5), (20.0, 20.125)]
        last = ErrorInfo(message="gave up", code="final", started_at=30.5, finished_at=31.0)
        [settled] = await store.apply(
            [SettleCheckpoint("r1", 1, "failed", error=last, attempt=3, append_error=True)]
        )
        expected = [(None, None), (10.25, 11.5), (20.0, 20.125), (30.5, 31.0)]
        assert _times(settled.errors) == expected
        assert _times([settled.error]) == [(30.5, 31.0)]
        [read, _] = await store.get_checkpoints("r1")
        assert _times(read.errors) == expected
        assert _times([read.error]) == [(30.5, 31.0)]

        await store.apply([UpdateRun("r1", {"status": "failed", "error": last})])
        run = await store.get_run("r1")
        assert run is not None
        assert _times([run.error]) == [(30.5, 31.0)]


ATTEMPTS_CHECKS = (check_attempt_times_are_kept_on_errors,)
