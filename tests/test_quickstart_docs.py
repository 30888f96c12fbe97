"""The Python of docs/quickstart.md and docs/index.md runs as the pages
say. The quickstart's ``hello.py`` also runs as a script, with the
commands after it, in tests/test_doc_transcripts.py; here it runs in this
process under a MockClock, twice, to show what the page says of a second
run; index.md's example prints its receipt."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing

from doc_transcripts import marked_blocks, transcripts

DOCS: Final = Path(__file__).resolve().parents[1] / "docs"
QUICKSTART: Final = (DOCS / "quickstart.md").read_text(encoding="utf-8")


def page_module(name: str, source: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def hello_py() -> str:
    [block] = [b for b in marked_blocks(QUICKSTART) if b.argument == "hello.py"]
    return QUICKSTART[block.start : block.end]


def shown_output() -> list[str]:
    """What the quickstart shows ``python hello.py`` printing."""
    first = transcripts(QUICKSTART)[0]
    assert first.startswith("$ python hello.py\n")
    return first.splitlines()[1:]


async def test_hello_runs_once_per_run(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # Not as __main__: the test awaits main() itself.
    hello = page_module("hello", hello_py(), tmp_path / "hello.py")
    await hello.main()
    assert capsys.readouterr().out.splitlines() == shown_output()
    # The durable timer of one second, on the mock clock.
    assert trio.current_time() == pytest.approx(1.0)
    assert (tmp_path / "hello.db").exists()
    # Run again: the run welcome-ada is found completed; greet is not called.
    await page_module("hello", hello_py(), tmp_path / "hello.py").main()
    assert capsys.readouterr().out.splitlines() == shown_output()[1:]


async def test_the_index_example_prints_its_receipt(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    page = (DOCS / "index.md").read_text(encoding="utf-8")
    source = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    # The block ends by running main; the test awaits it instead.
    assert source.endswith("\n\ntrio.run(main)\n")
    module = page_module(
        "index_example", source.removesuffix("trio.run(main)\n"), DOCS / "index.md"
    )
    await module.main()
    assert capsys.readouterr().out == "receipt-1\n"
    # The durable hour the body sleeps, on the mock clock.
    assert trio.current_time() >= 3600
