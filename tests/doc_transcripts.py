"""The shell transcripts of docs/*.md, run: what a page shows a command
printing is what it prints.

A transcript is a ```` ```console ```` block right after the line
``<!-- transcript -->``: lines that start with ``$ `` are commands, the
lines after one are its output (stdout and stderr as a terminal shows
them). The transcripts of a page run in page order, in one fresh folder of
the page's own, so a page's later transcripts see what its earlier ones
made (a store, a file). Each transcript is a session of its own
(tests/doc_sessions.py): a command runs with ``bash -c``, except
``export NAME=VALUE ...`` (later commands of the transcript see the
variables), ``COMMAND &`` (a background job: the transcript shows what it
prints up to the line that says it is ready, and the next command runs
once that line came) and ``kill [-SIGNAL] %N ...; wait`` (the jobs stop,
and the transcript shows what they printed since); the jobs still running
when the transcript ends are stopped. More markers prepare the folder
without showing a command, or say what the page's transcripts need:

- ``<!-- transcript file: NAME -->`` right before a fenced block writes the
  block into the folder as NAME (a page's example script, a config file),
  when the transcripts before it have run;
- ``<!-- transcript setup: COMMAND -->`` runs COMMAND there, unshown, before
  the next transcript (``$REPO`` is the source tree, for its fixtures);
- ``<!-- transcript needs: SERVER ... -->`` (``rabbitmq``, ``nats``): the
  page's transcripts talk to that server, at the URL of `SHOWN_URLS` as
  the page shows it. They run against the one tests/servers gives (its
  variable, ``AMQP_URL`` or ``NATS_URL``; when tests/test_doc_transcripts.py
  runs them, a server started for the tests if none is given, or a skip,
  as for other tests), its URL replaced by the shown one in the output;
- ``<!-- transcript ports: PORT ... -->``: the page shows these TCP ports
  (``--http 127.0.0.1:9464``); its commands run with a free port instead of
  each, replaced by the shown one in the output, so that two runs of the
  transcripts at once never compete for one port.

The commands run with the folder's ``examples`` (a link to the source
tree's) on ``PYTHONPATH``, this interpreter's ``bin/`` first on ``PATH``
(``python`` and ``trio-durable`` are this checkout's), no
``TRIO_DURABLE_*`` variable of the caller, and ``COLUMNS=100`` for the
width of tables; a path under the folder prints relative to it. Output is
compared with what changes from one run to the next normalized away (times
of day, durations, ages and rates; the count of objects an engine or a
worker freezes at start, which its ready line gives; the versions of
Python and trio a worker announces; table borders and padding, which
follow from widths).

    python tests/doc_transcripts.py          # rewrite every page's transcripts
    python tests/doc_transcripts.py --check  # exit 1 if one is out of date

tests/test_doc_transcripts.py runs each page's transcripts and fails on
drift. Nothing else imports this module.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

from doc_sessions import Session, run
from servers import free_ports, module
from trio_durable.brokers import mask_url

ROOT: Final = Path(__file__).resolve().parents[1]
DOCS: Final = ROOT / "docs"

TRANSCRIPT: Final = "<!-- transcript -->"
FILE: Final = re.compile(r"<!-- transcript file: (\S+) -->")
SETUP: Final = re.compile(r"<!-- transcript setup: (.+?) -->")
FENCE: Final = re.compile(r"^(`{3,})[\w-]*$")
NEEDS: Final = re.compile(r"^<!-- transcript needs: ([\w ]+) -->$", re.M)
PORTS: Final = re.compile(r"^<!-- transcript ports: ([\d ]+) -->$", re.M)

SHOWN_URLS: Final = {
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
    "nats": "nats://127.0.0.1:4222",
}
"""The URL a page shows for each server it may need (what CI's servers
answer on)."""


@attrs.frozen
class Block:
    """A marked block of a page: where its text is (between the fences), and
    what the marker asks."""

    start: int
    """Offset of the block's first line in the page."""
    end: int
    """Offset just past its last line (the closing fence begins there)."""
    kind: str
    """``transcript``, ``file`` or ``setup``."""
    argument: str = ""
    """The file's name, or the setup's command."""


