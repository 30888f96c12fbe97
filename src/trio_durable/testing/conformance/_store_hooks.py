"""Store checks of webhooks, breakpoints, paused steps and settings."""

from __future__ import annotations

import trio

from ..._base._records import Breakpoint, PausedStep, Webhook
from ..._stores._base import Store, WriteConflict
from ..._stores._hook_ops import (
    CreateWebhook,
    DeleteBreakpoint,
    KeepSetting,
    PauseStep,
    PutBreakpoint,
    ResumeStep,
    UseWebhook,
)
from ..._stores._ops import CreateRun, DeliverSignal, UpdateRun
from ._store_support import OpenStore, StoreFactory, fresh_store, make_run, raises, two_handles


async def check_webhooks_are_kept_and_used_once(factory: StoreFactory | OpenStore) -> None:
    """`CreateWebhook` keeps a webhook (once); `UseWebhook` marks it used,
    and fails the whole batch on a used or unknown one."""
    async with fresh_store(factory) as store:
        await store.apply([CreateRun(make_run()), CreateWebhook("h1", "r1", "go", 2.0)])
        # Written again (a turn repeated): the first stays.
        await store.apply([CreateWebhook("h1", "r1", "other", 3.0)])
        assert await store.get_webhook("h1") == Webhook(
            token_hash="h1", run_id="r1", name="go", created_at=2.0
        )
        assert await store.get_webhook("missing") is None

        assert await store.apply([UseWebhook("h1", 5.0), DeliverSignal("tok", '"x"')]) == [
            None,
            None,
        ]
        hook = await store.get_webhook("h1")
        assert hook is not None
        assert hook.used_at == 5.0
        for token_hash in ("h1", "missing"):
            with raises(WriteConflict):
                await store.apply([DeliverSignal("tok", '"y"'), UseWebhook(token_hash, 6.0)])
        # The failed batches delivered nothing.
        assert await store.buffered_signals("tok") == ['"x"']


async def check_one_of_two_uses_of_a_webhook_wins(factory: StoreFactory | OpenStore) -> None:
    """Of concurrent `UseWebhook` batches of one webhook, through two
    handles, exactly one commits."""
    async with two_handles(factory) as (first, second):
        await first.apply([CreateRun(make_run()), CreateWebhook("h", "r1", "go", 1.0)])
        wins: list[int] = []

        async def use(store: Store, i: int) -> None:
            try:
                await store.apply([UseWebhook("h", float(i)), DeliverSignal("tok", str(i))])
            except WriteConflict:
                return
            wins.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(use, first if i % 2 else second, i)
        assert len(wins) == 1
        assert await second.buffered_signals("tok") == [str(wins[0])]


async def check_settings_keep_their_first_value(factory: StoreFactory | OpenStore) -> None:
    """`KeepSetting` stores a value once and returns the stored one."""
    async with two_handles(factory) as (first, second):
        assert await first.apply([KeepSetting("secret", "a")]) == ["a"]
        assert await second.apply([KeepSetting("secret", "b")]) == ["a"]
        assert await second.apply([KeepSetting("other", "b")]) == ["b"]


async def check_breakpoints_are_added_listed_and_deleted(
    factory: StoreFactory | OpenStore,
) -> None:
    """Breakpoints list oldest first; deleting says whether one existed."""
    async with fresh_store(factory) as store:
        late = Breakpoint(id="b", workflow="w", step="s", created_at=5.0)
        early = Breakpoint(id="a", workflow="w", step="t", created_at=1.0)
        await store.apply([PutBreakpoint(late), PutBreakpoint(early), PutBreakpoint(early)])
        assert await store.list_breakpoints() == [early, late]
        assert await store.apply([DeleteBreakpoint("a"), DeleteBreakpoint("a")]) == [True, False]
        assert await store.list_breakpoints() == [late]


async def check_paused_steps_are_resumed_once(factory: StoreFactory | OpenStore) -> None:
    """`PauseStep` records a pause; `ResumeStep` removes it, and fails the
    whole batch when it is gone; runs that ended are not listed."""
    async with fresh_store(factory) as store:

        def pause(run_id: str, seq: int) -> PausedStep:
            return PausedStep(
                run_id=run_id,
                seq=seq,
                workflow="checkout",
                step="s",
                breakpoint_id="b",
                paused_at=1.0,
            )

        await store.apply(
            [
                CreateRun(make_run("r1", status="suspended")),
                CreateRun(make_run("r2", status="suspended")),
                PauseStep(pause("r2", 3)),
                PauseStep(pause("r1", 2)),
                PauseStep(pause("r1", 2)),
            ]
        )
        assert await store.paused_steps() == [pause("r1", 2), pause("r2", 3)]
        assert await store.paused_steps("r2") == [pause("r2", 3)]
        await store.apply([ResumeStep("r1", 2)])
        with raises(WriteConflict):
            await store.apply([UpdateRun("r2", {"wake_at": 9.0}), ResumeStep("r1", 2)])
        run = await store.get_run("r2")
        assert run is not None
        assert run.wake_at is None
        assert await store.paused_steps("r1") == []
        await store.apply([UpdateRun("r2", {"status": "cancelled"})])
        assert await store.paused_steps() == []


async def check_pruning_a_run_deletes_its_webhooks_and_pauses(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.prune_runs` deletes a pruned run's webhooks and pauses."""
    async with fresh_store(factory) as store:
        paused = PausedStep(
            run_id="old", seq=1, workflow="checkout", step="s", breakpoint_id="b", paused_at=1.0
        )
        await store.apply(
            [
                CreateRun(make_run("old", status="suspended", updated_at=1.0)),
                CreateRun(make_run("kept", status="completed", updated_at=100.0)),
                PauseStep(paused),
                CreateWebhook("h-old", "old", "go", 1.0),
                CreateWebhook("h-kept", "kept", "go", 1.0),
                UpdateRun("old", {"status": "completed", "updated_at": 1.0}),
            ]
        )
        assert await store.prune_runs({"completed": 50.0}, 10) == ["old"]
        assert await store.get_webhook("h-old") is None
        assert await store.get_webhook("h-kept") is not None
        await store.apply([CreateRun(make_run("old", status="suspended"))])
        assert await store.paused_steps() == []


HOOKS_CHECKS = (
    check_webhooks_are_kept_and_used_once,
    check_one_of_two_uses_of_a_webhook_wins,
    check_settings_keep_their_first_value,
    check_breakpoints_are_added_listed_and_deleted,
    check_paused_steps_are_resumed_once,
    check_pruning_a_run_deletes_its_webhooks_and_pauses,
)
