"""The tables of the config file's keys in docs/configuration.md, written
from the ``engine`` and ``worker`` commands' options between two markers
each::

    python -m trio_durable._cli._config_docs          # rewrite the tables
    python -m trio_durable._cli._config_docs --check  # exit 1 if one is out of date

A key is what `_config_file.config_keys` makes of an option; its flag,
environment variable, default and meaning are the option's own, so a
table cannot say what the command does not do. Nothing imports this
module but its test and its command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

import click

from .._process._options_docs import MarkersMissing, page_command
from ._config_file import SECRET_KEYS, config_keys
from ._processes import engine_command, worker_command

SECTIONS: Final = {"engine": engine_command, "worker": worker_command}


def markers(section: str) -> tuple[str, str]:
    """The lines the table of ``[section]`` is written between."""
    return (
        f"<!-- BEGIN GENERATED [{section}] keys: written from the {section} command's options"
        " by `python -m trio_durable._cli._config_docs`; edit the options, not this table -->",
        f"<!-- END GENERATED [{section}] keys -->",
    )


def _cell(text: str) -> str:
    # A bar in a cell would end it.
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: click.Parameter) -> str:
    if param.required:
        return "(required)"
    # As the command sees it (a flag's unset default is False).
    default = param.to_info_dict().get("default")
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if default is None or default == () or callable(default):
        return "-"
    if isinstance(default, str):
        return f'`"{default}"`'
    return f"`{default}`"


def key_table(section: str) -> str:
    """The Markdown table of ``[section]``'s keys, in the option order of
    ``trio-durable <section> --help``."""
    command = SECTIONS[section]
    lines = [
        "| key | flag | environment | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for key, param in config_keys(command).items():
        if isinstance(param, click.Option):
            flag = ", ".join(f"`{o}`" for o in param.opts)
            help_text = param.help or ""
        else:
            flag = "`MODULE:APP`"
            help_text = "The App to run: a module (or a .py file) and the name of its td.App."
        env = f"`{param.envvar}`" if isinstance(param.envvar, str) else "-"
        lines.append(f"| `{key}` | {flag} | {env} | {_default(param)} | {_cell(help_text)} |")
    for key, env in SECRET_KEYS.items():
        what = "payload codec's" if key == "codec_keys" else "message signing's"
        lines.append(
            f"| `{key}` | - | `{env}` | - | The {what} keyring, `id:base64` pairs, the current"
            " key first; no flag carries it. |"
        )
    return "\n".join(lines)


def with_tables(page: str) -> str:
    """``page`` with the text between each section's markers replaced by
    its `key_table`.

    Raises:
      MarkersMissing: A pair of markers is missing, repeated or reversed.
    """
    for section in SECTIONS:
        begin, end = markers(section)
        if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
            raise MarkersMissing(f"the page needs one line {begin!r} and, after it, one {end!r}")
        head, _, rest = page.partition(begin)
        _, _, tail = rest.partition(end)
        page = f"{head}{begin}\n\n{key_table(section)}\n\n{end}{tail}"
    return page


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the tables (or, with ``--check``, say whether they are
    current)."""
    return page_command(
        argv,
        prog="python -m trio_durable._cli._config_docs",
        what="a config key table",
        rewrite=with_tables,
    )


if __name__ == "__main__":
    sys.exit(main())