def marked_blocks(page: str) -> list[Block]:
    """The marked blocks and setups of ``page``, in order.

    Raises:
      ValueError: A marker is not followed by a fenced block (a setup needs
        none), or a transcript is not a ``console`` block.
    """
    lines = page.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    found: list[Block] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if setup := SETUP.fullmatch(stripped):
            found.append(Block(offsets[i + 1], offsets[i + 1], "setup", setup.group(1)))
            continue
        file = FILE.fullmatch(stripped)
        if stripped != TRANSCRIPT and not file:
            continue
        opening = lines[i + 1] if i + 1 < len(lines) else ""
        fence = FENCE.match(opening.rstrip("\n"))
        if not fence:
            raise ValueError(f"line {i + 1}: {stripped} is not followed by a fenced block")
        if not file and opening.strip() != fence.group(1) + "console":
            raise ValueError(f"line {i + 1}: a transcript is a console block")
        closing = next(
            (j for j in range(i + 2, len(lines)) if lines[j].rstrip("\n") == fence.group(1)),
            None,
        )
        if closing is None:
            raise ValueError(f"line {i + 2}: the block is not closed")
        kind, argument = ("file", file.group(1)) if file else ("transcript", "")
        found.append(Block(offsets[i + 2], offsets[closing], kind, argument))
    return found


def commands(transcript: str) -> list[str]:
    """The commands of a transcript's text, without their ``$ ``."""
    return [line[2:] for line in transcript.splitlines() if line.startswith("$ ")]


def needs(page: str) -> list[str]:
    """The servers ``page``'s transcripts need (``needs`` markers)."""
    return [name for found in NEEDS.findall(page) for name in found.split()]


def server_urls(names: Sequence[str]) -> dict[str, str]:
    """The URL of each server of ``names``: the one its environment variable
    (``AMQP_URL``, ``NATS_URL``) names, else the one the page shows."""
    return {name: os.environ.get(module(name).ENV, SHOWN_URLS[name]) for name in names}


def ports(page: str) -> list[int]:
    """The ports ``page``'s transcripts show (``ports`` markers)."""
    return [int(port) for found in PORTS.findall(page) for port in found.split()]


def substitutions(page: str, servers: Mapping[str, str]) -> list[tuple[re.Pattern[str], str, str]]:
    """What a command of ``page`` shows and what it runs with instead, and
    back for its output: ``(pattern, run, shown)`` triples whose pattern
    finds the shown text in a command (`shown_to_run` replaces it) and
    whose run text `run_to_shown` finds in the output. The shown URL of each
    server the page needs becomes the server's (its password masked too),
    and each port it shows becomes a free one."""
    pairs: list[tuple[str, str]] = []
    for name in needs(page):
        pairs += [(SHOWN_URLS[name], servers[name])]
        pairs += [(mask_url(SHOWN_URLS[name]), mask_url(servers[name]))]
    shown_ports = ports(page)
    found: list[tuple[re.Pattern[str], str, str]] = [
        (re.compile(re.escape(shown)), real, shown) for shown, real in pairs if shown != real
    ]
    for shown_port, free in zip(shown_ports, free_ports(len(shown_ports)), strict=True):
        found.append((re.compile(rf"(?<!\d){shown_port}(?!\d)"), str(free), str(shown_port)))
    return found


def _literally(text: str) -> Callable[[re.Match[str]], str]:
    # A replacement that `re.sub` reads as is (no backslash escapes).
    return lambda _: text


def shown_to_run(text: str, found: list[tuple[re.Pattern[str], str, str]]) -> str:
    """``text`` (a command) with what it shows replaced by what it runs with."""
    for pattern, real, _ in found:
        text = pattern.sub(_literally(real), text)
    return text


def run_to_shown(text: str, found: list[tuple[re.Pattern[str], str, str]]) -> str:
    """``text`` (an output) with what the commands ran with replaced by what
    they show."""
    for _, real, shown in found:
        pattern = rf"(?<!\d){real}(?!\d)" if real.isdigit() else re.escape(real)
        text = re.sub(pattern, _literally(shown), text)
    return text


