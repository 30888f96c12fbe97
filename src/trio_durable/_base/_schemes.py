"""Which code opens a store or broker URL: one rule for both kinds.

A URL's scheme (what comes before ``://``, lower-cased) picks its opener, a
callable taking the URL and returning an async context manager that yields
the store or broker:

1. A scheme built into trio-durable (stores ``memory``, ``sqlite``,
   ``postgresql`` and ``postgres``; broker ``memory``) is found in the
   kind's table of built-ins, without entry-point metadata: it works in any
   install (a wheel, a checkout on ``sys.path``, a vendored copy), and no
   installed package can take it over.
2. Any other scheme is looked up among the entry points of the kind's group
   (``trio_durable.stores``, ``trio_durable.brokers``), which installed
   packages register (``trio-durable-rabbitmq`` registers ``amqp``).

A scheme that needs a package which is not installed, or whose import fails
for a missing module, raises `InvalidURLError` naming what to install; the
kind's `Kind.install` table knows the packages of the schemes trio-durable
documents, and an entry point names its own distribution.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol, final

import attrs

from ._exceptions import InvalidURLError
from ._urls import mask_url


class Opener(Protocol):
    """Opens a store or broker: called with its URL."""

    def __call__(self, url: str) -> AbstractAsyncContextManager[Any]: ...


@final
@attrs.frozen(kw_only=True)
class Install:
    """What a scheme needs installed, for the message that says so.

    Attributes:
      what: What it is, in a sentence (``the 'postgres' extra``).
      pip: The argument to ``pip install`` (``'trio-durable[postgres]'``).
    """

    what: str
    pip: str


@final
@attrs.frozen(kw_only=True)
class Kind:
    """The URL schemes of one kind of thing a URL opens.

    Attributes:
      noun: ``"store"`` or ``"broker"``, for messages.
      group: The entry-point group where packages register schemes.
      builtins: Built-in schemes and their openers, as ``module:attribute``
        (imported on first use, so a built-in whose client library is an
        extra costs nothing until its URL is opened).
      install: What to install for a scheme whose package or client library
        is missing.
      renamed: Schemes that were renamed, and their new names.
      example: A URL of this kind, for the message about a string that is
        no URL.
    """

    noun: str
    group: str
    builtins: Mapping[str, str]
    install: Mapping[str, Install] = attrs.field(factory=dict)
    renamed: Mapping[str, str] = attrs.field(factory=dict)
    example: str


def _is_core(module: str | None) -> bool:
    return module is not None and (module == "trio_durable" or module.startswith("trio_durable."))


def _missing(exc: ImportError) -> str | None:
    # An adapter may wrap the ImportError in one of its own.
    name = exc.name or getattr(exc.__cause__, "name", None)
    return name if isinstance(name, str) else None


def _load_builtin(kind: Kind, scheme: str) -> Opener:
    module, _, attribute = kind.builtins[scheme].partition(":")
    try:
        opener: Opener = getattr(importlib.import_module(module), attribute)
    except ImportError as exc:
        needs = kind.install.get(scheme)
        if needs is None or _is_core(_missing(exc)):
            raise
        raise _needs(kind, scheme, needs, exc) from exc
    return opener


def _load_entry_point(kind: Kind, scheme: str, entry: EntryPoint) -> Opener:
    try:
        opener: Opener = entry.load()
    except ImportError as exc:
        if _is_core(_missing(exc)):
            raise
        needs = kind.install.get(scheme)
        if needs is None and entry.dist is not None:
            dist = entry.dist.name
            needs = Install(what=f"the {dist} package", pip=dist)
        if needs is None:
            raise
        raise _needs(kind, scheme, needs, exc) from exc
    return opener


def _needs(kind: Kind, scheme: str, needs: Install, exc: ImportError | None) -> InvalidURLError:
    # The message names the scheme, never the URL: it may hold a password.
    if exc is None:
        why = "it is not installed"
    else:
        missing = _missing(exc)
        why = f"no module named {missing!r}" if missing else str(exc)
    return InvalidURLError(
        f"the {kind.noun} scheme {scheme!r} needs {needs.what}: pip install {needs.pip} ({why})"
    )


def registered(kind: Kind) -> list[EntryPoint]:
    """The entry points installed packages register for ``kind``."""
    return list(entry_points(group=kind.group))


def find_opener(kind: Kind, url: str) -> Opener:
    """The opener of ``url``'s scheme (see the module's docstring).

    Raises:
      InvalidURLError: The URL has no scheme, nothing serves its scheme, or
        what its scheme needs is not installed (the message says what).
    """
    if not isinstance(url, str) or "://" not in url:
        shown = mask_url(url) if isinstance(url, str) else url
        raise InvalidURLError(f"not a {kind.noun} URL: {shown!r} (expected e.g. {kind.example!r})")
    scheme = url.partition("://")[0].lower()
    if scheme in kind.builtins:
        return _load_builtin(kind, scheme)
    entries = registered(kind)
    for entry in entries:
        if entry.name == scheme:
            return _load_entry_point(kind, scheme, entry)
    if scheme in kind.renamed:
        raise InvalidURLError(
            f"the {kind.noun} scheme {scheme!r} is now {kind.renamed[scheme]!r}:"
            f" write {kind.renamed[scheme]}://... in {mask_url(url)!r}"
        )
    needs = kind.install.get(scheme)
    if needs is not None:
        raise _needs(kind, scheme, needs, None)
    known = sorted({*kind.builtins, *(entry.name for entry in entries)})
    raise InvalidURLError(
        f"no {kind.noun} is registered for the scheme {scheme!r} in {mask_url(url)!r}"
        f" (known: {', '.join(known)}; packages add theirs under the entry-point group"
        f" {kind.group!r})"
    )
