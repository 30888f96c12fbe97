"""Runs whose fans with ``concurrency=`` were recorded in waves, by the
release before sliding windows, go on in waves after the upgrade.

`tests/data/wave_fans.json` was written by `tests/record_wave_history.py`
run with that release's code: two runs stopped mid-wave, one fanning a
remote step, one fanning children (see that script). Loaded into a store,
they are taken up by this release's engine: each fan finishes with the
results it would have had, its members are recorded a wave at a time as
before (none waits in a window, no window value is written), and a new fan
of the same workflow slides a window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from record_wave_history import app, child_waves, step_waves
from trio_durable._base import _serde
from trio_durable._base._records import Checkpoint, Run
from trio_durable._features.children._fan_window import WINDOW_SCOPE, WINDOW_WAIT, window_key
from trio_durable._stores._ops import CreateRun, Op, PutCheckpoint

HISTORY = Path(__file__).parent / "data" / "wave_fans.json"


async def load(store: td.stores.Store) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(HISTORY.read_text())
    ops: list[Op] = []
    for plain in data["runs"]:
        # Plain fields but for these (and no search attributes, which the
        # converter does not structure).
        assert plain["error"] is None
        assert plain["search_attributes"] == {}
        ops.append(CreateRun(Run(**{**plain, "tags": tuple(plain["tags"])})))
    ops += [PutCheckpoint(_serde.converter.structure(c, Checkpoint)) for c in data["checkpoints"]]
    await store.apply(ops)
    return data


async def test_fans_recorded_in_waves_go_on_in_waves(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, serve=["g"], remote_redispatch=(5.0, 3)) as engine:
        store = engine.store
        await load(store)
        # Recorded mid-wave: the second wave of steps out, the fifth member
        # not recorded; the first wave of children in flight.
        assert [cp.seq for cp in await store.get_checkpoints("steps")] == [1, 2, 3, 4]
        assert [cp.seq for cp in await store.get_checkpoints("children")] == [1, 2]
        # The steps' second wave was lost with the old engine's broker: its
        # lost deadline (6 s) resends it; the children's timers are durable.
        assert await engine.result("steps") == [0, 10, 20, 30, 40]
        assert await engine.result("children") == [0, 10, 20, 30, 40]
        await engine.drain()
        steps = await store.get_checkpoints("steps")
        children = await store.get_checkpoints("children")
        for cp in [*steps, *children]:
            assert cp.status == "completed"
            assert all(e.code != WINDOW_WAIT for e in cp.errors)
            assert await store.get_value(WINDOW_SCOPE, window_key(cp.run_id, 1)) is None
        # Waves: the fifth member started only once the second wave ended.
        for cps in (steps, children):
            assert cps[4].started_at is not None
            assert all(
                cp.finished_at is not None and cp.finished_at <= cps[4].started_at
                for cp in cps[2:4]
            )
        # A new run of the same workflows slides a window.
        await engine.start(step_waves, 5, run_id="steps-new")
        await engine.start(child_waves, 5, run_id="children-new")
        await trio.testing.wait_all_tasks_blocked()
        for run_id in ("steps-new", "children-new"):
            cps = await store.get_checkpoints(run_id)
            assert len(cps) == 5  # every member recorded at once
            assert [cp.mark.code if cp.mark else None for cp in cps[2:]] == [WINDOW_WAIT] * 3
        assert await engine.result("steps-new") == [0, 10, 20, 30, 40]
        assert await engine.result("children-new") == [0, 10, 20, 30, 40]