def transcribed(page: str, folder: Path, servers: Mapping[str, str] | None = None) -> str:
    """``page`` with each transcript's output replaced by what its commands
    print now, its files written and its setups run in ``folder``, against
    ``servers`` (URLs by name; by default `server_urls`)."""
    found = substitutions(page, server_urls(needs(page)) if servers is None else servers)
    out: list[str] = []
    at = 0
    for block in marked_blocks(page):
        text = page[block.start : block.end]
        if block.kind == "setup":
            run(shown_to_run(block.argument, found), folder, check=True)
            continue
        if block.kind == "file":
            (folder / block.argument).write_text(text, encoding="utf-8")
            continue
        lines = []
        session = Session(folder)
        try:
            for command in commands(text):
                lines.append(f"$ {command}")
                printed = run_to_shown(session.run(shown_to_run(command, found)), found)
                printed = printed.replace(f"{folder}/", "")
                lines.extend(line.rstrip() for line in printed.rstrip().splitlines())
        finally:
            session.close()
        out.append(page[at : block.start])
        out.append("\n".join(lines) + "\n")
        at = block.end
    out.append(page[at:])
    return "".join(out)


_VOLATILE: Final = [
    # Times of day, as tables, JSON and log lines print them.
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d([.,]\d+)?([+-]\d\d:\d\d|Z)?"), "<time>"),
    # Durations and rates: "+0.01s", "0.04s", "3.6 s ago", "11 seeds/s".
    (re.compile(r"\d+(\.\d+)? ?s\b"), "<seconds>"),
    (re.compile(r"\d+(\.\d+)? seeds/s"), "<rate>"),
    # What loading an App leaves for the collector, which the ready line
    # of an engine or a worker counts; the versions a worker announces.
    (re.compile(r"\d+ objects frozen"), "<count> objects frozen"),
    (re.compile(r"\b(python|trio) \d+\.\d+\.\d+[\w.+-]*"), r"\1 <version>"),
    # Table borders and padding follow from the widths of the cells.
    (re.compile(r"[─━═]+"), "─"),
    (re.compile(r"[ \t]+"), " "),
]


def normalized(text: str) -> str:
    """``text`` with what changes between runs replaced by placeholders."""
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def transcripts(page: str) -> list[str]:
    """The text of each transcript of ``page``, in order."""
    return [page[b.start : b.end] for b in marked_blocks(page) if b.kind == "transcript"]


def pages() -> list[Path]:
    """The pages of docs/ that have a transcript."""
    return sorted(p for p in DOCS.glob("*.md") if TRANSCRIPT in p.read_text(encoding="utf-8"))


def stale(
    path: Path, servers: Mapping[str, str] | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """The page as its commands write it now (against ``servers``, as for
    `transcribed`), and its transcripts that differ beyond what `normalized`
    hides, as (shown, printed now)."""
    page = path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="transcript-") as folder:
        # Paths such as examples/simulated_orders.py read as from the root.
        (Path(folder) / "examples").symlink_to(ROOT / "examples")
        written = transcribed(page, Path(folder), servers)
    differ = [
        (shown, now)
        for shown, now in zip(transcripts(page), transcripts(written), strict=True)
        if normalized(shown) != normalized(now)
    ]
    return written, differ


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the transcripts (or, with ``--check``, say which are stale)."""
    parser = argparse.ArgumentParser(prog="python tests/doc_transcripts.py")
    parser.add_argument("--check", action="store_true", help="exit 1 if a transcript is stale")
    parser.add_argument("pages", nargs="*", type=Path, help="pages (default: every one)")
    args = parser.parse_args(argv)
    status = 0
    for path in args.pages or pages():
        written, differ = stale(path)
        if args.check:
            for shown, now in differ:
                print(f"{path}: stale transcript:\n{shown}\nprints now:\n{now}", file=sys.stderr)
                status = 1
        elif differ:
            path.write_text(written, encoding="utf-8")
            print(f"{path}: {len(differ)} transcript(s) written")
    return status


if __name__ == "__main__":
    sys.exit(main())
