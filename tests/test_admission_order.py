"""Starts of one concurrency key that do not overlap are admitted in start
order, on two engines sharing a memory or SQLite store, whatever starts
overlap beside them (the property of ``admission_order``; PostgreSQL's is
in ``tests/integration/test_concurrency_keys_postgres.py``)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings

import trio_durable as td
from admission_order import WAVES, check_admission_order


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(waves=WAVES)
async def test_starts_that_do_not_overlap_are_admitted_in_order_on_memory(
    waves: Sequence[Sequence[int]],
) -> None:
    store = td.MemoryStore()
    await check_admission_order(store, store, waves)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(waves=WAVES)
async def test_starts_that_do_not_overlap_are_admitted_in_order_on_sqlite(
    waves: Sequence[Sequence[int]],
) -> None:
    # Two openings of one file, as two engine processes would have.
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'order.db'}"
        await check_admission_order(url, url, waves)
