"""Calls of steps and workflows are typed: ``mypy --strict`` accepts a typed
app with the types it should infer (tests/typecheck/typed_app.py) and refuses
each bad call in tests/typecheck/bad_calls.py with the error code marked on
its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

HERE = Path(__file__).parent / "typecheck"
TYPED = HERE / "typed_app.py"
BAD = HERE / "bad_calls.py"

_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")
_MARK = re.compile(r"#\s*E:\s*(?P<code>[a-z-]+)\s*$")


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[tuple[int, str]]]:
    """(line, code) of every error, by file name: one mypy run over both
    files, with a cache of its own so the test does not depend on (or
    disturb) the project's."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    stdout, stderr, status = mypy_api.run(
        [
            "--strict",
            "--python-version=3.11",
            "--config-file=",
            f"--cache-dir={cache}",
            "--show-error-codes",
            "--no-error-summary",
            "--hide-error-context",
            "--no-pretty",
            str(TYPED),
            str(BAD),
        ]
    )
    assert status in (0, 1), stderr or stdout  # 2: mypy itself failed
    errors: dict[str, set[tuple[int, str]]] = {TYPED.name: set(), BAD.name: set()}
    for line in stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            errors[Path(match["path"]).name].add((int(match["line"]), match["code"]))
        else:
            assert ": note: " in line, line
    return errors


def test_a_typed_app_passes_mypy_strict(mypy_errors: dict[str, set[tuple[int, str]]]) -> None:
    assert mypy_errors[TYPED.name] == set()


def test_bad_calls_fail_with_the_marked_codes(
    mypy_errors: dict[str, set[tuple[int, str]]],
) -> None:
    marked = {
        (number, match["code"])
        for number, text in enumerate(BAD.read_text().splitlines(), start=1)
        if (match := _MARK.search(text))
    }
    assert len(marked) >= 15
    assert mypy_errors[BAD.name] == marked
