"""``MODULE:APP``: finding the user's `App` for ``engine`` and ``worker``.

``MODULE`` is either a dotted module name, imported with the current
directory first on ``sys.path`` (as uvicorn and celery do, so that
``trio-durable engine shop.workflows:app`` works from a project's root), or
the path of a ``.py`` file (``examples/shop.py:app``), imported under its
file name with its directory first on ``sys.path`` so that it can import its
neighbours. ``APP`` is an attribute of the module, dotted for a nested one;
without ``:APP`` it is ``app``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from .._front._app import App
from ._common import EXIT_USAGE, CommandError

DEFAULT_ATTRIBUTE = "app"


def load_app(spec: str) -> App:
    """The `App` that ``spec`` (``MODULE:APP``) names.

    Raises:
      CommandError: (exit code 2) ``spec`` is malformed, its module does not
        import, lacks the attribute, or the attribute is not an `App`.
    """
    module_name, attribute, found = _load(spec, DEFAULT_ATTRIBUTE, "MODULE:APP", "the App's name")
    if not isinstance(found, App):
        raise CommandError(
            f"{module_name}:{attribute} is {type(found).__name__} {found!r:.60}, not a td.App",
            EXIT_USAGE,
        )
    return found


def load_callable(spec: str, default: str, what: str) -> Callable[..., Any]:
    """The callable that ``spec`` (``MODULE:NAME``, NAME ``default`` if not
    given) names: a simulation's workload, say.

    Raises:
      CommandError: (exit code 2) ``spec`` is malformed, its module does not
        import, lacks the attribute, or the attribute is not callable.
    """
    module_name, attribute, found = _load(spec, default, f"MODULE:{what}", f"the {what}'s name")
    if not callable(found):
        raise CommandError(
            f"{module_name}:{attribute} is {type(found).__name__} {found!r:.60}, not callable",
            EXIT_USAGE,
        )
    return cast("Callable[..., Any]", found)


def _load(spec: str, default: str, form: str, name: str) -> tuple[str, str, object]:
    module_name, colon, attribute = spec.partition(":")
    if not colon:
        attribute = default
    if not module_name or not attribute or any(not part for part in attribute.split(".")):
        raise CommandError(
            f"{spec!r} is not {form} (a module or a .py file, a colon, {name})",
            EXIT_USAGE,
        )
    module = _import(module_name)
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CommandError(
                f"module {module_name!r} has no attribute {attribute!r}", EXIT_USAGE
            ) from None
    return module_name, attribute, found


def _is_path(module_name: str) -> bool:
    return module_name.endswith(".py") or "/" in module_name or os.sep in module_name


def _import(module_name: str) -> ModuleType:
    if _is_path(module_name):
        return _import_file(Path(module_name))
    # The current directory first, as `python -m` has it: the user's own
    # package, not an installed one of the same name.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise CommandError(
                f"no module named {module_name!r} in the current directory or on sys.path",
                EXIT_USAGE,
            ) from None
        raise _import_failed(module_name, exc) from None
    except Exception as exc:
        raise _import_failed(module_name, exc) from None


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise CommandError(f"no file {str(path)!r}", EXIT_USAGE)
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None:
        where = getattr(existing, "__file__", None)
        if where is not None and Path(where).resolve() == path.resolve():
            return existing
        # Running it under the name of another module (``trio.py``) would
        # replace that module for everything already using it.
        raise CommandError(
            f"{str(path)!r} would be imported as module {name!r}, which is already"
            f" imported from {where or 'elsewhere'}: rename the file",
            EXIT_USAGE,
        )
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CommandError(f"{str(path)!r} cannot be imported as a module", EXIT_USAGE)
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would: attrs, dataclasses and
    # typing look their module up while the classes are made.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise _import_failed(str(path), exc) from None
    return module


def _import_failed(module_name: str, exc: Exception) -> CommandError:
    """The error for a module that raised while it was imported: the
    exception and where it was raised, with no traceback."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    # A SyntaxError's own message says where it is.
    if frames and not isinstance(exc, SyntaxError):
        last = frames[-1]
        where = f" ({last.filename}, line {last.lineno})"
    return CommandError(
        f"importing {module_name!r} failed: {type(exc).__name__}: {exc}{where}", EXIT_USAGE
    )
