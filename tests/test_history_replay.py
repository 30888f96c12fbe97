"""Replay tests: histories exported from a SQLite store replay against the
code that made them; an incompatible edit fails with a report that names
the seq, the operations recorded and requested and the body's line; a
patched edit replays; a run that ended must end the same way; bad input
gets `HistoryError`; ``trio-durable replay`` exits 0, 1 or 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import replay_app
import trio_durable as td
import trio_durable.testing
from replay_store import RUNS, filled, histories
from test_cli import invoke

__all__ = ["filled", "histories"]


def test_histories_replay_against_the_code_that_made_them(histories: Path) -> None:
    for run_id in RUNS:
        td.testing.replay(replay_app.app, histories / f"{run_id}.json")
    assert td.testing.replay_all(replay_app.app, histories) == len(RUNS)


def test_a_document_replays_as_its_file_does(histories: Path) -> None:
    document = json.loads((histories / "o-done.json").read_text())
    td.testing.replay(replay_app.app, document)
    with pytest.raises(td.NonDeterminismError):
        td.testing.replay(replay_app.changed, document)


def test_an_incompatible_edit_is_reported_readably(histories: Path) -> None:
    with pytest.raises(td.NonDeterminismError) as info:
        td.testing.replay(replay_app.changed, histories / "o-open.json")
    report = str(info.value)
    path = histories / "o-open.json"
    assert report.splitlines() == [
        f"{path}: run 'o-open' (workflow 'order' version '1', suspended)"
        " does not replay against this code:",
        "  at seq 2",
        f"  the history recorded: signal 'packed' (arguments digest"
        f" {info.value.details['recorded_arguments'][:16]})",
        "  the code asks for:    local 'check_fraud'",
        f"  asked at:             {replay_app.__file__}:{replay_app.FRAUD_LINE} in order",
    ]
    assert info.value.code == "non_determinism"
    details = info.value.details
    assert {k: details[k] for k in ("seq", "recorded", "requested", "run_id")} == {
        "seq": 2,
        "recorded": "packed",
        "requested": "check_fraud",
        "run_id": "o-open",
    }
    assert (details["recorded_kind"], details["requested_kind"]) == ("signal", "local")
    assert details["asked_at"].endswith(f"replay_app.py:{replay_app.FRAUD_LINE} in order")


def test_a_patched_edit_replays_cleanly(histories: Path) -> None:
    # Runs past the charge keep the old branch; so does the one that ended.
    assert td.testing.replay_all(replay_app.patched, histories) == len(RUNS)


def test_a_run_that_ended_must_end_the_same_way(histories: Path) -> None:
    # o-open has not ended: it may yet return the new output.
    td.testing.replay(replay_app.returns_more, histories / "o-open.json")
    with pytest.raises(td.NonDeterminismError) as info:
        td.testing.replay(replay_app.returns_more, histories / "o-done.json")
    lines = str(info.value).splitlines()
    assert lines[1] == (
        "  at its end, after seq 3: the run completed with"
        ' ["charged o-2","shipped o-2"], but the code now returns'
        ' ["charged o-2","shipped o-2","thanked"]'
    )
    assert lines[2].startswith(f"  asked at:             {replay_app.__file__}:")


def test_a_changed_argument_is_reported_with_both_digests(histories: Path) -> None:
    with pytest.raises(td.NonDeterminismError) as info:
        td.testing.replay(replay_app.reprices, histories / "p-1.json")
    details = info.value.details
    lines = str(info.value).splitlines()
    assert lines[1:4] == [
        "  at seq 1",
        f"  the history recorded: local 'price' (arguments digest"
        f" {details['recorded_arguments'][:16]})",
        f"  the code asks for:    local 'price' (arguments digest"
        f" {details['requested_arguments'][:16]})",
    ]
    assert details["recorded_arguments"] != details["requested_arguments"]


def test_replay_all_reports_every_failure(histories: Path) -> None:
    with pytest.RaisesGroup(
        pytest.RaisesExc(td.NonDeterminismError, match="o-done"),
        pytest.RaisesExc(td.NonDeterminismError, match="o-open"),
    ) as info:
        td.testing.replay_all(replay_app.changed, histories)
    assert str(info.value).startswith(f"2 of {len(RUNS)} histories in {histories} do not replay")


def test_bad_input_gets_a_history_error(histories: Path, tmp_path: Path) -> None:
    good = json.loads((histories / "o-done.json").read_text())
    cases = {
        "missing.json": None,
        "junk.json": "{not json",
        "other.json": json.dumps({"hello": 1}),
        "version.json": json.dumps({**good, "format_version": 99}),
        "field.json": json.dumps({**good, "run": {**good["run"], "status": "sleeping"}}),
    }
    messages = {}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        with pytest.raises(td.HistoryError) as info:
            td.testing.replay(replay_app.app, tmp_path / name)
        messages[name] = str(info.value)
    assert messages["missing.json"].endswith(
        "missing.json cannot be read: No such file or directory"
    )
    assert "junk.json is not JSON" in messages["junk.json"]
    assert "other.json is not an exported history" in messages["other.json"]
    assert (
        "version.json is of format version 99; this trio-durable reads version 1"
        in (messages["version.json"])
    )
    assert "field.json" in messages["field.json"]
    assert "$.status" in messages["field.json"]
    with pytest.raises(td.HistoryError, match="is no folder"):
        td.testing.replay_all(replay_app.app, tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(td.HistoryError, match="holds no exported history"):
        td.testing.replay_all(replay_app.app, tmp_path / "empty")


def test_an_unknown_workflow_is_no_history_error(histories: Path) -> None:
    with pytest.raises(td.UnknownWorkflowError):
        td.testing.replay(td.App("other"), histories / "o-done.json")


rich = td.App("rich")


@rich.step()
async def double(x: int) -> int:
    return 2 * x


@rich.step(group="remote")
async def increment(x: int) -> int:
    return x + 1


@rich.workflow()
async def kid(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, x)


@rich.workflow()
async def many(ctx: td.Context, n: int) -> dict[str, Any]:
    fan = await ctx.all(increment, list(range(n)), concurrency=2)
    settled = await ctx.all_settled(kid, [1, 2])
    child = await ctx.child(kid, n)
    await ctx.start_child(kid, 7)
    await ctx.sleep(60)
    try:
        first = await ctx.wait_signal("go", timeout=30)
    except td.SignalTimeout:
        first = "timed out"
    second = await ctx.wait_signal("go2")
    return {
        "fan": fan,
        "settled": len(settled),
        "child": child,
        "first": first,
        "second": second,
        "at": ctx.now().timestamp(),
        "id": str(ctx.uuid4()),
    }


async def test_fans_children_timers_and_signals_replay_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(rich, store=td.MemoryStore(), serve=["remote"]) as engine:
        await engine.start(many, 3, run_id="done")
        await engine.start(many, 4, run_id="open")
        await engine.drain()
        await engine.signal("done", "go2", 5)
        await engine.result("done")
        page = await engine.list_runs()
        documents = [await engine.export_history(run.id) for run in page.runs]
    assert len(documents) == 10  # two runs, each with two fan members and three children
    for document in documents:
        await trio.to_thread.run_sync(td.testing.replay, rich, document)


# -- trio-durable replay ---------------------------------------------------------


def test_the_command_exits_0_when_every_history_replays(histories: Path) -> None:
    result = invoke(["replay", "replay_app:patched", str(histories)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{len(RUNS)} of {len(RUNS)} histories replay cleanly\n"


def test_the_command_exits_1_with_the_report(histories: Path) -> None:
    result = invoke(
        ["replay", "replay_app:changed", str(histories / "o-open.json"), str(histories)]
    )
    assert result.exit_code == 1, result.output
    assert result.stdout.count("does not replay against this code") == 3
    assert "  the code asks for:    local 'check_fraud'" in result.stdout
    assert f"replay_app.py:{replay_app.FRAUD_LINE} in order" in result.stdout
    assert result.stderr.strip().endswith("3 do not")
    as_json = json.loads(invoke(["replay", "replay_app:changed", str(histories), "--json"]).stdout)
    assert as_json["replayed"] == len(RUNS) - 2
    assert [f["details"]["run_id"] for f in as_json["failed"]] == ["o-done", "o-open"]


def test_the_command_exits_2_for_bad_input(histories: Path, tmp_path: Path) -> None:
    assert invoke(["replay", "replay_app:app"]).exit_code == 2
    assert invoke(["replay", "replay_app:nothing", str(histories)]).exit_code == 2
    missing = invoke(["replay", "replay_app:app", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2
    assert "nowhere is neither a file nor a folder" in missing.stderr
    folder = tmp_path / "mixed"
    shutil.copytree(histories, folder)
    (folder / "junk.json").write_text("{")
    mixed = invoke(["replay", "replay_app:app", str(folder)])
    assert mixed.exit_code == 2
    assert "junk.json is not JSON" in mixed.stdout
