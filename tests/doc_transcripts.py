"""The shell transcripts of docs/*.md, run: what a page shows a command
printing is what it prints.

A transcript is a ```` ```console ```` block right after the line
``<!-- transcript -->``: lines that start with ``$ `` are commands, the
lines after one are its output (stdout and stderr as a terminal shows
them). The transcripts of a page run in page order, each command with
``bash -c`` in one fresh folder of the page's own, so a page's later
transcripts see what its earlier ones made (a store, a file). Two more
markers prepare that folder without showing a command:

- ``<!-- transcript file: NAME -->`` right before a fenced block writes the
  block into the folder as NAME (a page's example script, a config file),
  when the transcripts before it have run;
- ``<!-- transcript setup: COMMAND -->`` runs COMMAND there, unshown, before
  the next transcript (``$REPO`` is the source tree, for its fixtures).

The commands run with the source tree's ``examples/`` on ``PYTHONPATH``
and as ``examples`` in the folder,
this interpreter's ``bin/`` first on ``PATH`` (``python`` and
``trio-durable`` are this checkout's), no ``TRIO_DURABLE_*`` variable of the
caller, and ``COLUMNS=100`` for the width of tables. Output is compared
with what changes from one run to the next normalized away (times of day,
durations, rates; table borders and padding, which follow from widths).

    python tests/doc_transcripts.py          # rewrite every page's transcripts
    python tests/doc_transcripts.py --check  # exit 1 if one is out of date

tests/test_doc_transcripts.py runs each page's transcripts and fails on
drift. Nothing else imports this module.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

ROOT: Final = Path(__file__).resolve().parents[1]
DOCS: Final = ROOT / "docs"

TRANSCRIPT: Final = "<!-- transcript -->"
FILE: Final = re.compile(r"<!-- transcript file: (\S+) -->")
SETUP: Final = re.compile(r"<!-- transcript setup: (.+?) -->")
FENCE: Final = re.compile(r"^(`{3,})[\w-]*$")

WITHIN: Final = 120.0
"""Seconds one command may take."""


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


def environment() -> dict[str, str]:
    """What the commands run with (see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIO_DURABLE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT / "examples")
    env["REPO"] = str(ROOT)
    env["COLUMNS"] = "100"
    env["NO_COLOR"] = "1"
    # What would make rich draw for a terminal when the output is a pipe.
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "CLICOLOR_FORCE"):
        env.pop(forcing, None)
    return env


def run(command: str, folder: Path, *, check: bool = False) -> str:
    """What ``command`` prints in ``folder``, stdout and stderr as they come
    (with ``check``, a setup: it must exit 0)."""
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        timeout=WITHIN,
        check=False,
    )
    out = done.stdout.decode()
    if check and done.returncode != 0:
        raise AssertionError(f"setup {command!r} exited {done.returncode}:\n{out}")
    # A transcript shows what a command says, never a crash of trio-durable.
    if "Traceback (most recent call last)" in out:
        raise AssertionError(f"$ {command}\n{out}")
    return out


def transcribed(page: str, folder: Path) -> str:
    """``page`` with each transcript's output replaced by what its commands
    print now, its files written and its setups run in ``folder``."""
    out: list[str] = []
    at = 0
    for block in marked_blocks(page):
        text = page[block.start : block.end]
        if block.kind == "setup":
            run(block.argument, folder, check=True)
            continue
        if block.kind == "file":
            (folder / block.argument).write_text(text, encoding="utf-8")
            continue
        lines = []
        for command in commands(text):
            lines.append(f"$ {command}")
            lines.extend(line.rstrip() for line in run(command, folder).rstrip().splitlines())
        out.append(page[at : block.start])
        out.append("\n".join(lines) + "\n")
        at = block.end
    out.append(page[at:])
    return "".join(out)


_VOLATILE: Final = [
    # Times of day, as tables and JSON print them.
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<time>"),
    # Durations and rates: "+0.01s", "0.04s", "3.6 s ago", "11 seeds/s".
    (re.compile(r"\d+(\.\d+)? ?s\b"), "<seconds>"),
    (re.compile(r"\d+(\.\d+)? seeds/s"), "<rate>"),
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


def stale(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """The page as its commands write it now, and its transcripts that
    differ beyond what `normalized` hides, as (shown, printed now)."""
    page = path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="transcript-") as folder:
        # Paths such as examples/simulated_orders.py read as from the root.
        (Path(folder) / "examples").symlink_to(ROOT / "examples")
        written = transcribed(page, Path(folder))
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
