"""The marked transcripts of docs/*.md are what their commands print now
(tests/doc_transcripts.py runs them; ``python tests/doc_transcripts.py``
rewrites the stale ones), and the marker syntax is read as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

import doc_transcripts
from doc_transcripts import commands, marked_blocks, needs, normalized, pages, stale, transcripts

PAGES = pages()


def test_the_pages_with_transcripts() -> None:
    # The pages whose console blocks run (a page that loses its markers
    # drops out of the test silently otherwise).
    assert {p.name for p in PAGES} >= {
        "quickstart.md",
        "operations.md",
        "configuration.md",
        "simulation.md",
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_s_transcripts_are_current(page: Path, request: pytest.FixtureRequest) -> None:
    # The servers a page needs (its ``needs`` markers) as other tests get
    # them: from AMQP_URL and the like, else started for the session; a
    # missing one skips the page, and fails it under CI=true.
    names = needs(page.read_text(encoding="utf-8"))
    real_server = request.getfixturevalue("real_server") if names else None
    servers = {name: real_server(name) for name in names} if real_server else {}
    _, differ = stale(page, servers)
    assert differ == [], (
        f"run `python tests/doc_transcripts.py {page.relative_to(page.parents[1])}`"
    )


def test_every_transcript_has_a_command() -> None:
    for page in PAGES:
        for text in transcripts(page.read_text(encoding="utf-8")):
            assert commands(text), (page.name, text)


PAGE = """\
intro
<!-- transcript file: app.toml -->
```toml
x = 1
```
<!-- transcript setup: touch made -->
<!-- transcript -->
```console
$ cat app.toml
old output
$ ls made
made
```
"""


def test_the_markers(tmp_path: Path) -> None:
    kinds = [(b.kind, b.argument) for b in marked_blocks(PAGE)]
    assert kinds == [("file", "app.toml"), ("setup", "touch made"), ("transcript", "")]
    [text] = transcripts(PAGE)
    assert commands(text) == ["cat app.toml", "ls made"]
    written = doc_transcripts.transcribed(PAGE, tmp_path)
    assert transcripts(written) == ["$ cat app.toml\nx = 1\n$ ls made\nmade\n"]
    assert written.startswith("intro\n<!-- transcript file: app.toml -->\n```toml\nx = 1\n```\n")


@pytest.mark.parametrize(
    "broken",
    [
        "<!-- transcript -->\n```text\n$ true\n```\n",
        "<!-- transcript -->\n\n```console\n$ true\n```\n",
        "<!-- transcript -->\n```console\n$ true\n",
        "<!-- transcript file: x.py -->\nnot a block\n",
    ],
)
def test_a_misplaced_marker_is_refused(broken: str) -> None:
    with pytest.raises(ValueError, match=r"^line \d+: "):
        marked_blocks(broken)


def test_what_normalizing_hides_in_processes_lines() -> None:
    shown = (
        "2026-12-07 23:44:04,583 WARNING x\n"
        "trio-durable: worker w ready: collector thresholds 10000,50,100, 48413 objects frozen\n"
        "│ w │ 4.4 s ago │ python 3.11.7, trio 0.35.0 │"
    )
    now = (
        "2027-01-01 00:00:00,001 WARNING x\n"
        "trio-durable: worker w ready: collector thresholds 10000,50,100, 512 objects frozen\n"
        "│ w │ 12.0 s ago │ python 3.13.1rc1, trio 0.31.0+dev │"
    )
    assert normalized(shown) == normalized(now)
    assert normalized("thresholds 10000,50,100") != normalized("thresholds 700,10,10")


def test_a_session_s_jobs_and_exports(tmp_path: Path) -> None:
    job = "trap 'echo stopped; exit 0' TERM; echo job $SAID; echo later; sleep 60 & wait &"
    page = f"<!-- transcript -->\n```console\n$ export SAID=ready\n$ {job}\n$ echo $SAID\n"
    page += "$ kill -TERM %1; wait\n$ echo done &\n```\n"
    [text] = transcripts(doc_transcripts.transcribed(page, tmp_path))
    # A job shows its lines up to the ready one; the rest, when it stops.
    # One that never says ready shows all it printed, once it ended.
    assert text == (
        f"$ export SAID=ready\n$ {job}\njob ready\n$ echo $SAID\nready\n"
        "$ kill -TERM %1; wait\nlater\nstopped\n$ echo done &\ndone\n"
    )


def test_what_normalizing_hides() -> None:
    shown = "│ a │ 2026-12-03 14:06:04 │ +0.01s │ 3.6 s ago │ (11 seeds/s) │\n┏━━━━┓"
    now = "│ a   │ 2027-01-01 00:00:00 │ +0.02s │ 12.0 s ago │ (9.6 seeds/s) │\n┏━━━━━━┓  "
    assert normalized(shown) == normalized(now)
    # What the page says of the outcome is compared, numbers of it included.
    assert normalized("schema (version 13)") != normalized("schema (version 14)")
    assert normalized("pruned 4 runs") != normalized("pruned 5 runs")
