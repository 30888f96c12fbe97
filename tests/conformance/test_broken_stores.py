"""The store conformance suite fails stores that break the protocol: for
each family of checks, a store with one fault (tests/conformance/broken_stores.py)
makes the checks of that family that are about it fail, with an assertion,
as they would for an outside store with that bug. If a check stopped
checking its property, its test here fails.

The suite also reports a check that does not apply as skipped: a store that
is no `RunWatch` takes no announcements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import pytest
from broken_stores import (
    ChokesOnNulInErrors,
    ClaimsAnything,
    CreatesCheckpointsAnyway,
    ForgetsExecutions,
    ForgetsSearchConditions,
    ForgetsTheLastError,
    FrozenStamps,
    HearsItself,
    IgnoresExecutions,
    IgnoresPrefixes,
    LosesErrorUpdates,
    NeverCloses,
    NewestBreakpointFirst,
    NewestSignalFirst,
    OldestFirst,
    OverAdmits,
    PagesFromTheStart,
    PiecemealBatches,
    StaleStatistics,
    StoreWrapper,
    factory_of,
    separate_handles,
)
from suite_outcomes import assert_caught

import trio_durable as td
from trio_durable.testing.conformance import (
    STORE_CHECKS,
    CheckResult,
    StoreCheck,
    StoreFactory,
    check_store,
    run_checks,
)


def family(module: str) -> list[StoreCheck]:
    """The checks of one family: those of one module of the suite."""
    checks = [c for c in STORE_CHECKS if c.__module__.endswith(f".{module}")]
    assert checks, module
    return checks


async def run_family(module: str, factory: StoreFactory) -> list[CheckResult]:
    return await run_checks(family(module), factory)


# (family module, the fault, its store, the checks that must catch it)
CASES: Final = [
    pytest.param(
        "_store_runs",
        PiecemealBatches,
        ["check_failed_status_expectation_rolls_back_the_whole_batch"],
        id="runs-batches-not-atomic",
    ),
    pytest.param(
        "_store_runs",
        LosesErrorUpdates,
        ["check_update_run_changes_fields"],
        id="runs-a-write-lost",
    ),
    pytest.param(
        "_store_checkpoints",
        ClaimsAnything,
        [
            "check_claim_writes_only_a_pending_checkpoint",
            "check_claim_has_exactly_one_winner_among_racers",
        ],
        id="checkpoints-claim-settles-a-settled-checkpoint",
    ),
    pytest.param(
        "_store_runs",
        CreatesCheckpointsAnyway,
        ["check_create_run_writes_its_checkpoints_only_with_the_run"],
        id="runs-a-taken-id-gets-checkpoints",
    ),
    pytest.param(
        "_store_checkpoints",
        ForgetsTheLastError,
        ["check_settle_append_error_adds_the_error_to_errors"],
        id="checkpoints-last-error-not-appended",
    ),
    pytest.param(
        "_store_executions",
        IgnoresExecutions,
        [
            "check_settle_with_an_execution_needs_one_the_checkpoint_holds",
            "check_settle_or_failed_with_needs_the_execution_too",
            "check_reschedule_with_an_execution_needs_one_the_checkpoint_holds",
            "check_unless_rerun_skips_a_rerun_checkpoint",
        ],
        id="executions-ignored",
    ),
    pytest.param(
        "_store_executions",
        ForgetsExecutions,
        [
            "check_checkpoints_keep_their_executions_and_rerun",
            "check_settle_with_an_execution_needs_one_the_checkpoint_holds",
            "check_unless_rerun_skips_a_rerun_checkpoint",
        ],
        id="executions-not-kept",
    ),
    pytest.param(
        "_store_checkpoints",
        ChokesOnNulInErrors,
        ["check_settle_or_failed_with_reads_the_code_of_an_error_holding_nul"],
        id="checkpoints-nul-in-an-error-breaks-settles",
    ),
    pytest.param(
        "_store_checkpoints",
        PiecemealBatches,
        ["check_reschedule_and_conditional_settle_roll_back_with_their_batch"],
        id="checkpoints-batches-not-atomic",
    ),
    pytest.param(
        "_store_queues",
        OverAdmits,
        ["check_admission_respects_the_limit"],
        id="queues-admit-over-the-limit",
    ),
    pytest.param(
        "_store_signals",
        NewestSignalFirst,
        ["check_signals_without_a_waiter_are_buffered_in_order"],
        id="signals-buffered-newest-first",
    ),
    pytest.param(
        "_store_hooks",
        NewestBreakpointFirst,
        ["check_breakpoints_are_added_listed_and_deleted"],
        id="hooks-breakpoints-newest-first",
    ),
    pytest.param(
        "_store_queries",
        OldestFirst,
        ["check_find_runs_filters_and_orders_newest_first"],
        id="queries-runs-oldest-first",
    ),
    pytest.param(
        "_store_queries",
        NeverCloses,
        ["check_queries_after_aclose_raise_closed_resource_error"],
        id="queries-after-close",
    ),
    pytest.param(
        "_store_stamps",
        FrozenStamps,
        ["check_run_stamp_changes_with_every_write_of_the_run"],
        id="stamps-never-change",
    ),
    pytest.param(
        "_store_values",
        IgnoresPrefixes,
        ["check_values_are_listed_by_key"],
        id="values-prefix-ignored",
    ),
    pytest.param(
        "_store_values",
        PagesFromTheStart,
        ["check_values_are_listed_by_key"],
        id="values-after-ignored",
    ),
    pytest.param(
        "_store_values",
        PiecemealBatches,
        ["check_a_failed_value_expectation_rolls_back_the_whole_batch"],
        id="values-batches-not-atomic",
    ),
    pytest.param(
        "_store_search",
        ForgetsSearchConditions,
        ["check_find_runs_filters_by_search_attributes"],
        id="search-conditions-ignored",
    ),
    pytest.param(
        "_store",
        StaleStatistics,
        ["check_statistics_count_rows_read"],
        id="store-statistics-not-counted",
    ),
    pytest.param(
        "_store",
        HearsItself,
        ["check_announcements_reach_the_watches_of_other_writers"],
        id="store-watch-hears-itself",
    ),
    pytest.param(
        "_store",
        NeverCloses,
        ["check_calls_after_aclose_raise_closed_resource_error"],
        id="store-calls-after-close",
    ),
]


@pytest.mark.parametrize(("module", "broken", "catching"), CASES)
async def test_the_store_suite_catches(
    module: str, broken: Callable[[td.MemoryStore], StoreWrapper], catching: list[str]
) -> None:
    results = await run_family(module, factory_of(broken))
    assert_caught(results, catching)


async def test_the_store_suite_catches_two_handles_that_are_two_stores() -> None:
    # Writes through one handle must be seen through the other.
    results = await run_family("_store", separate_handles())
    assert_caught(results, ["check_handles_share_one_store"])


async def test_the_faithful_wrapper_passes_every_check() -> None:
    # The faults above are the wrappers' alone: the plain wrapper of a
    # MemoryStore passes the whole suite.
    results = await run_checks(STORE_CHECKS, factory_of(StoreWrapper))
    assert {r.outcome for r in results} == {"passed"}, [r for r in results if r.outcome != "passed"]
    assert [r.check for r in results] == [c.__name__ for c in STORE_CHECKS]


class NoWatch(StoreWrapper):
    """A store that takes no announcements (is no `RunWatch`)."""

    def __getattr__(self, name: str) -> object:
        if name == "watch":
            raise AttributeError(name)
        return super().__getattr__(name)


ANNOUNCEMENTS: Final = "check_announcements_reach_the_watches_of_other_writers"


async def test_a_store_without_announcements_is_skipped_not_passed() -> None:
    [result] = await run_checks(
        [c for c in STORE_CHECKS if c.__name__ == ANNOUNCEMENTS], factory_of(NoWatch)
    )
    assert result.outcome == "skipped"
    assert "RunWatch" in result.reason
    # The runner of the whole suite reports the skip among the passes.
    outcomes = {r.check: r.outcome for r in await check_store(factory_of(NoWatch))}
    assert outcomes.pop(ANNOUNCEMENTS) == "skipped"
    assert set(outcomes.values()) == {"passed"}


async def test_check_store_raises_the_first_failure() -> None:
    with pytest.raises(AssertionError):
        await check_store(factory_of(OldestFirst))
