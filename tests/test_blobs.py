"""Large payloads through a blob store (docs/large-payloads.md): a run with
a 20 MB input and a 20 MB output through a remote step on a worker, while
every broker message stays small; references in the rows; a missing blob;
garbage collection with retention."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from sized_broker import SizedBroker
from trio_durable._base._clock import Clock
from trio_durable._front._undecodable import payload_layers_under
from trio_durable._payloads._blobs import Blobs
from trio_durable._payloads._stored_payloads import parse_blob_mark
from trio_durable._stores._blob_store import SCOPE, BlobbingStore
from trio_durable._wire._blob_wire import offload_result, resolve_result
from trio_durable._wire._messages import Result, WireError


def is_reference(text: str | None) -> bool:
    """Whether a row's payload is the mark of a blob."""
    return text is not None and parse_blob_mark(text) is not None


MB: Final = 1024 * 1024
SMALL: Final = 64 * 1024
"""Every broker message stays under this many bytes."""

app = td.App("blobs")


@app.step(group="big")
async def shout(text: str) -> str:
    return text.upper() + "!"


@app.step(group="big")
async def size_of(text: str) -> int:
    return len(text)


@app.workflow()
async def big_round_trip(ctx: td.Context, text: str) -> str:
    return await ctx.step(shout, text)


@app.workflow()
async def measured(ctx: td.Context, text: str) -> int:
    return await ctx.step(size_of, text)


@app.workflow()
async def echo(ctx: td.Context, value: Any) -> Any:
    return value


@app.workflow()
async def await_signal(ctx: td.Context) -> int:
    payload = await ctx.wait_signal("data")
    return len(payload)


@app.workflow(group="deciders")  # a remote workflow: decided by the workers
async def decided_remotely(ctx: td.Context, text: str) -> str:
    return await ctx.step(shout, text)


@asynccontextmanager
async def fleet(
    store: str | td.Store,
    blobs: td.BlobStore | None,
    worker_blobs: td.BlobStore | None = None,
    *,
    deciders_apart: bool = False,
) -> AsyncIterator[tuple[td.Engine, SizedBroker]]:
    """An engine and a worker (of groups ``big`` and ``deciders``) sharing a
    memory broker that records message sizes, and ``blobs``; with
    ``deciders_apart``, a worker of each group (so that a remote workflow's
    steps travel as tasks, not run at once in its decisions)."""
    broker = SizedBroker(td.MemoryBroker())
    groups = [["big"], ["deciders"]] if deciders_apart else [["big", "deciders"]]
    async with (
        td.open_engine(
            app,
            store=store,
            broker=broker,
            seed=0,
            wall_clock=fixed_wall,
            blobs=blobs,
            blob_grace=0,
        ) as engine,
        AsyncExitStack() as workers,
    ):
        for seed, served in enumerate(groups, 1):
            await workers.enter_async_context(
                td.open_worker(
                    app,
                    broker=broker,
                    groups=served,
                    seed=seed,
                    wall_clock=fixed_wall,
                    blobs=blobs if worker_blobs is None else worker_blobs,
                )
            )
        yield engine, broker


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


