"""examples/remote_workflows_demo.py runs as docs/remote-workflows.md says: an
engine whose app holds no workflow body runs ``checkout``, declared by name,
decided by the workers of examples/shop_workers.py; the local steps run on
the orders worker, the remote step on the payments worker, and the engine
keeps the timer and starts the child, which it serves by convention."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]

OUTPUT = [
    "engine app 'service': workflow bodies [], steps []",
    "started 'o-1': workflow 'checkout', remote: True",
    "  reserve('o-1') ran on the orders worker",
    "  charge('o-1', 1200) ran on the payments worker",
    "  label('o-1') ran on the orders worker",
    "o-1 -> {'hold': 'hold-o-1', 'receipt': 'receipt-o-1-1200', 'parcel': 'parcel-o-1'}",
    "o-1's checkpoints: 1 local reserve, 2 remote charge, 3 timer sleep, 4 child ship",
    "o-1 took 4 decision tasks, sent to 'orders'",
    "its child 'o-1.child.4' (ship, declared nowhere) was decided on 'ship'",
    "ok: the engine ran checkout without its code; the workers decided every turn",
]
"""What the demo prints (the page shows it too)."""


async def test_the_remote_workflows_example_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [
                sys.executable,
                str(ROOT / "examples" / "remote_workflows_demo.py"),
                str(tmp_path / "r.db"),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr.decode())
    assert done.stderr == b"", (out, done.stderr.decode())
    assert out.splitlines() == OUTPUT


async def test_the_engine_side_of_the_example_does_not_import_the_workflow_code() -> None:
    # Importing the demo (the engine side) leaves shop_workers unimported:
    # only the worker side (serve_workers) imports it, when it runs.
    check = (
        "import sys; sys.path.insert(0, 'examples'); import remote_workflows_demo as demo;"
        " assert 'shop_workers' not in sys.modules, 'imported';"
        " assert not demo.engine_app.steps;"
        " assert all(wf.remote for wf in demo.engine_app.workflows)"
    )
    with trio.fail_after(60):
        await trio.run_process([sys.executable, "-c", check], cwd=ROOT)


def test_the_page_shows_the_example() -> None:
    page = (ROOT / "docs" / "remote-workflows.md").read_text()
    assert "examples/remote_workflows_demo.py" in page
    assert "examples/shop_workers.py" in page
    # The page quotes the worker side's workflow as the example has it.
    worker_code = (ROOT / "examples" / "shop_workers.py").read_text()
    start = worker_code.index('@app.workflow(group="orders")')
    end = worker_code.index("return {", start)
    assert worker_code[start:end] in page
    shown = re.findall(r"<!-- output -->\n```text\n(.*?)```", page, re.S)
    assert shown == ["\n".join(OUTPUT) + "\n"]
