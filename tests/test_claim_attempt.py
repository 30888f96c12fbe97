"""`ClaimCheckpoint` with ``attempt``: a claim made for an attempt that was
superseded meanwhile changes nothing, on every store (and through the
codec's wrapper, which rewrites the checkpoint it carries). The engine
claims a refused send as a retry this way (see `_dispatch`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest

import trio_durable as td
from trio_durable._stores._codec import with_codec
from trio_durable._stores._ops import ClaimCheckpoint, CreateRun, PutCheckpoint

KINDS = ["memory", "sqlite", "codec", "postgres"]


@asynccontextmanager
async def store_of(
    kind: str, tmp_path: Path, real_server: Callable[[str], str]
) -> AsyncIterator[td.Store]:
    if kind == "memory":
        yield td.MemoryStore()
    elif kind == "codec":
        yield with_codec(td.MemoryStore(), td.AesGcmCodec(td.Keyring.single(bytes(range(32)))))
    elif kind == "sqlite":
        async with td.open_store(f"sqlite:///{tmp_path / 'claims.db'}") as store:
            yield store
    else:
        from servers.postgres import scratch_schema

        async with (
            scratch_schema(real_server("postgres")) as url,
            td.open_store(url) as store,
        ):
            yield store


@pytest.mark.parametrize("kind", KINDS)
async def test_a_claim_at_an_attempt_applies_only_at_that_attempt(
    kind: str, tmp_path: Path, real_server: Callable[[str], str]
) -> None:
    async with store_of(kind, tmp_path, real_server) as store:
        cp = td.Checkpoint(
            run_id="r",
            seq=1,
            name="work",
            kind="remote",
            input="[1]",
            attempts=2,
            started_at=10.0,
        )
        await store.apply([CreateRun(td.Run(id="r", workflow="w")), PutCheckpoint(cp)])
        stale = attrs.evolve(cp, attempts=1, started_at=None, wake_at=20.0)
        # Made for attempt 1, which attempt 2 superseded: nothing changes.
        assert await store.apply([ClaimCheckpoint(stale, attempt=1)]) == [False]
        assert await store.get_checkpoints("r") == [cp]
        waiting = attrs.evolve(cp, started_at=None, wake_at=20.0)
        assert await store.apply([ClaimCheckpoint(waiting, attempt=2)]) == [True]
        assert await store.get_checkpoints("r") == [waiting]
        # Without an attempt, any pending checkpoint is claimed, as before.
        assert await store.apply([ClaimCheckpoint(stale)]) == [True]
        assert await store.get_checkpoints("r") == [stale]
