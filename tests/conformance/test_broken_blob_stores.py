"""The blob store conformance suite fails blob stores that break the
protocol: for each check of `BLOB_STORE_CHECKS` (each a family of its
own), a blob store with one fault (tests/conformance/broken_blob_stores.py)
makes it fail with an assertion, as it would for an outside blob store with
that bug. If a check stopped checking its property, its test here fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
from broken_blob_stores import (
    AppendsParts,
    BlobStoreWrapper,
    DeleteIgnored,
    KeepsSameSize,
    ListIgnoresAfter,
    MissingIsEmpty,
    ReturnsOtherBytes,
    ServesUnchecked,
    WritesOnce,
    factory_of,
)
from suite_outcomes import assert_caught

import trio_durable as td
from trio_durable.testing.conformance import BLOB_STORE_CHECKS, check_blob_store, run_checks

# (the fault, its blob store, the checks that must catch it)
CASES: Final = [
    pytest.param(
        ReturnsOtherBytes, ["check_a_blob_reads_back_as_written"], id="returns-other-bytes"
    ),
    pytest.param(
        MissingIsEmpty, ["check_a_missing_blob_raises_blob_not_found"], id="missing-is-empty"
    ),
    pytest.param(WritesOnce, ["check_a_put_again_refreshes_the_stamp"], id="stamp-never-moves"),
    pytest.param(DeleteIgnored, ["check_deleted_blobs_are_gone"], id="delete-ignored"),
    pytest.param(ListIgnoresAfter, ["check_list_pages_by_key"], id="list-ignores-after"),
    pytest.param(
        AppendsParts,
        ["check_concurrent_puts_of_one_blob_leave_it_whole"],
        id="concurrent-puts-append",
    ),
    pytest.param(
        ServesUnchecked, ["check_a_corrupted_blob_raises_blob_corrupted"], id="serves-unchecked"
    ),
    pytest.param(KeepsSameSize, ["check_a_put_repairs_a_corrupted_blob"], id="keeps-same-size"),
]


@pytest.mark.parametrize(("broken", "catching"), CASES)
async def test_the_blob_store_suite_catches(
    broken: Callable[[td.LocalBlobStore], BlobStoreWrapper], catching: list[str], tmp_path: Path
) -> None:
    results = await run_checks(BLOB_STORE_CHECKS, factory_of(broken, tmp_path))
    assert_caught(results, catching)


async def test_the_faithful_wrapper_passes(tmp_path: Path) -> None:
    results = await check_blob_store(factory_of(BlobStoreWrapper, tmp_path))
    assert [(r.check, r.outcome) for r in results] == [
        (check.__name__, "passed") for check in BLOB_STORE_CHECKS
    ]


async def test_check_blob_store_raises_the_first_failure(tmp_path: Path) -> None:
    with pytest.raises(AssertionError):
        await check_blob_store(factory_of(ReturnsOtherBytes, tmp_path))