async def test_a_20_mb_input_and_output_go_through_the_blob_store(
    store_url: str, tmp_path: Path
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "a" * (20 * MB)
    async with fleet(store_url, blobs) as (engine, broker):
        run = await engine.start(big_round_trip, text, run_id="big")
        with trio.fail_after(60):
            output = await engine.result(run.id)
        assert output == "A" * (20 * MB) + "!"
        # Tasks and results went, each as a reference, far under 64 KB.
        assert broker.sizes
        assert broker.largest() < SMALL, broker.sizes
        # The rows hold references; the engine reads payloads.
        raw = payload_layers_under(engine.store)
        stored = await raw.get_run("big")
        assert stored is not None
        assert stored.output is not None
        assert is_reference(stored.output)
        assert is_reference(stored.input)
        [step] = await raw.get_checkpoints("big", 1, 1)
        assert step.input is not None
        assert is_reference(step.input)
        assert step.output is not None
        assert is_reference(step.output)
        [checkpoint] = await engine.store.get_checkpoints("big", 1, 1)
        assert checkpoint.input == json.dumps([text])
        # One blob for the input, one for the output: the run's and the
        # step's are the same text, and content-addressed.
        assert len(await blobs.list()) == 2
        assert (await engine.get("big")).input == json.dumps([text])


async def test_small_payloads_stay_in_the_rows(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with fleet("memory://", blobs) as (engine, _):
        run = await engine.start(measured, "short")
        assert await engine.result(run.id) == 5
        assert await blobs.list() == []


async def test_rows_with_no_blob_pass_the_blob_layer_uncopied(tmp_path: Path) -> None:
    # The memory store hands out the rows it holds: a row whose payloads
    # are all in it comes through the blob layer as the same object, not a
    # copy (every row a turn reads or writes went through a copy).
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with fleet("memory://", blobs) as (engine, _):
        run = await engine.start(echo, "short")
        assert await engine.result(run.id) == "short"
        raw = payload_layers_under(engine.store)
        layer = engine.store
        while not isinstance(layer, BlobbingStore):
            layer = layer.inner  # type: ignore[attr-defined]
        assert await layer.get_run(run.id) is await raw.get_run(run.id)
        big = await engine.start(echo, "x" * (2 * MB))
        await engine.result(big.id)
        # One whose input is in a blob is read with the blob's text.
        through = await layer.get_run(big.id)
        assert through is not None
        assert through is not await raw.get_run(big.id)
        assert json.loads(through.input) == ["x" * (2 * MB)]


async def test_a_payload_that_looks_like_a_reference_is_data(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    lookalike = {"$blob": "sha256-" + "0" * 64, "size": 3}
    async with fleet("memory://", blobs) as (engine, _):
        run = await engine.start(echo, lookalike)
        assert await engine.result(run.id) == lookalike
        # Small: kept in the row as it is (only a mark of the store's own
        # stands for a blob).
        assert await blobs.list() == []
        stored = await payload_layers_under(engine.store).get_run(run.id)
        assert stored is not None
        assert stored.output == json.dumps(lookalike, separators=(",", ":"))


async def test_a_missing_blob_is_an_error_of_its_own(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with fleet("memory://", blobs) as (engine, _):
        run = await engine.start(measured, "x" * 100_000)
        assert await engine.result(run.id) == 100_000
        for info in await blobs.list():
            await blobs.delete(info.key)
        # Read by a client (the engine keeps what it read and wrote).
        async with td.open_client(payload_layers_under(engine.store), blobs=blobs) as client:
            with pytest.raises(td.BlobNotFound) as caught:
                await client.get(run.id)
        assert caught.value.key.startswith("sha256-")
        assert isinstance(caught.value, td.StoreError)


async def test_a_worker_without_the_blob_store_fails_the_step_with_its_code(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    other = td.LocalBlobStore(tmp_path / "elsewhere")
    async with fleet("memory://", blobs, worker_blobs=other) as (engine, _):
        run = await engine.start(measured, "x" * 100_000)
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        assert caught.value.code == "blob_not_found"


async def test_a_large_signal_payload_goes_to_the_blob_store(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with fleet("memory://", blobs) as (engine, _):
        run = await engine.start(await_signal)
        await engine.signal(run.id, "data", "s" * 200_000)
        assert await engine.result(run.id) == 200_000
        assert len(await blobs.list()) == 1


async def test_pruning_deletes_the_blobs_only_pruned_runs_referred_to(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "p" * 100_000
    async with fleet("memory://", blobs) as (engine, _):
        first = await engine.start(echo, text, run_id="first")
        await engine.result(first.id)
        await trio.sleep(10)
        second = await engine.start(echo, text, run_id="second")
        await engine.result(second.id)
        # Both runs' inputs are one blob, and so are their outputs.
        assert len(await blobs.list()) == 2
        assert await engine.prune(td.Retention(completed=5)) == 1
        # "second" still refers to both: nothing is deleted.
        assert len(await blobs.list()) == 2
        assert await engine.result(second.id) == text
        await trio.sleep(10)
        assert await engine.prune(td.Retention(completed=5)) == 1
        assert await blobs.list() == []
        assert await engine.store.list_values(SCOPE) == []


async def test_a_recently_written_blob_outlives_the_runs_pruned(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with td.open_engine(
        app, seed=0, wall_clock=fixed_wall, blobs=blobs, blob_grace=3600
    ) as engine:
        run = await engine.start(echo, "g" * 100_000)
        await engine.result(run.id)
        assert await engine.prune(td.Retention(completed=0)) == 1
        # Within the grace, a writer may be about to refer to it again.
        assert len(await blobs.list()) == 2


async def test_pruning_sweeps_away_old_blobs_no_row_refers_to(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with td.open_engine(
        app, seed=0, wall_clock=fixed_wall, blobs=blobs, blob_grace=3600
    ) as engine:
        run = await engine.start(echo, "k" * 100_000)
        await engine.result(run.id)
        kept = {info.key for info in await blobs.list()}
        # A writer that died between its blob and its row left these: one
        # long ago, one within the grace (it may be about to commit).
        await blobs.put("orphan-old", b"lost", at=0.0)
        await blobs.put("orphan-new", b"maybe", at=fixed_wall() + trio.current_time())
        assert await engine.prune(td.Retention(completed=86_400)) == 0
        left = {info.key for info in await blobs.list()}
        assert left == kept | {"orphan-new"}
        assert await engine.result(run.id) == "k" * 100_000
        await trio.sleep(3601)
        assert await engine.prune(td.Retention(completed=86_400)) == 0
        assert {info.key for info in await blobs.list()} == kept


async def test_a_client_starts_and_reads_through_the_blob_store(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    text = "c" * 300_000
    async with fleet(url, blobs) as (_engine, broker):
        async with td.open_client(url, app=app, blobs=blobs) as client:
            run = await client.start(big_round_trip, text)
            assert await client.result(run.id) == text.upper() + "!"
        assert broker.largest() < SMALL
    async with td.open_client(url) as blind:
        with pytest.raises(td.BlobNotFound, match="none was configured"):
            await blind.result(run.id)


async def test_the_blob_options_are_checked(tmp_path: Path) -> None:
    for bad in (
        {"blobs": 5},
        {"blobs": tmp_path, "blob_threshold": 0},
        {"blobs": tmp_path, "blob_threshold": True},
        {"blobs": tmp_path, "blob_grace": -1},
    ):
        with pytest.raises(td.UsageError):
            async with td.open_engine(app, **bad):
                pass  # pragma: no cover
    with pytest.raises(td.UsageError):
        async with td.open_worker(app, groups=["big"], blobs=5):  # type: ignore[arg-type]
            pass  # pragma: no cover
    # A directory path is a LocalBlobStore.
    async with td.open_engine(app, blobs=str(tmp_path / "b")) as engine:
        run = await engine.start(echo, "d" * 100_000)
        assert await engine.result(run.id) == "d" * 100_000
    assert len(list((tmp_path / "b").iterdir())) == 2


async def test_a_remote_workflow_decides_on_large_payloads(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "r" * 2_000_000
    async with fleet("memory://", blobs, deciders_apart=True) as (engine, broker):
        run = await engine.start(decided_remotely, text)
        assert await engine.result(run.id) == "R" * 2_000_000 + "!"
        # Decision tasks carry the history, and decisions the output, as
        # references too.
        assert {queue for queue, _ in broker.sizes} >= {"deciders", "big"}
        assert broker.largest() < SMALL, broker.sizes


async def test_a_step_run_at_once_in_a_decision_sends_its_payloads_as_references(
    tmp_path: Path,
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    text = "r" * 2_000_000
    async with fleet("memory://", blobs) as (engine, broker):
        run = await engine.start(decided_remotely, text)
        assert await engine.result(run.id) == "R" * 2_000_000 + "!"
        # The worker deciding serves ``big``: the step ran in the decision,
        # which carried its output back as a reference.
        assert {queue for queue, _ in broker.sizes} >= {"deciders"}
        assert "big" not in {queue for queue, _ in broker.sizes}
        assert broker.largest() < SMALL, broker.sizes


async def test_with_a_codec_too_what_goes_to_the_blob_store_is_encrypted(
    tmp_path: Path,
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    codec = td.AesGcmCodec(td.Keyring.single(bytes(range(32))))
    secret = "plaintext-marker " * 10_000
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with td.open_engine(
        app, store=url, seed=0, wall_clock=fixed_wall, blobs=blobs, codec=codec
    ) as engine:
        run = await engine.start(echo, secret)
        assert await engine.result(run.id) == secret
    # The input and the output went to the blob store, encrypted: neither
    # the blobs nor the database hold the text.
    stored = await blobs.list()
    assert stored
    for info in stored:
        assert b"plaintext-marker" not in await blobs.get(info.key)
    assert b"plaintext-marker" not in (tmp_path / "runs.db").read_bytes()


class AltersOnRead:
    """A worker's view of a blob store whose files are altered before each
    read (a disk or a hand that edits them)."""

    def __init__(self, inner: td.LocalBlobStore) -> None:
        self.inner = inner

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        await self.inner.put(key, data, at=at)

    async def get(self, key: str) -> bytes:
        file = self.inner.path / key
        file.write_bytes(file.read_bytes()[:-1] + b"?")
        return await self.inner.get(key)

    async def stat(self, key: str) -> td.BlobInfo | None:
        return await self.inner.stat(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[td.BlobInfo]:
        return await self.inner.list(after=after, limit=limit)


async def test_a_worker_reading_a_corrupted_input_fails_the_step_with_its_code(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with fleet("memory://", blobs, worker_blobs=AltersOnRead(blobs)) as (engine, _):
        run = await engine.start(measured, "x" * 100_000)
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        assert caught.value.code == "blob_corrupted"
        assert "does not match its key" in caught.value.message


def _result(output: str, output_blob: bool | None) -> Result:
    return Result(
        run_id="r",
        seq=1,
        attempt=1,
        step="s",
        workflow="w",
        status="completed",
        output=output,
        output_blob=output_blob,
    )


async def test_a_result_says_out_of_band_whether_its_output_is_a_reference(
    tmp_path: Path,
) -> None:
    store = td.LocalBlobStore(tmp_path / "blobs")
    blobs = Blobs(store, 10, Clock(fixed_wall))
    key, size = await blobs.offload('"the output, kept in a blob"')
    reference = json.dumps({"$blob": key, "size": size}, separators=(",", ":"))
    # A value shaped like a reference, from a worker that says it is one,
    # one that says it is not, and one before the field (read by shape).
    assert (await resolve_result(blobs, _result(reference, True))).output == (
        '"the output, kept in a blob"'
    )
    assert (await resolve_result(blobs, _result(reference, False))).output == reference
    assert (await resolve_result(None, _result(reference, False))).output == reference
    assert (await resolve_result(blobs, _result(reference, None))).output == (
        '"the output, kept in a blob"'
    )
    # Said to be one, and none: a failure that may be retried.
    failed = await resolve_result(blobs, _result('{"a":1}', True))
    assert (failed.status, failed.code, failed.retryable) == ("failed", "blob_not_found", True)
    # The field goes over the wire, and only a boolean is taken.
    sent = _result(reference, True)
    assert Result.decode(sent.encode()) == sent
    assert Result.decode(_result(reference, None).encode()).output_blob is None
    body = _result(reference, True).encode().replace(b'"output_blob":true', b'"output_blob":1')
    with pytest.raises(WireError, match="output_blob must be true or false"):
        Result.decode(body)
    # A worker marks what it offloads and what it does not.
    assert (await offload_result(blobs, _result('"long enough to go"', None))).output_blob
    assert (await offload_result(blobs, _result('"short"', None))).output_blob is False
    assert (await offload_result(None, _result(reference, None))).output_blob is False
