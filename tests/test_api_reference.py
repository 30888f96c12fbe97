"""The documentation site's reference pages cover the public API: the API
reference (docs/api*.md, rendered by mkdocstrings from the docstrings) has
a block for every name of ``trio_durable.__all__`` and each public
submodule, and every page of docs/ is in mkdocs.yml's navigation. Read from
the Markdown sources: no mkdocs needed (CI's ``mkdocs build --strict``
renders them)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import trio_durable as td
import trio_durable.brokers
import trio_durable.stores

ROOT: Final = Path(__file__).resolve().parents[1]
DOCS: Final = ROOT / "docs"
MKDOCS: Final = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def directives(page: str) -> list[str]:
    """The objects of a page's ``::: dotted.name`` blocks, in order."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"^::: (trio_durable[\w.]*)$", text, re.M)


def test_every_public_name_has_its_block() -> None:
    documented = directives("api.md")
    # Each once, and nothing that is not public.
    assert len(documented) == len(set(documented))
    assert sorted(documented) == sorted(f"trio_durable.{name}" for name in td.__all__)


def test_the_public_submodules_have_their_pages() -> None:
    assert directives("api-stores.md") == ["trio_durable.stores"]
    assert directives("api-brokers.md") == ["trio_durable.brokers"]
    assert directives("api-testing.md") == [
        "trio_durable.testing",
        "trio_durable.testing.conformance",
    ]
    assert directives("api-console.md") == ["trio_durable.console"]


def left_out(page: str) -> set[str]:
    """The names a submodule's page filters out (``"!^(A|B)$"``)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    (names,) = re.findall(r'"!\^\(([\w|]+)\)\$"', text)
    return set(names.split("|"))


def test_a_submodule_page_leaves_out_only_what_api_md_documents() -> None:
    # A name both modules export is rendered once (two would make its
    # cross-references ambiguous), on api.md; the submodule's page names it.
    for page, module in [
        ("api-brokers.md", trio_durable.brokers),
        ("api-stores.md", trio_durable.stores),
    ]:
        shared = set(module.__all__) & set(td.__all__)
        assert left_out(page) == shared, page
        text = (DOCS / page).read_text(encoding="utf-8")
        for name in shared:
            assert f"[trio_durable.{name}]" in text, (page, name)


def test_the_cli_reference_is_written_from_the_command_group() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert "::: mkdocs-click\n    :module: trio_durable._cli\n    :command: cli\n" in text


def test_every_page_is_in_the_navigation() -> None:
    nav = MKDOCS[MKDOCS.index("\nnav:\n") :]
    listed = re.findall(r"^\s+- (?:[\w ]+: )?([\w-]+\.md)$", nav, re.M)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))
