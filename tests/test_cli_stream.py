"""``trio-durable stream RUN``: a run's stream printed one JSON value per
line, followed live from another process until the run ends, with the exit
status telling how it ended."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import trio_durable as td
from cli_processes import cli_process
from test_cli import invoke, one_error_line

app = td.App("cli-streams")


@app.workflow()
async def chat(ctx: td.Context, words: list[str]) -> int:
    for word in words:
        ctx.emit({"word": word})
    reply = await ctx.wait_signal("reply")
    ctx.emit(reply)
    if reply == "fail":
        raise td.FatalError("told to fail")
    return len(words)


async def test_the_command_follows_a_live_run_until_it_ends(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    async with td.open_engine(app, store=store) as engine:
        run = await engine.start(chat, ["hello", "world"], run_id="chat-1")
        async with cli_process(["stream", run.id, "--store", store]) as follower:
            await follower.wait_for('{"word": "world"}')
            # Following: the process waits for more while the run waits.
            assert follower.process.returncode is None
            await engine.signal(run.id, "reply", "bye")
            assert await follower.exited() == 0
        assert follower.lines == ['{"word": "hello"}', '{"word": "world"}', '"bye"']
        assert await engine.result(run.id) == 2


def test_offsets_a_starting_offset_and_a_failed_run(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"

    async def fill() -> None:
        async with td.open_engine(app, store=store) as engine:
            run = await engine.start(chat, ["a", "b"], run_id="chat-2")
            await engine.signal(run.id, "reply", "fail")
            await engine.drain()

    trio.run(fill)
    result = invoke(["stream", "chat-2", "--store", store, "--offsets", "--from-offset", "1"])
    assert result.exit_code == 1
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"offset": 1, "value": {"word": "b"}},
        {"offset": 2, "value": "fail"},
    ]
    assert one_error_line(result) == "run 'chat-2' ended failed"

    missing = invoke(["stream", "nobody", "--store", store])
    assert missing.exit_code == 1
    assert "nobody" in one_error_line(missing)
    bad = invoke(["stream", "chat-2", "--store", store, "--from-offset", "-1"])
    assert bad.exit_code == 2
