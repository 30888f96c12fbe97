"""``@app.workflow(check_arguments=True)``: replay also compares a digest of
each durable operation's arguments; opt-in, and checkpoints recorded before
it was on are accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store


def _app(*, check: bool, delta: int = 0, sleep: float = 5.0, timeout: float = 60.0) -> td.App:
    """One deploy: the workflow "flow" passes ``x + delta`` to its step and
    its child, sleeps ``sleep`` and waits for a signal up to ``timeout``."""
    app = td.App("check-arguments")

    @app.step()
    async def bump(x: int) -> int:
        return x + 1

    @app.workflow()
    async def leaf(ctx: td.Context, x: int) -> int:
        return x

    @app.workflow(name="flow", check_arguments=check)
    async def flow(ctx: td.Context, x: int) -> int:
        a = await ctx.step(bump, x + delta)
        b = await ctx.child(leaf, x + delta)
        await ctx.sleep(sleep)
        await ctx.wait_signal("go", timeout=timeout)
        return a + b

    return app


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def _record(open_test_engine: EngineFactory, store: td.Store, app: td.App) -> None:
    """Run "flow" up to its signal wait, then stop the engine."""
    async with open_test_engine(app, store=store, engine_id="recorder") as engine:
        await engine.start("flow", 1, run_id="r")
        await engine.drain()
        await trio.sleep(5)
        await engine.drain()
        assert (await engine.get("r")).status == "suspended"


async def _finish(open_test_engine: EngineFactory, store: td.Store, app: td.App) -> int:
    async with open_test_engine(app, store=store, engine_id="replayer") as engine:
        await engine.signal("r", "go")
        return int(await engine.result("r"))


async def _fail(open_test_engine: EngineFactory, store: td.Store, app: td.App) -> td.RunFailed:
    async with open_test_engine(app, store=store, engine_id="replayer") as engine:
        await engine.signal("r", "go")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("r")
    return info.value


@pytest.mark.parametrize(
    ("changed", "seq", "name"),
    [
        ({"delta": 1}, 1, "bump"),
        ({"sleep": 6.0}, 3, "sleep"),
        ({"timeout": 30.0}, 4, "go"),
    ],
    ids=["step-and-child", "timer", "signal-timeout"],
)
async def test_a_changed_argument_fails_the_run_with_non_determinism(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    changed: dict[str, float],
    seq: int,
    name: str,
) -> None:
    async with shared_store(kind, tmp_path) as store:
        await _record(open_test_engine, store, _app(check=True))
        failure = await _fail(open_test_engine, store, _app(check=True, **changed))  # type: ignore[arg-type]
    assert failure.code == "non_determinism"
    details = failure.details
    assert (details["seq"], details["recorded"], details["requested"]) == (seq, name, name)
    assert details["recorded_arguments"] != details["requested_arguments"]
    assert len(details["recorded_arguments"]) == 64


async def test_the_same_arguments_replay(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with shared_store(kind, tmp_path) as store:
        await _record(open_test_engine, store, _app(check=True))
        assert await _finish(open_test_engine, store, _app(check=True)) == 3
        records = {r.kind: r for r in await store.get_records("r")}
    assert records["checked_from"].output == "1"


async def test_without_the_check_a_changed_argument_is_not_noticed(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    await _record(open_test_engine, store, _app(check=False))
    # The recorded results are returned, as ever: bump(1) -> 2, leaf(1) -> 1
    # (bump(2) and leaf(2) would make 5).
    assert await _finish(open_test_engine, store, _app(check=False, delta=1)) == 3
    assert "checked_from" not in {r.kind for r in await store.get_records("r")}


async def test_checkpoints_recorded_before_the_check_was_on_are_accepted(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with shared_store(kind, tmp_path) as store:
        await _record(open_test_engine, store, _app(check=False))
        # The new deploy turns the check on and changes what it passes: the
        # run in flight recorded its seqs 1 to 4 without digests; it
        # finishes, and the check covers what is recorded from seq 5 on.
        assert await _finish(open_test_engine, store, _app(check=True, delta=1)) == 3
        records = {r.kind: r for r in await store.get_records("r")}
    assert records["checked_from"].output == "5"


# -- fans, started children, entities, signals sent, events, search attributes --

_OPS = ["all", "all_settled", "start_child", "shared", "exclusive", "payload", "target"]
_OPS += ["key", "event", "upsert"]


def _ops_app(*, check: bool, changed: str = "") -> td.App:
    """One deploy of "ops": it runs every operation below once, each with
    its argument changed (by one) if ``changed`` names it, then waits for
    the signal "go"."""
    app = td.App("check-arguments")
    app.search_attribute("stage", str)

    def d(op: str) -> int:
        return 1 if op == changed else 0

    @app.entity("cart", key=str)
    class Cart:
        def __init__(self) -> None:
            self.items: list[int] = []

        @td.exclusive
        async def add(self, item: int) -> int:
            self.items.append(item)
            return len(self.items)

        @td.shared
        async def count(self) -> int:
            return len(self.items)

    @app.workflow()
    async def leaf(ctx: td.Context, x: int) -> int:
        return x

    @app.workflow()
    async def target(ctx: td.Context) -> None:
        await ctx.wait_signal("stop")

    @app.workflow(name="ops", check_arguments=check)
    async def ops(ctx: td.Context, x: int) -> int:
        await ctx.all(leaf, [x, x + d("all")])  # seqs 1 and 2
        await ctx.all_settled(leaf, [x + d("all_settled")])  # 3
        await ctx.start_child(leaf, x + d("start_child"))  # 4
        await ctx.entity("cart", f"c{x + d('shared')}").count()  # 5
        await ctx.entity("cart", "c1").add(x + d("exclusive"))  # 6
        to, key = ("u" if d("target") else "t"), ("k" if d("key") else None)
        await ctx.signal(to, "ping", x + d("payload"), idempotency_key=key)  # 7
        ctx.set_event("k", x + d("event"))  # 8
        ctx.upsert_search_attributes({"stage": f"s{x + d('upsert')}"})  # 9
        await ctx.wait_signal("go")  # 10
        return x

    return app


_SEQS = {"all": 2, "all_settled": 3, "start_child": 4, "shared": 5, "exclusive": 6}
_SEQS |= {"payload": 7, "target": 7, "key": 7, "event": 8, "upsert": 9}


async def _record_ops(
    open_test_engine: EngineFactory, store: td.Store, app: td.App, run_id: str = "r"
) -> None:
    async with open_test_engine(app, store=store, engine_id="recorder") as engine:
        for target in ("t", "u"):
            if await store.get_run(target) is None:
                await engine.start("target", run_id=target)
        await engine.start("ops", 1, run_id=run_id)
        await engine.drain()
        assert (await engine.get(run_id)).status == "suspended"


@pytest.mark.parametrize("changed", _OPS)
async def test_a_changed_argument_of_any_recorded_operation_fails_the_run(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    changed: str,
) -> None:
    async with shared_store(kind, tmp_path) as store:
        await _record_ops(open_test_engine, store, _ops_app(check=True))
        failure = await _fail(open_test_engine, store, _ops_app(check=True, changed=changed))
    assert failure.code == "non_determinism"
    assert failure.details["seq"] == _SEQS[changed]
    assert failure.details["recorded"] == failure.details["requested"]
    assert failure.details["recorded_arguments"] != failure.details["requested_arguments"]


async def test_every_recorded_operation_replays_with_the_same_arguments(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with shared_store(kind, tmp_path) as store:
        await _record_ops(open_test_engine, store, _ops_app(check=True))
        assert await _finish(open_test_engine, store, _ops_app(check=True)) == 1
        cps = {cp.seq: cp for cp in await store.get_checkpoints("r")}
        records = {r.kind: r for r in await store.get_records("r")}
    assert records["checked_from"].output == "1"
    assert [cps[seq].status for seq in range(1, 11)] == ["completed"] * 10


@pytest.mark.parametrize("check", [False, True], ids=["check-off", "recorded-before-check"])
async def test_changed_operations_pass_without_the_check_or_before_it(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    check: bool,
) -> None:
    async with shared_store(kind, tmp_path) as store:
        for changed in _OPS:
            await _record_ops(open_test_engine, store, _ops_app(check=False), f"r-{changed}")
            # Off, or on from a later deploy: what was recorded is replayed.
            replayer = _ops_app(check=check, changed=changed)
            async with open_test_engine(replayer, store=store, engine_id="replayer") as engine:
                await engine.signal(f"r-{changed}", "go")
                assert await engine.result(f"r-{changed}") == 1


async def test_a_fork_of_a_checked_run_replays_its_copied_history(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    # The fork copies where the original's check began (seq 1, before the
    # fork's seq), so its copied history is checked as the original's was,
    # and replays: the copied arguments are the original's.
    async with shared_store(kind, tmp_path) as store:
        await _record_ops(open_test_engine, store, _ops_app(check=True))
        async with open_test_engine(_ops_app(check=True), store=store) as engine:
            fork = await engine.fork("r", from_seq=10, new_run_id="f")
            await engine.drain()
            await engine.signal(fork.id, "go")
            assert await engine.result(fork.id) == 1
        records = {r.kind: r for r in await store.get_records("f")}
    assert records["checked_from"].output == "1"


def test_a_signal_sent_with_the_default_key_matches_under_another_run_id() -> None:
    from trio_durable._base._records import Checkpoint
    from trio_durable._features.determinism._argument_check import sent_signal

    # A copy of the history (a fork) keeps the original's default key.
    cp = Checkpoint(
        run_id="copy",
        seq=7,
        name="send:ping",
        kind="signal",
        status="completed",
        input="1",
        output='{"to":"t.gen.2","key":"original:7","delivered":true}',
    )
    for key, same in [(None, True), ("original:7", True), ("mine", False)]:
        requested, recorded = sent_signal("t", lambda: "1", key)
        assert (requested(cp) == recorded(cp)) is same
    requested, recorded = sent_signal("u", lambda: "1", None)
    assert requested(cp) != recorded(cp)
