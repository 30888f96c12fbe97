"""The table of `open_engine`'s options in docs/configuration.md, written
from their declaration (`_engine_options`) between two markers::

    python -m trio_durable._process._options_docs          # rewrite the table
    python -m trio_durable._process._options_docs --check  # exit 1 if it is out of date

The table lists the parameters in the order of `open_engine`'s signature
(which tests/test_options_declared_once.py checks against the
declaration). Nothing imports this module but that test and its command.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs

from .._kernel._engine_options import EngineOption, engine_options
from ._open_engine import open_engine

BEGIN: Final = (
    "<!-- BEGIN GENERATED open_engine options: written from src/trio_durable/_kernel/_engine_options.py"
    " by `python -m trio_durable._process._options_docs`; edit the declaration, not this table -->"
)
END: Final = "<!-- END GENERATED open_engine options -->"

PAGE: Final = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
"""docs/configuration.md of the source tree this module is in."""


class MarkersMissing(ValueError):
    """The page lacks the markers of the generated table, or has them out
    of order or more than once."""


def shown_default(option: EngineOption) -> str:
    """An option's default as the table shows it."""
    if option.declared.shown is not None:
        return option.declared.shown
    if option.default is attrs.NOTHING:
        return "(required)"
    if isinstance(option.default, str):
        return f"`{json.dumps(option.default)}`"
    return f"`{option.default!r}`"


def option_table() -> str:
    """The Markdown table of `open_engine`'s parameters, in signature order."""
    declared = engine_options()
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for name in inspect.signature(open_engine).parameters:
        option = declared[name]
        # A bar in a cell would end it.
        doc = option.declared.doc.replace("|", "\\|")
        lines.append(f"| `{name}` | {shown_default(option)} | {doc} |")
    return "\n".join(lines)


def with_table(page: str) -> str:
    """``page`` with the text between its markers replaced by `option_table`.

    Raises:
      MarkersMissing: ``page`` lacks one marker, or has either more than
        once, or the end before the beginning.
    """
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise MarkersMissing(f"the page needs one line {BEGIN!r} and, after it, one {END!r}")
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    # Blank lines around the table: no marker reads as one of its rows.
    return f"{head}{BEGIN}\n\n{option_table()}\n\n{END}{tail}"


def page_command(
    argv: Sequence[str] | None, *, prog: str, what: str, rewrite: Callable[[str], str]
) -> int:
    """The command that keeps generated tables of a page current: rewrite
    the page with ``rewrite`` (or, with ``--check``, exit 1 if that would
    change it; 2 if its markers are missing)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page (default: %(default)s)")
    args = parser.parse_args(argv)
    page = args.page.read_text(encoding="utf-8")
    try:
        written = rewrite(page)
    except MarkersMissing as exc:
        print(f"{args.page}: {exc}", file=sys.stderr)
        return 2
    if written == page:
        return 0
    if args.check:
        print(f"{args.page}: {what} is stale; run without --check", file=sys.stderr)
        return 1
    args.page.write_text(written, encoding="utf-8")
    print(f"{args.page}: {what} written")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the table (or, with ``--check``, say whether it is current)."""
    return page_command(
        argv,
        prog="python -m trio_durable._process._options_docs",
        what="the open_engine table",
        rewrite=with_table,
    )


if __name__ == "__main__":
    sys.exit(main())
